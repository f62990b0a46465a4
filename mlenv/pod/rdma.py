"""RDMA mode checks: locked-memory limit and per-pod device discovery (``devices: auto``)."""

from __future__ import annotations

import os
import re
import resource
from collections.abc import Mapping

from mlenv.errors import InputError

# NCCL's IB transport registers (pins) buffers; with the default 64 KiB or 8 MiB limit
# registration fails late with an obscure "ibv_reg_mr failed". Ask for unlimited, accept
# anything at or above this floor.
MEMLOCK_FLOOR = 1 << 30
_PCI = re.compile(r"\b([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")


def memlock_problem(soft: int, hard: int) -> str | None:
    """A one-line explanation when the RLIMIT_MEMLOCK pair is too low for RDMA, else None."""
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= MEMLOCK_FLOOR:
        return None

    def fmt(v: int) -> str:
        return "unlimited" if v == unlimited else f"{v // 1024} KiB"

    fix = (
        "raise it with 'ulimit -l unlimited' in the entry script"
        if hard == unlimited or hard >= MEMLOCK_FLOOR
        else "the pod needs the IPC_LOCK capability (RDMA SCC) and a container runtime "
        "memlock limit of unlimited (e.g. CRI-O default_ulimits 'memlock=-1:-1')"
    )
    return (
        f"RDMA mode: locked-memory limit (ulimit -l) is {fmt(soft)} (hard {fmt(hard)}), "
        f"below the {MEMLOCK_FLOOR // (1 << 20)} MiB NCCL needs to register buffers; {fix}"
    )


def check_memlock() -> str | None:
    """Raise the soft memlock limit to the hard one, then report a problem if still too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return memlock_problem(soft, hard)


def pci_addresses_from_env(env: Mapping[str, str]) -> list[str]:
    """PCI addresses the device plugin allocated to this pod.

    SR-IOV and host-device plugins export ``PCIDEVICE_<RESOURCE>=0000:3b:00.1,…``;
    ``MLENV_RDMA_PCI`` lets a platform without them name the addresses itself.
    """
    seen: list[str] = []
    for k in sorted(env):
        if k.startswith("PCIDEVICE_") or k == "MLENV_RDMA_PCI":
            for addr in _PCI.findall(env[k]):
                a = addr.lower()
                if a not in seen:
                    seen.append(a)
    return seen


def ib_devices(sysfs_root: str = "/sys") -> dict[str, str]:
    """``{ib device name: PCI address}`` from ``<sysfs_root>/class/infiniband/*/device``."""
    base = os.path.join(sysfs_root, "class", "infiniband")
    out: dict[str, str] = {}
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for name in names:
        target = os.path.realpath(os.path.join(base, name, "device"))
        m = _PCI.search(os.path.basename(target))
        if m:
            out[name] = m.group(1).lower()
    return out


def discover_hca(env: Mapping[str, str], sysfs_root: str = "/sys") -> list[str]:
    """This pod's RDMA device names for NCCL_IB_HCA.

    With plugin PCI addresses: the IB devices on exactly those functions (a shared
    device plugin exposes every HCA's sysfs entry, so sysfs alone would over-select).
    Without them: every IB device sysfs shows. Raises InputError when none is found.
    """
    devs = ib_devices(sysfs_root)
    wanted = pci_addresses_from_env(env)
    if wanted:
        by_pci = {pci: name for name, pci in devs.items()}
        names = [by_pci[p] for p in wanted if p in by_pci]
        missing = [p for p in wanted if p not in by_pci]
        if missing and not names:
            raise InputError(
                f"RDMA devices: auto: the device plugin allocated PCI functions {', '.join(missing)} "
                f"but no InfiniBand device under {sysfs_root}/class/infiniband sits on them"
            )
        return names
    if not devs:
        raise InputError(
            f"RDMA devices: auto: no PCIDEVICE_* variables from a device plugin and no devices "
            f"under {sysfs_root}/class/infiniband; list the devices in the config instead"
        )
    return list(devs)
