"""each pod keeps only the configured interfaces / HCAs it really has (fake sysfs root)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlenv.errors import InfraError
from mlenv.pod import interfaces

from .test_rdma import fake_sysfs


def sysfs(root: Path, nets: list[str], ib: dict[str, str] | None = None) -> str:
    for n in nets:
        (root / "class" / "net" / n).mkdir(parents=True)
    if ib:
        fake_sysfs(root, ib)
    return str(root)


def rdma_env(**kw: str) -> dict[str, str]:
    return {"MLENV_NETWORK_MODE": "rdma", "NCCL_SOCKET_IFNAME": "net1,net2,net3,net4", **kw}


def no_fallback() -> list[tuple[int, str]]:
    raise AssertionError("sysfs was readable: the fallback must not be used")


def test_missing_interfaces_filtered(tmp_path: Path) -> None:
    root = sysfs(tmp_path, ["lo", "eth0", "net1", "net3"])
    rep = interfaces.check(rdma_env(), "ml-dev-env-1", root, fallback=no_fallback)
    assert rep.env == {"NCCL_SOCKET_IFNAME": "net1,net3"}
    assert rep.lines() == [
        "NCCL_SOCKET_IFNAME: configured net1,net2,net3,net4; present net1,net3; missing net2,net4"
    ]
    path = interfaces.write_status(str(tmp_path), rep)
    doc = json.loads(Path(path).read_text())
    assert (
        path.endswith("interfaces.json") and doc["pod"] == "ml-dev-env-1" and doc["mode"] == "rdma"
    )
    assert doc["checks"][0]["missing"] == ["net2", "net4"] and "eth0" in doc["interfaces"]


def test_no_configured_interface_present_is_an_error_naming_the_pod(tmp_path: Path) -> None:
    root = sysfs(tmp_path, ["lo", "eth0"])
    with pytest.raises(InfraError) as e:
        interfaces.check(rdma_env(), "ml-dev-env-3", root, fallback=no_fallback)
    msg = str(e.value)
    assert "pod ml-dev-env-3" in msg and "net1,net2,net3,net4: none of them exists" in msg
    assert "this pod has eth0, lo" in msg


def test_nccl_list_syntax_prefix_exact_and_exclusion(tmp_path: Path) -> None:
    root = sysfs(tmp_path, ["lo", "net1", "net12"])
    # A bare entry is a prefix for NCCL: 'net' matches net1.
    assert interfaces.check(rdma_env(NCCL_SOCKET_IFNAME="net,ib"), "p", root).env == {
        "NCCL_SOCKET_IFNAME": "net"
    }
    # '=' means exact names: net1 is there, net2 is not (net12 does not count).
    rep = interfaces.check(rdma_env(NCCL_SOCKET_IFNAME="=net1,net2"), "p", root)
    assert rep.env == {"NCCL_SOCKET_IFNAME": "=net1"} and rep.checks[0].missing == ["net2"]
    # An exclusion list names what not to use: nothing to check or filter.
    assert interfaces.check(rdma_env(NCCL_SOCKET_IFNAME="^lo,docker"), "p", root).checks == []


def test_tcp_mode_is_left_alone(tmp_path: Path) -> None:
    root = sysfs(tmp_path, ["lo"])
    rep = interfaces.check({"MLENV_NETWORK_MODE": "tcp", "NCCL_SOCKET_IFNAME": "net1"}, "p", root)
    assert rep.checks == [] and rep.env == {}


def test_listed_hcas_filtered_when_infiniband_sysfs_exists(tmp_path: Path) -> None:
    root = sysfs(tmp_path, ["net1"], {"mlx5_0": "0000:0c:00.0", "mlx5_1": "0000:0d:00.0"})
    env = rdma_env(
        NCCL_SOCKET_IFNAME="net1",
        MLENV_RDMA_DEVICES="mlx5_0,mlx5_1,mlx5_2",
        NCCL_IB_HCA="mlx5_0:1,mlx5_1,mlx5_2",
    )
    names = interfaces.ib_names(root)
    rep = interfaces.check(env, "p", root, hca_names=names)
    assert rep.env == {"NCCL_SOCKET_IFNAME": "net1", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1"}
    assert (
        rep.lines()[1]
        == "NCCL_IB_HCA: configured mlx5_0:1,mlx5_1,mlx5_2; present mlx5_0:1,mlx5_1; missing mlx5_2"
    )
    with pytest.raises(InfraError, match="NCCL_IB_HCA=mlx5_8: none of them exists"):
        interfaces.check({**env, "NCCL_IB_HCA": "mlx5_8"}, "p", root, hca_names=names)
    # No /sys/class/infiniband (not an RDMA host view): a listed HCA is not judged.
    assert interfaces.ib_names(str(tmp_path / "nothing")) is None


def test_real_root_uses_the_kernel_index_of_this_namespace() -> None:
    assert interfaces.net_interfaces("/sys", fallback=lambda: [(2, "net1"), (1, "lo")]) == [
        "lo",
        "net1",
    ]


def test_fallback_when_sysfs_is_not_readable(tmp_path: Path) -> None:
    names = interfaces.net_interfaces(
        str(tmp_path / "no-sys"), fallback=lambda: [(1, "lo"), (2, "net2")]
    )
    assert names == ["lo", "net2"]
