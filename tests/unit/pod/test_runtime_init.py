"""``runtime.verb_init`` end to end in RDMA mode: per-pod HCA discovery, memlock, sshd config."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from mlenv.errors import InfraError
from mlenv.pod import dsenv, runtime, ssh

from .test_rdma import DEVS, fake_sysfs
from .test_ssh_init import make_secret, needs_ssh


def rdma_env(tmp_path: Path, secret: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "MLENV_NAMESPACE": "ns",
        "MLENV_NNODES": "2",
        "MLENV_POD_INDEX": "1",
        "MLENV_SSH_DIR": str(secret),
        "MLENV_NETWORK_MODE": "rdma",
        "MLENV_RDMA_DEVICES": "auto",
        "PCIDEVICE_OPENSHIFT_IO_MLX_RDMA": "0000:3c:00.1,0000:3b:00.1",
        # pod-0's own value in its shell: must never reach the other pods
        "NCCL_IB_HCA": "mlx5_0",
        "NCCL_DEBUG": "INFO",
    }


@needs_ssh
def test_rdma_auto_init_gives_each_pod_its_own_hca_through_sshd(tmp_path: Path) -> None:
    secret = make_secret(tmp_path / "secret")
    env = rdma_env(tmp_path, secret)
    started: list[tuple[ssh.SshPaths, Mapping[str, str]]] = []
    code = runtime.verb_init(
        env,
        sysfs_root=fake_sysfs(tmp_path / "sys", DEVS),
        memlock_check=lambda: None,
        start=lambda paths, daemon_env: started.append((paths, daemon_env)),
    )
    assert code == 0
    p = runtime.paths_from(env)
    # This pod's devices, in the plugin's order, in node.env and env.sh ...
    assert runtime.read_node_env(p.node_env)["NCCL_IB_HCA"] == "mlx5_7,mlx5_6"
    assert "export NCCL_IB_HCA='mlx5_7,mlx5_6'" in Path(p.env_file).read_text()
    # ... but not in what the launcher forwards from pod-0 to everyone ...
    fwd = dsenv.parse(Path(p.deepspeed_env).read_text())
    assert "NCCL_IB_HCA" not in fwd and fwd["NCCL_DEBUG"] == "INFO"
    assert "NCCL_IB_HCA" not in dsenv.parse(Path(p.forward_env).read_text())
    # ... so it reaches this pod's ranks through its own sshd, which accepts the config.
    cfg = Path(p.ssh.sshd_config).read_text()
    setenv = [line for line in cfg.splitlines() if line.startswith("SetEnv ")]
    assert (
        len(setenv) == 1
        and '"NCCL_IB_HCA=mlx5_7,mlx5_6"' in setenv[0]
        and '"NODE_RANK=1"' in setenv[0]
    )
    r = subprocess.run(
        [ssh.sshd_binary(), "-T", "-f", p.ssh.sshd_config],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "setenv NCCL_IB_HCA=mlx5_7,mlx5_6" in r.stdout
    assert [s[0] for s in started] == [p.ssh]
    # A launch from this shell later must not forward pod-0's NCCL_IB_HCA either.
    text = runtime.launch_deepspeed_env(env, p, runtime.read_node_env(p.node_env))
    assert "NCCL_IB_HCA" not in dsenv.parse(text)


def test_low_memlock_in_rdma_mode_is_an_error_before_anything_starts(tmp_path: Path) -> None:
    env = rdma_env(tmp_path, tmp_path / "no-secret")
    started: list[object] = []
    msg = "RDMA mode: locked-memory limit (ulimit -l) is 64 KiB (hard 64 KiB) …"
    with pytest.raises(InfraError) as e:
        runtime.verb_init(env, memlock_check=lambda: msg, start=lambda *a: started.append(a))
    assert e.value.exit_code == 3 and "ulimit -l" in str(e.value)
    assert not started and not os.path.exists(runtime.paths_from(env).node_env)


def test_low_memlock_is_a_warning_when_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = rdma_env(tmp_path, tmp_path / "no-secret")
    code = runtime.verb_init(
        env,
        start_sshd=False,
        strict_memlock=False,
        sysfs_root=fake_sysfs(tmp_path / "sys", DEVS),
        memlock_check=lambda: "RDMA mode: locked-memory limit too low",
    )
    assert (
        code == 0 and "warning: RDMA mode: locked-memory limit too low" in capsys.readouterr().err
    )


def test_the_cli_turns_a_low_memlock_into_exit_3(tmp_path: Path) -> None:
    # The real limit of this process, lowered so the check must fail (prlimit in the child).
    import resource
    import sys

    env = {**os.environ, **rdma_env(tmp_path, tmp_path / "no-secret")}
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536)); "
        "from mlenv.pod.__main__ import main; sys.exit(main(['init', '--no-sshd']))"
    )
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard != resource.RLIM_INFINITY and hard < 65536:
        pytest.skip("hard memlock limit below 64 KiB here")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert r.returncode == 3, r.stderr
    assert "locked-memory limit" in r.stderr and "Traceback" not in r.stderr


def test_init_exports_only_present_interfaces_per_pod(tmp_path: Path) -> None:
    root = Path(fake_sysfs(tmp_path / "sys", {"mlx5_0": "0000:0c:00.0"}))
    for n in ("lo", "eth0", "net2"):
        (root / "class" / "net" / n).mkdir(parents=True)
    env = {
        **rdma_env(tmp_path, tmp_path / "no-secret"),
        "MLENV_RDMA_DEVICES": "mlx5_0,mlx5_1",
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",
        "NCCL_SOCKET_IFNAME": "net1,net2,net3,net4",
        "POD_IP": "10.128.0.7",
    }
    assert (
        runtime.verb_init(env, start_sshd=False, sysfs_root=str(root), memlock_check=lambda: None)
        == 0
    )
    p = runtime.paths_from(env)
    node = runtime.read_node_env(p.node_env)
    assert node["NCCL_SOCKET_IFNAME"] == "net2" and node["NCCL_IB_HCA"] == "mlx5_0"
    assert node["NODE_RANK"] == "1" and node["POD_IP"] == "10.128.0.7"
    # pod-0's unfiltered list is never forwarded over each pod's own.
    fwd = dsenv.parse(Path(p.deepspeed_env).read_text())
    assert not {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NODE_RANK", "POD_IP"} & set(fwd)
    text = runtime.launch_deepspeed_env(env, p, node)
    assert "NCCL_SOCKET_IFNAME" not in dsenv.parse(text)
    doc = json.loads((Path(p.state_dir) / "interfaces.json").read_text())
    assert doc["checks"][0]["present"] == ["net2"] and doc["checks"][0]["missing"] == [
        "net1",
        "net3",
        "net4",
    ]


def test_init_fails_when_no_configured_interface_exists(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    (root / "class" / "net" / "eth0").mkdir(parents=True)
    env = {
        **rdma_env(tmp_path, tmp_path / "no-secret"),
        "MLENV_POD_NAME": "ml-dev-env-1",
        "MLENV_RDMA_DEVICES": "mlx5_0",
        "NCCL_SOCKET_IFNAME": "net1,net2",
    }
    with pytest.raises(
        InfraError, match=r"pod ml-dev-env-1: RDMA mode: NCCL_SOCKET_IFNAME=net1,net2: none"
    ):
        runtime.verb_init(env, start_sshd=False, sysfs_root=str(root), memlock_check=lambda: None)


def test_hostfile_at_upstreams_path_and_the_three_argument_form(tmp_path: Path) -> None:
    """Upstream's `./launch_deepspeed.sh SCRIPT ds_config.json /workspace/.deepspeed/hostfile`
    exited 2: init wrote the hostfile only under $HOME/.mlenv."""
    from mlenv.cluster import treehash
    from mlenv.pod import positional

    ws = tmp_path / "workspace"
    ws.mkdir()
    env = {
        **rdma_env(tmp_path, tmp_path / "no-secret"),
        "MLENV_NETWORK_MODE": "tcp",
        "MLENV_WORKSPACE": str(ws),
        "MLENV_CPU_SLOTS": "2",
    }
    assert runtime.verb_init(env, start_sshd=False) == 0
    upstream = ws / ".deepspeed" / "hostfile"
    assert upstream.read_text() == Path(runtime.paths_from(env).hostfile).read_text()
    assert upstream.read_text().count("slots=2") == 2
    (ws / "train.py").write_text("")
    (ws / "ds_config.json").write_text("{}")
    form = positional.parse(
        [str(ws / "train.py"), str(ws / "ds_config.json"), str(upstream), "--epochs", "1"]
    )
    assert form.hostfile == str(upstream) and form.ds_config == str(ws / "ds_config.json")
    assert form.words == [
        str(ws / "train.py"),
        "--epochs",
        "1",
        "--deepspeed",
        "--deepspeed_config",
        str(ws / "ds_config.json"),
    ]
    # sync --delete never removes it (a pod file under a dot folder)
    assert treehash.protected(".deepspeed/hostfile")
    # no workspace mounted: nothing is created there
    gone = tmp_path / "nowhere"
    assert runtime.verb_init({**env, "MLENV_WORKSPACE": str(gone)}, start_sshd=False) == 0
    assert not gone.exists()
