"""``network:`` and ``nccl:``: RDMA devices, interfaces and attachments, the TCP interface
exclusions, and NCCL variables whose values reach remote ranks as shell exports."""

from __future__ import annotations

import re
from typing import Any

from mlenv.config.rules.common import _IFNAME, _LABEL, Checker, _char, _fix_hint, _get, split_list
from mlenv.config.yamlpos import JsonPath

_HCA = re.compile(r"^[A-Za-z0-9_.-]+\Z")
# NCCL_IB_HCA's device:port form (mlx5_0:1); on slurm/hosts only, where the value goes to
# NCCL as written (pods match device names against /sys/class/infiniband).
_HCA_PORT = re.compile(r"^[A-Za-z0-9_.-]+(:[0-9]{1,3})?\Z")
# NCCL variables that structured keys already set; setting them twice would be ambiguous.
RESERVED_NCCL = {
    "NCCL_DEBUG": "nccl.debug",
    "NCCL_IB_DISABLE": "network.rdma.enabled and the deploy mode",
    "NCCL_IB_HCA": "network.rdma.devices",
    "NCCL_IB_GID_INDEX": "network.rdma.gid_index",
    "NCCL_NET_GDR_LEVEL": "network.rdma.gdr_level",
    "NCCL_CROSS_NIC": "network.rdma.cross_nic",
    "NCCL_IB_TIMEOUT": "network.rdma.ib_timeout",
    "NCCL_MIN_NCHANNELS": "network.rdma.min_nchannels",
    "NCCL_SOCKET_IFNAME": "network.rdma.interfaces / network.tcp.interface_exclude",
    "NCCL_P2P_LEVEL": "network.tcp.p2p_level",
}

# Upstream ml-dev-env's discover_cluster.py wrote these four whatever it found.
UPSTREAM_DISCOVERED_INTERFACES = ["net1", "net2", "net3", "net4"]


def _upstream_discovered_hint(interfaces: list[str], devices: list[str]) -> str:
    """The fix for a config upstream's discovery wrote: its interfaces were always net1-net4."""
    if interfaces != UPSTREAM_DISCOVERED_INTERFACES:
        return ""
    want = ",".join(f"net{i + 1}" for i in range(len(devices)))
    return (
        f"upstream's discover_cluster.py always wrote net1-net4: with {len(devices)} device(s) "
        f'write interfaces: "{want}", or write a fresh '
        "config with `mlenv discover NAME --namespace NS`"
    )


_ENV_UNSAFE = re.compile(r"[\x00-\x1f\x7f\"'$`\\]")


def rdma(c: Checker) -> None:
    rdma = _get(c.data, "network", "rdma")
    if not isinstance(rdma, dict):
        return
    base: JsonPath = ("network", "rdma")
    raw_devices = rdma.get("devices", [])
    auto = isinstance(raw_devices, str) and raw_devices.strip() == "auto"
    devices = [] if auto else split_list(raw_devices)
    interfaces = split_list(rdma.get("interfaces", []))
    if devices is not None:
        if c.off_k8s:
            # NCCL_IB_HCA's '=' (exact names: mlx5_1 without mlx5_10-17) and '^'
            # (exclude) prefixes: read once, before the whole list
            devices = _hca_prefix(c, (*base, "devices"), raw_devices, devices)
            _names(
                c,
                (*base, "devices"),
                raw_devices,
                devices,
                _HCA_PORT,
                "device",
                "an HCA name like mlx5_6, or device:port like mlx5_0:1",
            )
        else:
            _names(
                c,
                (*base, "devices"),
                raw_devices,
                devices,
                _HCA,
                "device",
                "an HCA name like mlx5_6",
            )
    if interfaces is not None:
        _names(
            c,
            (*base, "interfaces"),
            rdma.get("interfaces"),
            interfaces,
            _IFNAME,
            "interface",
            "at most 15 characters, no spaces or '/'",
        )
    nets = rdma.get("networks")
    if isinstance(nets, list):
        for i, n in enumerate(nets):
            if isinstance(n, str):
                parts = n.split("/")
                if len(parts) > 2 or not all(_LABEL.match(p) and len(p) <= 63 for p in parts):
                    c.err(
                        (*base, "networks", i),
                        f"network {n!r} is not a NetworkAttachmentDefinition name ('name' or 'namespace/name', DNS-1123 labels)",
                        _fix_hint(n),
                    )
    res = rdma.get("resources")
    if isinstance(res, dict):
        for key in res:
            if key in ("nvidia.com/gpu", "amd.com/gpu") or key.endswith("/gpu"):
                c.err(
                    (*base, "resources", key),
                    f"{key} is the GPU resource: set gpus.per_node instead (here it would "
                    "silently override it)",
                    key=True,
                )
    if rdma.get("enabled") is not True:
        return
    if not rdma.get("resources") and not rdma.get("networks") and not c.off_k8s:
        # Valid (host networking, devices exposed some other way) but usually a mistake:
        # the pods would get neither an RDMA device nor a Multus attachment.
        c.warn(
            (*base, "enabled"),
            "RDMA is enabled but neither network.rdma.resources nor network.rdma.networks is set, "
            "so the pods request no RDMA device and no Multus network",
            "add the device-plugin resource, e.g. 'rdma/rdma_shared_device_a: 1', "
            "and the NetworkAttachmentDefinition names",
        )
    if devices is not None and not auto and not devices:
        c.err(
            (*base, "devices") if "devices" in rdma else base,
            "RDMA is enabled but no devices are listed",
            "list the HCAs (e.g. mlx5_6,mlx5_7) or write 'devices: auto'",
            key="devices" not in rdma,
        )
    elif devices and interfaces is not None and len(interfaces) != len(devices) and not c.off_k8s:
        # On Kubernetes each device has its pod interface (Multus); on slurm/hosts the
        # interfaces are the hosts' bootstrap ones, optional and not paired with devices.
        c.err(
            (*base, "interfaces") if "interfaces" in rdma else base,
            f"{len(interfaces)} interface(s) for {len(devices)} RDMA device(s); list one interface per device, in the same order",
            _upstream_discovered_hint(interfaces, devices),
            key="interfaces" not in rdma,
        )


