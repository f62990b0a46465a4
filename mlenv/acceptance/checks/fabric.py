"""fabric.transport: prove NCCL used the fabric the config names, from NCCL's own log.

A missing device plugin, a wrong GID index or a Multus network that did not attach
makes NCCL fall back to TCP sockets silently; the run still "passes", at a fraction of
the speed. Every NCCL rank runs with its log captured into the report folder
(:mod:`mlenv.acceptance.evidence.ncclcapture`); this check runs one small all_reduce on the world
(so a cross-node communicator and its network connections exist even when the check
runs alone), reads this rank's log (:mod:`mlenv.acceptance.evidence.nccllog`) and judges it
against what the pod's environment says was configured:

- the mode: ``MLENV_NETWORK_MODE`` (``rdma``/``tcp``, set by the StatefulSet from the
  config's effective mode); without it ``NCCL_IB_DISABLE=1`` means tcp, and
  ``NCCL_IB_HCA`` set means rdma; otherwise nothing is expected and the check reports;
- the HCAs: ``MLENV_RDMA_DEVICES`` when it is a list (``network.rdma.devices``), else
  ``NCCL_IB_HCA`` (with ``devices: auto`` pod init sets it per pod), matched the way NCCL
  matches them (prefixes, ``^`` exclude, ``=`` exact, ``:port``);
- GPUDirect RDMA: expected in rdma mode when ``NCCL_NET_GDR_LEVEL`` (``network.rdma.gdr_level``)
  is set and not ``0``/``LOC``; at the widest level (``SYS``, or 4 and above) a
  connection without ``/GDRDMA`` is a FAIL, at a narrower level a WARN (NCCL may refuse
  GDR for a NIC farther from the GPU than the level allows);
- the socket interfaces: ``NCCL_SOCKET_IFNAME`` (``^lo,docker0`` from
  ``network.tcp.interface_exclude``); loopback across nodes is always wrong.

SKIP (one world result) on gloo/CPU and on a single node, where no network transport is
involved. The lines NCCL printed go into ``details.evidence``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.metrics import info
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import nccllog
from mlenv.acceptance.evidence.nccllog import IfSpec, NcclLog

NAME = "fabric.transport"
PROBE_BYTES = 8 * 2**20  # big enough for NCCL to connect its ring/tree channels over the network
_GDR_OFF = ("0", "LOC")
_GDR_WIDEST = ("SYS", "4", "5")


@dataclass(frozen=True)
class Expectation:
    """What the pod's environment says NCCL should use."""

    mode: str  # "rdma" | "tcp" | "unknown"
    mode_from: str  # "MLENV_NETWORK_MODE=rdma", ...
    hcas: IfSpec | None = None
    hcas_from: str = ""
    socket_ifname: IfSpec | None = None
    gdr: bool = False
    gdr_strict: bool = False  # widest level: a connection without GDR is a FAIL (else WARN)
    gdr_level: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for ``details.expected``."""
        return {
            "mode": self.mode,
            "mode_from": self.mode_from,
            "hcas": self.hcas.raw if self.hcas else None,
            "hcas_from": self.hcas_from or None,
            "socket_ifname": self.socket_ifname.raw if self.socket_ifname else None,
            "gdr": self.gdr,
            "gdr_level": self.gdr_level,
        }


def expectation(env: Mapping[str, str]) -> Expectation:
    """Read the expectation from the environment the pod got (render/env.py, pod init)."""
    mode_env = env.get("MLENV_NETWORK_MODE", "").strip().lower()
    if mode_env in ("rdma", "tcp"):
        mode, mode_from = mode_env, f"MLENV_NETWORK_MODE={mode_env}"
    elif env.get("NCCL_IB_DISABLE", "").strip() == "1":
        mode, mode_from = "tcp", "NCCL_IB_DISABLE=1"
    elif env.get("NCCL_IB_HCA", "").strip():
        mode, mode_from = "rdma", f"NCCL_IB_HCA={env['NCCL_IB_HCA'].strip()}"
    else:
        mode, mode_from = "unknown", "MLENV_NETWORK_MODE, NCCL_IB_DISABLE and NCCL_IB_HCA unset"
    devices = env.get("MLENV_RDMA_DEVICES", "").strip()
    hcas: IfSpec | None = None
    hcas_from = ""
    if devices and devices != "auto":
        hcas, hcas_from = (
            nccllog.parse_if_list(devices),
            "network.rdma.devices (MLENV_RDMA_DEVICES)",
        )
    elif env.get("NCCL_IB_HCA", "").strip():
        hcas, hcas_from = nccllog.parse_if_list(env["NCCL_IB_HCA"]), "NCCL_IB_HCA"
    ifname = env.get("NCCL_SOCKET_IFNAME", "").strip()
    level = env.get("NCCL_NET_GDR_LEVEL", "").strip() or None
    gdr = mode == "rdma" and level is not None and level.upper() not in _GDR_OFF
    strict = (
        gdr
        and level is not None
        and (level.upper() in _GDR_WIDEST or (level.isdigit() and int(level) >= 4))
    )
    return Expectation(
        mode=mode,
        mode_from=mode_from,
        hcas=hcas,
        hcas_from=hcas_from,
        socket_ifname=nccllog.parse_if_list(ifname) if ifname else None,
        gdr=gdr,
        gdr_strict=strict,
        gdr_level=level,
    )


@dataclass
class Judged:
    """The outcome for one rank's log."""

    status: Status
    reasons: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def _is_rdma_net(net: str) -> bool:
    # "IB" (NCCL's own), "IBext*" (the nccl-rdma-sharp plugin): verbs on IB or RoCE
    return net.upper().startswith("IB")


