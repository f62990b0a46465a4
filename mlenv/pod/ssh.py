"""sshd for the DeepSpeed launcher, keyed from the mounted Secret, as any (random) UID.

OpenShift runs the pod as a random UID with no /etc/passwd entry and a read-only /etc,
so nothing here writes outside ``state_dir``: our own sshd_config, a copy of the host
key (the Secret mount's mode and owner are not ours), ``authorized_keys`` built from
the deployment's public key, and a pinned ``known_hosts``. The launcher's ssh client
gets its own config file (passed with ``-F``) because ssh looks for ``~/.ssh`` in the
passwd home, which a random UID may not have.
"""

from __future__ import annotations

import getpass
import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from mlenv.errors import InfraError, InputError
from mlenv.pod.hostfile import write_text

KEY_FILES = ("id_ed25519", "id_ed25519.pub", "ssh_host_ed25519_key", "ssh_host_ed25519_key.pub")


@dataclass(frozen=True)
class SshPaths:
    """Where the ssh material lives under ``state_dir``."""

    state_dir: str

    @property
    def dir(self) -> str:
        """The private (0700) ssh directory."""
        return os.path.join(self.state_dir, "ssh")

    @property
    def sshd_config(self) -> str:
        return os.path.join(self.dir, 'sshd_config')

    @property
    def host_key(self) -> str:
        return os.path.join(self.dir, 'ssh_host_ed25519_key')

    @property
    def identity(self) -> str:
        return os.path.join(self.dir, 'id_ed25519')

    @property
    def authorized_keys(self) -> str:
        return os.path.join(self.dir, 'authorized_keys')

    @property
    def known_hosts(self) -> str:
        return os.path.join(self.dir, 'known_hosts')

    @property
    def client_config(self) -> str:
        return os.path.join(self.dir, 'ssh_config')

    @property
    def pid_file(self) -> str:
        return os.path.join(self.dir, 'sshd.pid')

    @property
    def log_file(self) -> str:
        return os.path.join(self.dir, 'sshd.log')


def read_secret(ssh_dir: str) -> dict[str, str]:
    """The four key files of the ``ml-dev-env-ssh`` Secret; InputError names what is missing."""
    out: dict[str, str] = {}
    missing = []
    for name in KEY_FILES:
        p = os.path.join(ssh_dir, name)
        try:
            with open(p, encoding="utf-8") as f:
                out[name] = f.read()
        except OSError:
            missing.append(name)
    if missing:
        raise InputError(
            f"{ssh_dir}: missing {', '.join(missing)} (the ml-dev-env-ssh Secret, created by "
            "'mlenv deploy', must be mounted there; MLENV_SSH_DIR points elsewhere?)"
        )
    for name in ("id_ed25519.pub", "ssh_host_ed25519_key.pub"):
        if not out[name].strip().startswith("ssh-"):
            raise InputError(f"{os.path.join(ssh_dir, name)}: expected an OpenSSH public key line")
    return out


def sshd_config(paths: SshPaths, port: int, user: str, set_env: Mapping[str, str]) -> str:
    """sshd_config text for an unprivileged sshd that only admits the deployment key."""
    lines = [
        f"Port {port}",
        f"HostKey {paths.host_key}",
        f"AuthorizedKeysFile {paths.authorized_keys}",
        f"PidFile {paths.pid_file}",
        f"AllowUsers {user}",
        # PAM needs root and a PAM stack for the random UID; keys are the only way in.
        "UsePAM no",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "PermitEmptyPasswords no",
        # The files are ours and 0600, but the home of a random UID is group-writable
        # (OpenShift's GID 0 convention) and StrictModes would refuse every login.
        "StrictModes no",
        "PermitUserEnvironment no",
        "X11Forwarding no",
        "AllowTcpForwarding no",
        "AllowAgentForwarding no",
        "PrintMotd no",
        "LogLevel ERROR",
    ]
    for k, v in set_env.items():
        # Per-pod values (NCCL_IB_HCA from device discovery) reach this pod's ranks here:
        # the launcher's exports come from pod-0 and would be wrong on the others.
        lines.append(f"SetEnv {k}={v}")
    return "\n".join(lines) + "\n"