def _hca_prefix(c: Checker, path: JsonPath, raw: Any, devices: list[str]) -> list[str]:
    """``devices`` without NCCL's leading ``^``/``=``/``^=`` (first entry only; a prefix on
    a later entry is an error, as NCCL would take it for part of a name)."""
    out = list(devices)
    if out and out[0][:1] in ("^", "="):
        out[0] = out[0][2:] if out[0].startswith("^=") else out[0][1:]
    for i, d in enumerate(out):
        if d[:1] in ("^", "="):
            c.err(
                (*path, i) if isinstance(raw, list) else path,
                f"device {d!r}: NCCL reads '^' (exclude) and '=' (exact names) only before "
                "the first device, for the whole list",
                "write e.g. '=mlx5_1,mlx5_2' or '^mlx5_bond_0'",
            )
            out[i] = d.lstrip("^=")
    return out


def _names(
    c: Checker,
    path: JsonPath,
    raw: Any,
    names: list[str],
    rx: re.Pattern[str],
    what: str,
    expected: str,
) -> None:
    seen: set[str] = set()
    for i, n in enumerate(names):
        p = (*path, i) if isinstance(raw, list) else path
        if not rx.match(n):
            c.err(p, f"{what} name {n!r} is not valid ({expected})")
        elif n in seen:
            c.err(p, f"{what} {n!r} is listed twice")
        seen.add(n)


def tcp(c: Checker) -> None:
    raw = _get(c.data, "network", "tcp", "interface_exclude")
    names = split_list(raw)
    if names is None:
        return
    if isinstance(raw, str) and names and names[0].startswith("^"):
        names[0] = names[0][1:]  # legacy "^lo,docker0": NCCL's exclusion prefix
    _names(
        c,
        ("network", "tcp", "interface_exclude"),
        raw,
        names,
        _IFNAME,
        "interface",
        "at most 15 characters, no spaces or '/'",
    )


def nccl_env(c: Checker) -> None:
    env = _get(c.data, "nccl", "env")
    if not isinstance(env, dict):
        return
    for name, value in env.items():
        before = len(c.out)
        # the pod refuses these (mlenv/pod/dsenv.py) and would crash-loop in init:
        # the DeepSpeed launcher writes each value into a double-quoted shell export.
        if isinstance(value, str):
            bad = _ENV_UNSAFE.search(value)
            if bad:
                c.err(
                    ("nccl", "env", name),
                    f"value contains {_char(bad.group(0))}, which cannot reach remote "
                    'ranks intact (the launcher writes KEY="value" shell exports); '
                    "pods would fail in 'pod init'",
                )
            elif value != value.strip():
                c.err(
                    ("nccl", "env", name),
                    "value has leading or trailing whitespace, which the launcher strips",
                )
        if name == "NCCL_SOCKET_IFNAME" and c.off_k8s:
            # Off Kubernetes nothing else knows the bootstrap interface (bond0, ib0).
            bad_if = [
                n
                for n in (value.lstrip("^=").split(",") if isinstance(value, str) else [])
                if not _IFNAME.match(n)
            ]
            if (bad_if or not isinstance(value, str) or not value) and len(c.out) == before:
                c.err(
                    ("nccl", "env", name),
                    "NCCL_SOCKET_IFNAME is interface names ('bond0', "
                    "'ib0,ib1', '^lo,docker0' or '=eth0'), at most 15 characters each",
                )
            continue
        if name in RESERVED_NCCL:
            c.err(
                ("nccl", "env", name),
                f"{name} is set from {RESERVED_NCCL[name]}; set it there instead",
                key=True,
            )