def _ifaces(log: NcclLog) -> str:
    return ", ".join(f"{s.name} {s.address}" for s in log.socket_ifs) or "interface not printed"


def _why_no_ib(log: NcclLog) -> str:
    causes = []
    if log.env.get("NCCL_IB_DISABLE", "").strip() == "1":
        causes.append("NCCL_IB_DISABLE=1 reached NCCL")
    if log.ib_no_device:
        causes.append("NCCL said 'NET/IB : No device found'")
    if "IB" in log.failed_plugins and not causes:
        causes.append("NCCL's IB plugin failed to initialize")
    return f" ({'; '.join(causes)})" if causes else ""


def judge(log: NcclLog, exp: Expectation, host: str, nnodes: int) -> Judged:
    """Judge one rank's NCCL log against the expectation (pure)."""
    net = log.network
    if log.lines == 0:
        return Judged(
            Status.ERROR,
            [
                "no NCCL log lines were captured, so the transport cannot be proven "
                "(NCCL_DEBUG_FILE not written: see details.log)"
            ],
        )
    if net is None:
        if exp.mode == "rdma" and (log.ib_no_device or "IB" in log.failed_plugins):
            return Judged(
                Status.FAIL,
                [
                    f"NCCL found no usable InfiniBand/RoCE device{_why_no_ib(log)} and "
                    f"named no network: check the RDMA device plugin and the Multus "
                    f"network attachment of {host}"
                ],
            )
        return Judged(
            Status.ERROR,
            [
                "NCCL never said which network it used ('Using network ...' missing "
                "from its log): the transport cannot be proven"
            ],
        )
    chans = log.net_channels(net)
    gdr_chans = [c for c in chans if c.gdr]
    metrics = {
        "net_channels": float(len(chans)),
        "gdr_channels": float(len(gdr_chans)),
        "ib_hcas": float(len(log.ib_devices)),
    }
    if exp.mode == "rdma":
        return _judge_rdma(log, exp, host, net, metrics)
    if exp.mode == "tcp":
        return _judge_tcp(log, exp, host, net, nnodes, metrics)
    used = (
        f"NET/{net} on {', '.join(d.label() for d in log.ib_devices)}"
        if _is_rdma_net(net) and log.ib_devices
        else f"NET/{net} on {_ifaces(log)}"
    )
    return Judged(
        Status.PASS,
        [f"{used}; no network mode configured ({exp.mode_from}): reported, not judged"],
        metrics,
    )


