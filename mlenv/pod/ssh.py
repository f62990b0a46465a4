"""sshd for the DeepSpeed launcher, keyed from the mounted Secret, as any (random) UID.

OpenShift runs the pod as a random UID with no /etc/passwd entry and a read-only /etc,
so nothing here writes outside ``state_dir`` (except the passwd line below): our own
sshd_config, a copy of the host key (the Secret mount's mode and owner are not ours),
``authorized_keys`` built from the deployment's public key, and a pinned
``known_hosts``. The launcher's ssh client gets its own config file (passed with
``-F``) because ssh looks for ``~/.ssh`` in the passwd home, which a random UID may not
have.

sshd must be able to look the UID up by name, and the name must lead back to that UID
(a non-root sshd can only log in as itself). The image's ``useradd`` already owns the
name ``mlenv`` (UID 1001), so a random UID gets a name of its own, ``mlenv-<uid>``,
used alike for the passwd entry, ``AllowUsers`` and pdsh's ``-l``. The entry goes into
/etc/passwd when the image made it group-writable; when it cannot be written
(read-only root filesystem, an image without the g+w trick) into a private copy served
by nss_wrapper (``LD_PRELOAD`` + ``NSS_WRAPPER_PASSWD``/``NSS_WRAPPER_GROUP``) to sshd,
to the launcher's pdsh/ssh (both refuse a UID they cannot look up) and, through
sshd's ``SetEnv``, to every rank sshd starts.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mlenv.errors import InfraError, InputError
from mlenv.pod.hostfile import write_text

KEY_FILES = ("id_ed25519", "id_ed25519.pub", "ssh_host_ed25519_key", "ssh_host_ed25519_key.pub")
# Where distributions put libnss_wrapper.so (Debian/Ubuntu multiarch, RHEL lib64).
NSS_WRAPPER_GLOBS = (
    "/usr/lib/*-linux-gnu/libnss_wrapper.so",
    "/usr/lib64/libnss_wrapper.so",
    "/usr/lib/libnss_wrapper.so",
    "/usr/local/lib/libnss_wrapper.so",
)
NSS_VARS = ("LD_PRELOAD", "NSS_WRAPPER_PASSWD", "NSS_WRAPPER_GROUP")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
        return os.path.join(self.dir, "sshd_config")

    @property
    def host_key(self) -> str:
        return os.path.join(self.dir, "ssh_host_ed25519_key")

    @property
    def identity(self) -> str:
        return os.path.join(self.dir, "id_ed25519")

    @property
    def authorized_keys(self) -> str:
        return os.path.join(self.dir, "authorized_keys")

    @property
    def known_hosts(self) -> str:
        return os.path.join(self.dir, "known_hosts")

    @property
    def client_config(self) -> str:
        return os.path.join(self.dir, "ssh_config")

    @property
    def pid_file(self) -> str:
        return os.path.join(self.dir, "sshd.pid")

    @property
    def log_file(self) -> str:
        return os.path.join(self.dir, "sshd.log")


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_secret(ssh_dir: str, read: Callable[[str], str] = _read_text) -> dict[str, str]:
    """The four key files of the ``ml-dev-env-ssh`` Secret.

    Raises InputError naming the files that are missing and, separately, those that
    exist but this UID may not read: a Secret volume's files belong to root, so only the
    pod's fsGroup (or a defaultMode that lets others read) opens them to a random UID.
    ``read`` is injectable for tests (root reads any file).
    """
    out: dict[str, str] = {}
    missing: list[str] = []
    denied: list[str] = []
    for name in KEY_FILES:
        try:
            out[name] = read(os.path.join(ssh_dir, name))
        except OSError as e:
            (denied if e.errno in (errno.EACCES, errno.EPERM) else missing).append(name)
    problems = []
    if missing:
        problems.append(
            f"{ssh_dir}: missing {', '.join(missing)} (the ml-dev-env-ssh Secret, created by "
            "'mlenv deploy', must be mounted there; MLENV_SSH_DIR points elsewhere?)"
        )
    if denied:
        groups = ", ".join(str(g) for g in sorted({os.getgid(), *os.getgroups()}))
        problems.append(
            f"{ssh_dir}: permission denied reading {', '.join(denied)} as UID {os.getuid()} (groups {groups}); "
            "the Secret volume's files are owned by root: give the pod an fsGroup (the restricted SCC "
            "assigns one, and the kubelet then makes the files group-readable) or a Secret defaultMode "
            "that lets this UID read them"
        )
    if problems:
        raise InputError("; ".join(problems))
    for name in ("id_ed25519.pub", "ssh_host_ed25519_key.pub"):
        if not out[name].strip().startswith("ssh-"):
            raise InputError(f"{os.path.join(ssh_dir, name)}: expected an OpenSSH public key line")
    return out


def config_quote(token: str) -> str:
    """One sshd_config / ssh_config argument, double-quoted so blanks and ``#`` stay literal.

    OpenSSH splits config lines into words like a shell (``argv_split``): inside double
    quotes only ``\\\\`` and ``\\"`` are escapes. A line break cannot be expressed at all.
    """
    if any(c in token for c in "\n\r\0"):
        raise InputError(
            f"ssh config value {token!r}: contains a line break, which an ssh config cannot hold"
        )
    return '"' + token.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sshd_config(paths: SshPaths, port: int, user: str, set_env: Mapping[str, str]) -> str:
    """sshd_config text for an unprivileged sshd that only admits the deployment key."""
    q = config_quote
    lines = [
        f"Port {port}",
        f"HostKey {q(paths.host_key)}",
        f"AuthorizedKeysFile {q(paths.authorized_keys)}",
        f"PidFile {q(paths.pid_file)}",
        f"AllowUsers {q(user)}",
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
    bad = [k for k in set_env if not _ENV_NAME.match(k)]
    if bad:
        raise InputError(f"SetEnv: {bad[0]!r} is not a valid environment variable name")
    if set_env:
        # Per-pod values (NCCL_IB_HCA from device discovery, nss_wrapper's variables)
        # reach this pod's ranks here: the launcher's exports all come from pod-0.
        # One line: sshd keeps only the first SetEnv directive and ignores the rest.
        lines.append("SetEnv " + " ".join(q(f"{k}={v}") for k, v in set_env.items()))
    return "\n".join(lines) + "\n"


def client_config(paths: SshPaths, port: int, host_patterns: list[str]) -> str:
    """ssh client config for the launcher: our port, key and pinned known_hosts."""
    pats = " ".join(host_patterns)
    return (
        f"Host {pats}\n"
        f"  Port {port}\n"
        f"  IdentityFile {config_quote(paths.identity)}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {config_quote(paths.known_hosts)}\n"
        "  StrictHostKeyChecking yes\n"
        "  GlobalKnownHostsFile /dev/null\n"
        "  PasswordAuthentication no\n"
        "  BatchMode yes\n"
        "  ConnectTimeout 10\n"
        # a peer frozen after preflight: 3 unanswered probes 10 s apart end ssh with 255,
        # which pod launch turns into "lost <host>"
        "  ServerAliveInterval 10\n"
        "  ServerAliveCountMax 3\n"
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


# --------------------------------------------------------------------------- identity


def passwd_entries(passwd_path: str = "/etc/passwd") -> list[tuple[str, int]]:
    """``[(name, uid), …]`` of ``passwd_path`` in file order ([] when it cannot be read)."""
    out: list[tuple[str, int]] = []
    for line in _read_or_empty(passwd_path).splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[2].isdigit():
            out.append((parts[0], int(parts[2])))
    return out


def _resolves(entries: list[tuple[str, int]], name: str, uid: int) -> bool:
    """Whether ``name`` looks up to ``uid`` (first match wins, as NSS ``files`` does)."""
    return next((u for n, u in entries if n == name), None) == uid


def login_name(uid: int | None = None, passwd_path: str = "/etc/passwd") -> str:
    """The name that sshd's ``AllowUsers``, the passwd entry and pdsh ``-l`` use for ``uid``.

    The UID's own passwd name when that name leads back to it; otherwise
    ``mlenv-<uid>``, unique to the UID. Reading the file rather than ``pwd`` gives the
    same answer in a process without nss_wrapper preloaded (the launcher's Python).
    """
    uid = os.getuid() if uid is None else uid
    entries = passwd_entries(passwd_path)
    own = next((n for n, u in entries if u == uid), None)
    if own is not None and _resolves(entries, own, uid):
        return own
    return f"mlenv-{uid}"


def current_user() -> str:
    """The login name of the current UID (see :func:`login_name`)."""
    return login_name()


def find_nss_wrapper(override: str = "") -> str | None:
    """libnss_wrapper.so: ``override`` (``MLENV_NSS_WRAPPER_LIB``) when it exists, else the usual places."""
    if override:
        return override if os.path.isfile(override) else None
    for pattern in NSS_WRAPPER_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


@dataclass(frozen=True)
class Identity:
    """Who sshd admits: the login ``user``, and with nss_wrapper the ``env`` every process needs."""

    user: str
    env: Mapping[str, str] = field(default_factory=dict)
    note: str | None = None


def _append_line(text: str, line: str) -> str:
    return text + ("" if not text or text.endswith("\n") else "\n") + line


def ensure_passwd_entry(
    home: str,
    passwd_path: str = "/etc/passwd",
    *,
    state_dir: str | None = None,
    group_path: str = "/etc/group",
    nss_lib: str | None = None,
    uid: int | None = None,
    gid: int | None = None,
    preload: str = "",
) -> Identity:
    """Make the current UID resolvable under a name that leads back to it (sshd needs both).

    Nothing to do when the UID's passwd name resolves back to it. Otherwise appends
    ``mlenv-<uid>`` (home ``home``) to ``passwd_path`` when it can be written (the
    OpenShift images' g+w /etc/passwd); else writes passwd and group copies holding the
    entry under ``state_dir`` and returns the nss_wrapper variables (``nss_lib`` ahead
    of any ``preload`` already set). Raises InfraError when neither is possible.
    """
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    name = login_name(uid, passwd_path)
    if _resolves(passwd_entries(passwd_path), name, uid):
        return Identity(name)
    line = f"{name}:x:{uid}:{gid}:mlenv pod user:{home}:/bin/bash\n"
    if os.access(passwd_path, os.W_OK):
        try:
            with open(passwd_path, "r+", encoding="utf-8") as f:
                text = f.read()
                f.write(_append_line(text, line)[len(text) :])
            return Identity(name, {}, f"added {name} (UID {uid}) to {passwd_path}")
        except OSError:
            pass  # a read-only root filesystem: access() allows what write() then refuses
    if nss_lib and state_dir:
        pw_copy, gr_copy = os.path.join(state_dir, "passwd"), os.path.join(state_dir, "group")
        write_text(pw_copy, _append_line(_read_or_empty(passwd_path), line), 0o644)
        groups = _read_or_empty(group_path)
        if not any(g.split(":")[2:3] == [str(gid)] for g in groups.splitlines()):
            groups = _append_line(groups, f"mlenv-{gid}:x:{gid}:\n")
        write_text(gr_copy, groups, 0o644)
        env = {
            "LD_PRELOAD": ":".join(filter(None, [nss_lib, preload])),
            "NSS_WRAPPER_PASSWD": pw_copy,
            "NSS_WRAPPER_GROUP": gr_copy,
        }
        return Identity(
            name,
            env,
            f"{passwd_path} is not writable: {name} (UID {uid}) is served by "
            f"nss_wrapper from {pw_copy}",
        )
    raise InfraError(
        f"UID {uid} has no passwd entry of its own, {passwd_path} is not writable and nss_wrapper "
        "(libnss_wrapper.so) was not found, so sshd cannot admit this user: make /etc/passwd "
        "group-writable in the image, or install libnss-wrapper (MLENV_NSS_WRAPPER_LIB names a "
        "library in another place)"
    )


def _read_or_empty(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


# --------------------------------------------------------------------------- files and daemon


def install(
    paths: SshPaths,
    secret: Mapping[str, str],
    port: int,
    host_patterns: list[str],
    set_env: Mapping[str, str],
    user: str,
) -> None:
    """Write every ssh file under ``paths.dir`` with the modes ssh insists on."""
    os.makedirs(paths.dir, mode=0o700, exist_ok=True)
    os.chmod(paths.dir, 0o700)
    write_text(paths.host_key, secret["ssh_host_ed25519_key"], 0o600)
    write_text(paths.identity, secret["id_ed25519"], 0o600)
    write_text(paths.authorized_keys, secret["id_ed25519.pub"], 0o600)
    write_text(
        paths.known_hosts,
        known_hosts(secret["ssh_host_ed25519_key.pub"], port, host_patterns),
        0o644,
    )
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


def sshd_env(base: Mapping[str, str], identity: Identity) -> dict[str, str]:
    """sshd's own environment: ours plus nss_wrapper's variables when the identity needs them."""
    return {**base, **identity.env}


def check_config(paths: SshPaths, env: Mapping[str, str] | None = None) -> None:
    """``sshd -t``: refuse to start on a config sshd itself rejects."""
    r = subprocess.run(
        [sshd_binary(), "-t", "-f", paths.sshd_config],
        capture_output=True,
        text=True,
        check=False,
        env=None if env is None else dict(env),
    )
    if r.returncode != 0:
        raise InfraError(f"sshd rejected {paths.sshd_config}: {r.stderr.strip()}")


def start_daemon(paths: SshPaths, env: Mapping[str, str] | None = None) -> None:
    """Start sshd in the background (it forks and writes its pid file)."""
    stop(paths)
    r = subprocess.run(
        sshd_argv(paths, foreground=False),
        capture_output=True,
        text=True,
        check=False,
        env=None if env is None else dict(env),
    )
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
