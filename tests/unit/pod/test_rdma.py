"""RDMA checks: memlock message and ``devices: auto`` on a fake sysfs tree."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from mlenv.errors import InputError
from mlenv.pod import rdma


def fake_sysfs(root: Path, devices: dict[str, str]) -> str:
    """``<root>/class/infiniband/<name>/device -> ../../../devices/pci…/<pci>`` like the kernel."""
    for name, pci in devices.items():
        real = root / "devices" / "pci0000:00" / pci
        real.mkdir(parents=True, exist_ok=True)
        d = root / "class" / "infiniband" / name
        d.mkdir(parents=True)
        os.symlink(os.path.relpath(real, d), d / "device")
    return str(root)


DEVS = {
    "mlx5_0": "0000:0c:00.0",
    "mlx5_1": "0000:0d:00.0",
    "mlx5_6": "0000:3b:00.1",
    "mlx5_7": "0000:3c:00.1",
}


def test_ib_devices_reads_pci_addresses(tmp_path: Path) -> None:
    assert rdma.ib_devices(fake_sysfs(tmp_path, DEVS)) == DEVS


def test_auto_picks_only_the_plugin_allocated_functions(tmp_path: Path) -> None:
    root = fake_sysfs(tmp_path, DEVS)
    env = {"PCIDEVICE_OPENSHIFT_IO_MLX_RDMA": "0000:3C:00.1,0000:3b:00.1", "OTHER": "0000:0c:00.0"}
    assert rdma.discover_hca(env, root) == ["mlx5_7", "mlx5_6"]


def test_auto_without_plugin_env_uses_every_sysfs_device(tmp_path: Path) -> None:
    assert rdma.discover_hca({}, fake_sysfs(tmp_path, DEVS)) == sorted(DEVS)


def test_auto_errors_are_specific(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no PCIDEVICE_"):
        rdma.discover_hca({}, str(tmp_path))
    root = fake_sysfs(tmp_path / "s", DEVS)
    with pytest.raises(InputError, match="0000:99:00.0"):
        rdma.discover_hca({"PCIDEVICE_X": "0000:99:00.0"}, root)


def test_memlock_message_names_limit_and_fix() -> None:
    msg = rdma.memlock_problem(64 * 1024, 64 * 1024)
    assert msg is not None
    assert "64 KiB" in msg and "IPC_LOCK" in msg and "ulimit -l" in msg
    soft_only = rdma.memlock_problem(64 * 1024, resource.RLIM_INFINITY)
    assert soft_only is not None and "ulimit -l unlimited" in soft_only
    assert rdma.memlock_problem(resource.RLIM_INFINITY, resource.RLIM_INFINITY) is None
    assert rdma.memlock_problem(rdma.MEMLOCK_FLOOR, rdma.MEMLOCK_FLOOR) is None