def client_config(paths: SshPaths, port: int, host_patterns: list[str]) -> str:
    """ssh client config for the launcher: our port, key and pinned known_hosts."""
    pats = " ".join(host_patterns)
    return (
        f"Host {pats}\n"
        f"  Port {port}\n"
        f"  IdentityFile {paths.identity}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {paths.known_hosts}\n"
        "  StrictHostKeyChecking yes\n"
        "  GlobalKnownHostsFile /dev/null\n"
        "  PasswordAuthentication no\n"
        "  BatchMode yes\n"
        "  ConnectTimeout 10\n"
        "  ServerAliveInterval 15\n"
        "  LogLevel ERROR\n"
    )


def known_hosts(host_pub: str, port: int, host_patterns: list[str]) -> str:
    """One known_hosts line pinning the deployment's host key for ``[pattern]:port``.

    Every pod shares one host key (it comes from the Secret), so one wildcard line
    covers all peers without ever disabling host key checking.
    """
    parts = host_pub.split()
    key = " ".join(parts[:2])
    pats = ",".join(f"[{p}]:{port}" for p in host_patterns)
    return f"{pats} {key}\n"


def ensure_passwd_entry(home: str, passwd_path: str = "/etc/passwd") -> str | None:
    """Make the current UID resolvable (sshd refuses users it cannot look up).

    Returns a note of what was done, or None when the UID already resolves. Appends to
    ``passwd_path`` when writable (the OpenShift images' g+w /etc/passwd trick).
    """
    uid = os.getuid()
    try:
        pwd.getpwuid(uid)
        return None
    except KeyError:
        pass
    line = f"mlenv:x:{uid}:{os.getgid()}:mlenv pod user:{home}:/bin/bash\n"
    if os.access(passwd_path, os.W_OK):
        with open(passwd_path, "a", encoding="utf-8") as f:
            f.write(line)
        return f"added UID {uid} to {passwd_path}"
    raise InfraError(
        f"UID {uid} has no /etc/passwd entry and {passwd_path} is not writable; sshd cannot "
        "admit an unknown user (make /etc/passwd group-writable in the image, or preload nss_wrapper)"
    )


def current_user() -> str:
    """The login name of the current UID."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return getpass.getuser()


def install(paths: SshPaths, secret: Mapping[str, str], port: int, host_patterns: list[str],
            set_env: Mapping[str, str], user: str) -> None:
    """Write every ssh file under ``paths.dir`` with the modes ssh insists on."""
    os.makedirs(paths.dir, mode=0o700, exist_ok=True)
    os.chmod(paths.dir, 0o700)
    write_text(paths.host_key, secret["ssh_host_ed25519_key"], 0o600)
    write_text(paths.identity, secret["id_ed25519"], 0o600)
    write_text(paths.authorized_keys, secret["id_ed25519.pub"], 0o600)
    write_text(paths.known_hosts, known_hosts(secret["ssh_host_ed25519_key.pub"], port, host_patterns), 0o644)
    write_text(paths.client_config, client_config(paths, port, host_patterns), 0o644)
    write_text(paths.sshd_config, sshd_config(paths, port, user, set_env), 0o600)


def sshd_binary() -> str:
    """Absolute path of sshd (it refuses to re-exec itself from a relative path)."""
    found = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if not found:
        raise InfraError("sshd not found (install openssh-server in the image)")
    return os.path.abspath(found)


def sshd_argv(paths: SshPaths, foreground: bool) -> list[str]:
    """The sshd command line; ``foreground`` keeps it attached (container main process)."""
    argv = [sshd_binary(), "-f", paths.sshd_config]
    if foreground:
        argv += ["-D", "-e"]
    else:
        argv += ["-E", paths.log_file]
    return argv


def check_config(paths: SshPaths) -> None:
    """``sshd -t``: refuse to start on a config sshd itself rejects."""
    r = subprocess.run([sshd_binary(), "-t", "-f", paths.sshd_config], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise InfraError(f"sshd rejected {paths.sshd_config}: {r.stderr.strip()}")


def start_daemon(paths: SshPaths) -> None:
    """Start sshd in the background (it forks and writes its pid file)."""
    stop(paths)
    r = subprocess.run(sshd_argv(paths, foreground=False), capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise InfraError(f"sshd failed to start: {r.stderr.strip() or 'see ' + paths.log_file}")


def stop(paths: SshPaths) -> bool:
    """Stop the sshd whose pid file is ours; True when one was running."""
    try:
        with open(paths.pid_file, encoding="utf-8") as f:
            pid = int(f.read().strip() or "0")
    except (OSError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return False
    return True
