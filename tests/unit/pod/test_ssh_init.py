"""``pod init`` end to end in a temp HOME: files, modes, and configs sshd/ssh accept."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from mlenv.errors import InfraError, InputError
from mlenv.pod import dsenv, runtime, ssh
from mlenv.pod.env import pod_env


def make_secret(d: Path) -> Path:
    d.mkdir()
    for name in ("id_ed25519", "ssh_host_ed25519_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True
        )
    return d


needs_ssh = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None or not os.path.exists("/usr/sbin/sshd"),
    reason="openssh (ssh-keygen, sshd) not installed",
)


@needs_ssh
def test_init_writes_everything_and_sshd_accepts_the_config(tmp_path: Path) -> None:
    secret = make_secret(tmp_path / "secret")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "MLENV_NAMESPACE": "ns",
        "MLENV_NNODES": "2",
        "MLENV_POD_INDEX": "0",
        "MLENV_SSH_DIR": str(secret),
        "MLENV_SSH_PORT": "2345",
        "PATH": "/usr/bin:/bin",
        "NCCL_DEBUG": "INFO",
        "MLENV_CPU_SLOTS": "2",
    }
    assert runtime.verb_init(env, start_sshd=False) == 0
    p = runtime.paths_from(env)
    assert Path(p.hostfile).read_text() == (
        "ml-dev-env-0.ml-dev-env-headless.ns.svc slots=2\nml-dev-env-1.ml-dev-env-headless.ns.svc slots=2\n"
    )
    fwd = dsenv.parse(Path(p.deepspeed_env).read_text())
    assert fwd["NCCL_DEBUG"] == "INFO" and "MLENV_POD_INDEX" not in fwd and "HOME" not in fwd

    sp = ssh.SshPaths(p.state_dir)
    ssh.install(
        sp,
        ssh.read_secret(str(secret)),
        2345,
        runtime.host_patterns(pod_env(env)),
        {"NCCL_IB_HCA": "mlx5_2"},
        ssh.current_user(),
    )
    for f in (sp.host_key, sp.identity, sp.authorized_keys, sp.sshd_config):
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
    ssh.check_config(sp)  # sshd -t accepts it
    cfg = Path(sp.sshd_config).read_text()
    assert "Port 2345" in cfg and "UsePAM no" in cfg and 'SetEnv "NCCL_IB_HCA=mlx5_2"' in cfg
    assert "PasswordAuthentication no" in cfg
    # The client resolves our settings for a pod name: port, key, pinned known_hosts.
    g = subprocess.run(
        ["ssh", "-G", "-F", sp.client_config, "ml-dev-env-1.ml-dev-env-headless.ns.svc"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (
        "port 2345" in g
        and f"identityfile {sp.identity}" in g
        and "stricthostkeychecking true" in g
    )
    kh = Path(sp.known_hosts).read_text()
    assert kh.startswith("[*.ml-dev-env-headless.ns.svc]:2345,") and "ssh-ed25519 " in kh


def test_missing_secret_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "id_ed25519").write_text("x")
    with pytest.raises(InputError) as e:
        ssh.read_secret(str(tmp_path))
    assert "id_ed25519.pub" in str(e.value) and "ssh_host_ed25519_key" in str(e.value)


def test_unreadable_secret_files_are_reported_as_permission_denied(tmp_path: Path) -> None:
    def read(path: str) -> str:
        if path.endswith("_key") or path.endswith("id_ed25519"):
            raise PermissionError(13, "Permission denied", path)
        if path.endswith("ssh_host_ed25519_key.pub"):
            raise FileNotFoundError(2, "No such file", path)
        return "ssh-ed25519 AAAA x\n"

    with pytest.raises(InputError) as e:
        ssh.read_secret(str(tmp_path), read=read)
    msg = str(e.value)
    assert "permission denied reading id_ed25519, ssh_host_ed25519_key" in msg and "fsGroup" in msg
    assert "missing ssh_host_ed25519_key.pub" in msg and "missing id_ed25519," not in msg


IMAGE_PASSWD = "root:x:0:0:root:/root:/bin/bash\nmlenv:x:1001:0::/home/mlenv:/bin/bash\n"


def test_a_known_uid_keeps_its_name(tmp_path: Path) -> None:
    pw = tmp_path / "passwd"
    pw.write_text(IMAGE_PASSWD)
    ident = ssh.ensure_passwd_entry("/home/mlenv", str(pw), uid=1001, gid=0)
    assert ident.user == "mlenv" and not ident.env and ident.note is None
    assert pw.read_text() == IMAGE_PASSWD


def test_a_random_uid_gets_a_name_of_its_own(tmp_path: Path) -> None:
    # The image's useradd owns 'mlenv' (UID 1001): a random UID appended as 'mlenv' would be
    # looked up by sshd as 1001 and refused. Its own name leads back to its own UID.
    pw = tmp_path / "passwd"
    pw.write_text(IMAGE_PASSWD)
    ident = ssh.ensure_passwd_entry("/home/mlenv", str(pw), uid=1000680000, gid=0)
    assert ident.user == "mlenv-1000680000" and not ident.env and "added" in (ident.note or "")
    assert (
        pw.read_text()
        == IMAGE_PASSWD + "mlenv-1000680000:x:1000680000:0:mlenv pod user:/home/mlenv:/bin/bash\n"
    )
    assert ssh.login_name(1000680000, str(pw)) == "mlenv-1000680000"
    # Idempotent: a second init (container restart) adds nothing.
    assert ssh.ensure_passwd_entry("/home/mlenv", str(pw), uid=1000680000, gid=0).note is None
    assert pw.read_text().count("1000680000") == 2


def test_an_entry_borrowing_a_taken_name_is_not_trusted(tmp_path: Path) -> None:
    # An older init appended 'mlenv' for the random UID: getpwuid finds it, getpwnam does not.
    pw = tmp_path / "passwd"
    pw.write_text(IMAGE_PASSWD + "mlenv:x:1000680000:0::/home/mlenv:/bin/bash\n")
    assert ssh.login_name(1000680000, str(pw)) == "mlenv-1000680000"
    ident = ssh.ensure_passwd_entry("/h", str(pw), uid=1000680000, gid=0)
    assert ident.user == "mlenv-1000680000" and pw.read_text().endswith(
        "mlenv-1000680000:x:1000680000:0:mlenv pod user:/h:/bin/bash\n"
    )


def test_unwritable_passwd_falls_back_to_nss_wrapper(tmp_path: Path) -> None:
    pw = tmp_path / "ro" / "passwd"  # no such directory: not writable, even for root
    gr = tmp_path / "group"
    gr.write_text("root:x:0:\n")
    state = tmp_path / "state"
    state.mkdir()
    ident = ssh.ensure_passwd_entry(
        "/h",
        str(pw),
        state_dir=str(state),
        group_path=str(gr),
        nss_lib="/lib/libnss_wrapper.so",
        uid=1000680000,
        gid=1000680000,
        preload="/lib/other.so",
    )
    assert ident.user == "mlenv-1000680000"
    assert dict(ident.env) == {
        "LD_PRELOAD": "/lib/libnss_wrapper.so:/lib/other.so",
        "NSS_WRAPPER_PASSWD": str(state / "passwd"),
        "NSS_WRAPPER_GROUP": str(state / "group"),
    }
    assert (
        state / "passwd"
    ).read_text() == "mlenv-1000680000:x:1000680000:1000680000:mlenv pod user:/h:/bin/bash\n"
    assert (state / "group").read_text() == "root:x:0:\nmlenv-1000680000:x:1000680000:\n"
    assert "nss_wrapper" in (ident.note or "")


def test_unwritable_passwd_without_nss_wrapper_is_an_infra_error(tmp_path: Path) -> None:
    with pytest.raises(InfraError, match="libnss-wrapper"):
        ssh.ensure_passwd_entry(
            "/h",
            str(tmp_path / "ro" / "passwd"),
            state_dir=str(tmp_path),
            uid=1000680000,
            gid=0,
            nss_lib=None,
        )


@needs_ssh
def test_sshd_config_values_are_quoted_and_every_setenv_applies(tmp_path: Path) -> None:
    # sshd keeps only the first SetEnv directive; values with blanks, '#' or quotes must
    # arrive whole. 'sshd -T' prints what sshd itself parsed.
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True
    )
    sp = ssh.SshPaths(str(tmp_path / "state dir"))
    set_env = {
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",
        "LD_PRELOAD": "/l/libnss_wrapper.so",
        "A": 'x y # "z" \\w',
    }
    text = ssh.sshd_config(sp, 2345, "mlenv-1000680000", set_env)
    cfg = tmp_path / "cfg"
    cfg.write_text(text.replace(ssh.config_quote(sp.host_key), str(tmp_path / "k")))
    r = subprocess.run(
        [ssh.sshd_binary(), "-T", "-f", str(cfg)], capture_output=True, text=True, check=True
    )
    got = {line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith("setenv ")}
    assert got == {f"{k}={v}" for k, v in set_env.items()}
    assert f"pidfile {sp.pid_file}" in r.stdout and "allowusers mlenv-1000680000" in r.stdout
    with pytest.raises(InputError, match="line break"):
        ssh.sshd_config(sp, 2345, "u", {"A": "x\ny"})