def _judge_rdma(
    log: NcclLog, exp: Expectation, host: str, net: str, metrics: dict[str, float]
) -> Judged:
    if not _is_rdma_net(net):
        return Judged(
            Status.FAIL,
            [
                f"rdma mode ({exp.mode_from}) but NCCL used NET/{net} on {_ifaces(log)}{_why_no_ib(log)}: "
                f"traffic fell back to TCP sockets; check the RDMA device plugin resources, the Multus network "
                f"attachment and NCCL_IB_GID_INDEX on {host}"
            ],
            metrics,
        )
    out = Judged(Status.PASS, [], metrics)
    if exp.hcas is not None:
        outside = [d for d in log.ib_devices if not exp.hcas.matches(d.name, d.port)]
        if outside:
            out.status = Status.FAIL
            out.reasons.append(
                f"NCCL used HCA {', '.join(d.label() for d in outside)}, outside the configured list "
                f"{exp.hcas.raw} ({exp.hcas_from}: {exp.hcas.describe()}): NCCL_IB_HCA did not reach this "
                f"rank or names other devices; check the pod's NCCL_IB_HCA and the devices allocated on {host}"
            )
    if exp.gdr:
        chans = log.net_channels(net)
        without = [c for c in chans if not c.gdr]
        sev = Status.FAIL if exp.gdr_strict else Status.WARN
        fix = (
            f"check that nvidia-peermem (or dma-buf) is loaded on {host} and that the GPU and HCA "
            f"share a PCIe switch"
        )
        if chans and without:
            out.status = max(out.status, sev, key=_rank)
            out.reasons.append(
                f"GPUDirect RDMA is configured (NCCL_NET_GDR_LEVEL={exp.gdr_level}) but {len(without)} of "
                f"{len(chans)} NET/{net} channel connections on this rank ran without it (no /GDRDMA): "
                f"data is staged through host memory; {fix}"
            )
        elif not chans:
            support = [g for g in log.gdr_support if _is_rdma_net(g.net)]
            if support and not any(g.enabled for g in support):
                out.status = max(out.status, sev, key=_rank)
                out.reasons.append(
                    f"GPUDirect RDMA is configured (NCCL_NET_GDR_LEVEL={exp.gdr_level}) but NCCL reports "
                    f"it Disabled for every HCA ({', '.join(g.name for g in support)}); {fix}"
                )
    if out.status == Status.PASS:
        hcas = ", ".join(d.label() for d in log.ib_devices) or "HCAs not printed"
        chans = log.net_channels(net)
        gdr = (
            f"GPUDirect RDMA on {sum(c.gdr for c in chans)}/{len(chans)} network channel connections"
            if chans
            else "no network channel on this rank (its traffic goes through a peer)"
        )
        out.reasons.append(f"NET/{net} on {hcas}; {gdr}")
    return out


def _judge_tcp(
    log: NcclLog, exp: Expectation, host: str, net: str, nnodes: int, metrics: dict[str, float]
) -> Judged:
    if _is_rdma_net(net):
        return Judged(
            Status.WARN,
            [
                f"tcp mode ({exp.mode_from}) but NCCL used NET/{net} on "
                f"{', '.join(d.label() for d in log.ib_devices) or 'HCAs not printed'}: NCCL_IB_DISABLE=1 did not "
                f"reach NCCL on {host}; the cluster is configured for TCP"
            ],
            metrics,
        )
    out = Judged(Status.PASS, [], metrics)
    bad: list[str] = []
    for s in log.socket_ifs:
        if exp.socket_ifname is not None and not exp.socket_ifname.matches(s.name):
            bad.append(
                f"{s.name} ({s.address}), which NCCL_SOCKET_IFNAME={exp.socket_ifname.raw} excludes "
                f"(it allows {exp.socket_ifname.describe()})"
            )
        elif s.name.startswith("lo") and nnodes > 1:
            bad.append(
                f"{s.name} ({s.address}), the loopback interface, which cannot reach another node"
            )
    if bad:
        out.status = Status.FAIL
        out.reasons.append(
            f"NCCL used interface {'; '.join(bad)}: NCCL_SOCKET_IFNAME did not reach this rank "
            f"or the pod's interfaces differ; check the pod network of {host}"
        )
    else:
        out.reasons.append(
            f"NET/{net} on {_ifaces(log)}"
            + (f" (NCCL_SOCKET_IFNAME={exp.socket_ifname.raw})" if exp.socket_ifname else "")
        )
    return out


