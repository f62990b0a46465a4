"""``pod init`` end to end in a temp HOME: files, modes, and configs sshd/ssh accept."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from mlenv.errors import InputError
from mlenv.pod import dsenv, runtime, ssh


def make_secret(d: Path) -> Path:
    d.mkdir()
    for name in ("id_ed25519", "ssh_host_ed25519_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    return d


needs_ssh = pytest.mark.skipif(shutil.which("ssh-keygen") is None or not os.path.exists("/usr/sbin/sshd"),
                               reason="openssh (ssh-keygen, sshd) not installed")


@needs_ssh
def test_init_writes_everything_and_sshd_accepts_the_config(tmp_path: Path) -> None:
    secret = make_secret(tmp_path / "secret")
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "MLENV_NAMESPACE": "ns", "MLENV_NNODES": "2", "MLENV_POD_INDEX": "0",
           "MLENV_SSH_DIR": str(secret), "MLENV_SSH_PORT": "2345", "PATH": "/usr/bin:/bin",
           "NCCL_DEBUG": "INFO", "MLENV_CPU_SLOTS": "2"}
    assert runtime.init(env, start_sshd=False) == 0
    p = runtime.paths_from(env)
    assert Path(p.hostfile).read_text() == (
        "ml-dev-env-0.ml-dev-env-headless.ns.svc slots=2\nml-dev-env-1.ml-dev-env-headless.ns.svc slots=2\n")
    fwd = dsenv.parse(Path(p.deepspeed_env).read_text())
    assert fwd["NCCL_DEBUG"] == "INFO" and "MLENV_POD_INDEX" not in fwd and "HOME" not in fwd

    sp = ssh.SshPaths(p.state_dir)
    ssh.install(sp, ssh.read_secret(str(secret)), 2345, runtime.host_patterns(runtime.pod_env(env)),
                {"NCCL_IB_HCA": "mlx5_2"}, ssh.current_user())
    for f in (sp.host_key, sp.identity, sp.authorized_keys, sp.sshd_config):
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
    ssh.check_config(sp)  # sshd -t accepts it
    cfg = Path(sp.sshd_config).read_text()
    assert "Port 2345" in cfg and "UsePAM no" in cfg and "SetEnv NCCL_IB_HCA=mlx5_2" in cfg
    assert "PasswordAuthentication no" in cfg
    # The client resolves our settings for a pod name: port, key, pinned known_hosts.
    g = subprocess.run(["ssh", "-G", "-F", sp.client_config, "ml-dev-env-1.ml-dev-env-headless.ns.svc"],
                       capture_output=True, text=True, check=True).stdout
    assert "port 2345" in g and f"identityfile {sp.identity}" in g and "stricthostkeychecking true" in g
    kh = Path(sp.known_hosts).read_text()
    assert kh.startswith("[*.ml-dev-env-headless.ns.svc]:2345,") and "ssh-ed25519 " in kh


def test_missing_secret_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "id_ed25519").write_text("x")
    with pytest.raises(InputError) as e:
        ssh.read_secret(str(tmp_path))
    assert "id_ed25519.pub" in str(e.value) and "ssh_host_ed25519_key" in str(e.value)
