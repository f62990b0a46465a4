"""RDMA mode: keep only the configured network interfaces this pod really has.

Upstream configs name ``interfaces: net1..net4`` with no Multus network in the manifest
(their clusters attached the networks outside it), so the config stays valid and the
manifest sets ``NCCL_SOCKET_IFNAME=net1,…``. A name NCCL cannot find makes it fail
late ("no socket interface found") or pick nothing; so each pod checks at init which
configured names exist, keeps those, and says which are missing. The same goes for a
listed HCA (``NCCL_IB_HCA``) when ``/sys/class/infiniband`` exists to check against.

NCCL's list syntax is kept: ``^a,b`` excludes (nothing to check), ``=a,b`` means exact
names, otherwise each entry is a prefix (``net`` matches ``net1``); an HCA entry may
carry a ``:port`` suffix.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from mlenv.errors import InfraError

STATUS_FILE = "interfaces.json"


def net_interfaces(
    sysfs_root: str = "/sys",
    fallback: Callable[[], Sequence[tuple[int, str]]] = socket.if_nameindex,
) -> list[str]:
    """This pod's network interface names.

    For the real root (``/sys``) the kernel's index of this process's network namespace
    (``socket.if_nameindex``) comes first: ``/sys/class/net`` shows the namespace of
    whoever mounted sysfs, which is the pod's own in a container but not in every
    sandbox (the netns test harness). An injected root (tests, a copied tree) is read
    as ``<sysfs_root>/class/net``, falling back to the index when it is unreadable.
    """
    if sysfs_root == "/sys":
        try:
            return sorted(name for _, name in fallback())
        except OSError:
            pass
    try:
        return sorted(os.listdir(os.path.join(sysfs_root, "class", "net")))
    except OSError:
        try:
            return sorted(name for _, name in fallback())
        except OSError:
            return []


def _split(value: str) -> tuple[str, list[str]]:
    """``(mode, names)`` of an NCCL interface/HCA list: mode ``^``, ``=`` or ``""`` (prefix)."""
    v = value.strip()
    mode = v[:1] if v[:1] in ("^", "=") else ""
    names = [n.strip() for n in v[len(mode) :].split(",") if n.strip()]
    return mode, names


def _matches(entry: str, present: Sequence[str], exact: bool, strip_port: bool) -> bool:
    name = entry.split(":", 1)[0] if strip_port else entry
    return name in present if exact else any(p.startswith(name) for p in present)


def ib_names(sysfs_root: str = "/sys") -> list[str] | None:
    """The InfiniBand device names under ``<sysfs_root>/class/infiniband``; None when that
    directory does not exist (a listed HCA cannot be judged then)."""
    try:
        return sorted(os.listdir(os.path.join(sysfs_root, "class", "infiniband")))
    except OSError:
        return None


@dataclass
class ListCheck:
    """One checked list: what was configured, which entries exist, which do not."""

    variable: str
    configured: list[str]
    present: list[str]
    missing: list[str]
    value: str  # the filtered value to export ("" when nothing is present)


def filter_list(
    variable: str, value: str, present: Sequence[str], *, strip_port: bool = False
) -> ListCheck | None:
    """Check an NCCL inclusion list against ``present``; None for an exclusion list or empty value."""
    mode, names = _split(value)
    if mode == "^" or not names:
        return None
    keep = [n for n in names if _matches(n, present, mode == "=", strip_port)]
    missing = [n for n in names if n not in keep]
    return ListCheck(variable, names, keep, missing, (mode + ",".join(keep)) if keep else "")


@dataclass
class Report:
    """What ``pod init`` found; written to ``<state>/interfaces.json`` for ``mlenv status``."""

    pod: str
    mode: str
    interfaces: list[str] = field(default_factory=list)  # every name this pod has
    checks: list[ListCheck] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The per-pod values to export: each checked variable, filtered."""
        return {c.variable: c.value for c in self.checks if c.value}

    def lines(self) -> list[str]:
        """One log line per checked variable: configured, present, missing."""
        return [
            f"{c.variable}: configured {','.join(c.configured)}; present "
            f"{','.join(c.present) or 'none'}; missing {','.join(c.missing) or 'none'}"
            for c in self.checks
        ]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def check(
    env: Mapping[str, str],
    pod: str,
    sysfs_root: str = "/sys",
    fallback: Callable[[], Sequence[tuple[int, str]]] = socket.if_nameindex,
    hca_names: Sequence[str] | None = None,
) -> Report:
    """Check ``NCCL_SOCKET_IFNAME`` (and a listed ``NCCL_IB_HCA``) of ``env`` against this pod.

    In RDMA mode a configured list with none of its entries present is InfraError
    naming ``pod``; in TCP mode the lists are left as they are (the manifest sets an
    exclusion list there). ``hca_names``: the InfiniBand devices
    (``<sysfs_root>/class/infiniband``), or None when that directory does not exist
    (then a listed HCA is not checked).
    """
    mode = env.get("MLENV_NETWORK_MODE", "").strip() or "tcp"
    present = net_interfaces(sysfs_root, fallback)
    rep = Report(pod=pod, mode=mode, interfaces=present)
    if mode != "rdma":
        return rep
    checks = [filter_list("NCCL_SOCKET_IFNAME", env.get("NCCL_SOCKET_IFNAME", ""), present)]
    devices = env.get("MLENV_RDMA_DEVICES", "").strip()
    if hca_names is not None and devices and devices != "auto":
        checks.append(
            filter_list("NCCL_IB_HCA", env.get("NCCL_IB_HCA", ""), hca_names, strip_port=True)
        )
    rep.checks = [c for c in checks if c is not None]
    empty = [c for c in rep.checks if not c.present]
    if empty:

        def have(c: ListCheck) -> str:
            names = list(hca_names or []) if c.variable == "NCCL_IB_HCA" else present
            return ", ".join(names) or "none"

        what = "; ".join(
            f"{c.variable}={','.join(c.configured)}: none of them exists (this pod has {have(c)})"
            for c in empty
        )
        raise InfraError(
            f"pod {pod}: RDMA mode: {what}; attach the networks (Multus annotation or "
            "rdma.network in the config) or correct rdma.interfaces / rdma.devices"
        )
    return rep


def write_status(state_dir: str, rep: Report) -> str:
    """Write ``<state_dir>/interfaces.json`` (atomically); returns its path."""
    path = os.path.join(state_dir, STATUS_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(rep.to_json())
    os.replace(tmp, path)
    return path