_ORDER = {Status.PASS: 0, Status.SKIP: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 3}


def _rank(s: Status) -> int:
    return _ORDER[s]


def read_log(path: Path) -> NcclLog:
    """Parse the file NCCL wrote (an empty log when it is not there)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return nccllog.parse(f)
    except OSError:
        return NcclLog()


def result_for(
    log: NcclLog,
    exp: Expectation,
    host: str,
    nnodes: int,
    log_path: str,
    capture: dict[str, Any] | None = None,
) -> CheckResult:
    """This rank's result: the judgement, the evidence lines and what was expected (pure)."""
    j = judge(log, exp, host, nnodes)
    evidence = list(log.evidence)
    if log.evidence_dropped:
        evidence.append(f"… {log.evidence_dropped} more line(s) in {log_path}")
    details: dict[str, Any] = {
        "expected": exp.to_dict(),
        "used": log.to_summary(),
        "evidence": evidence,
        "log": log_path,
    }
    if capture:
        details["capture"] = capture
    return CheckResult(
        name=NAME,
        status=j.status,
        scope="rank",
        node=host,
        metrics=j.metrics,
        reasons=j.reasons,
        details=details,
    )


def skip_reason(backend: str, nnodes: int) -> str | None:
    """Why this run has no network transport to prove, or None when it has one."""
    if backend != "nccl":
        return (
            f"backend {backend} (CPU): NCCL is not in use, so there is no NCCL network transport to prove; "
            "run on GPUs across at least two nodes"
        )
    if nnodes < 2:
        return (
            "single node: NCCL keeps its traffic inside the node (NVLink, PCIe, shared memory); the network "
            "transport is proven only across nodes"
        )
    return None


@register
class FabricTransport(Check):
    """Which network NCCL used, on which HCAs/interfaces, with or without GPUDirect RDMA."""

    name = NAME
    run_order = 60
    metrics = {
        "net_channels": info("channels"),
        "gdr_channels": info("channels"),
        "ib_hcas": info("HCAs"),
    }
    description = "NCCL used the fabric the config names (IB/RoCE on the listed HCAs with GDR, or the allowed interface)"

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """Probe the world communicator once, then judge this rank's NCCL log."""
        why = skip_reason(ctx.backend, ctx.nnodes)
        if why is not None:
            if ctx.rank != 0:
                return []
            return [CheckResult(name=NAME, status=Status.SKIP, scope="world", reasons=[why])]
        import torch
        import torch.distributed as dist

        from mlenv.acceptance.evidence import ncclcapture

        t = torch.ones(PROBE_BYTES // 4, dtype=torch.float32, device=ctx.device)
        dist.all_reduce(t)
        torch.cuda.synchronize(torch.device(ctx.device))
        cap = ncclcapture.active()
        if cap is None:
            return [
                CheckResult(
                    name=NAME,
                    status=Status.ERROR,
                    scope="rank",
                    node=ctx.host,
                    reasons=[
                        "NCCL's log was not captured for this process (start it with python -m mlenv.acceptance)"
                    ],
                )
            ]
        log = read_log(cap.path)
        capture = {
            "NCCL_DEBUG_FILE": cap.plan.file_pattern,
            "user_file": cap.plan.user_file,
            "NCCL_DEBUG (user)": cap.plan.user_level,
            "NCCL_DEBUG_SUBSYS": os.environ.get("NCCL_DEBUG_SUBSYS"),
        }
        return [
            result_for(log, expectation(os.environ), ctx.host, ctx.nnodes, str(cap.path), capture)
        ]
