"""fabric.ports: each InfiniBand/RoCE port's state, rate and error counters under load.

Per HCA port of each node (one node-scope result, ``details.port`` = ``mlx5_0:1``):
the port must be ACTIVE; its rate (``rate_gbps``) is judged against the ``rate_gbps``
option, or else the per-SKU floor or a baseline rule (Azure's ``check_hw_ib 400`` on an
H100 v5); and the error counters are read before and after a burst of all_reduce traffic
over the world that this check drives itself, so a link that goes down or retrains
(``link_downed``, ``link_error_recovery``) under traffic FAILs and one that collects
symbol or receive errors WARNs (above ``error_warn_delta``), naming the counters.

Read from ``/sys/class/infiniband`` without privilege. A node without RDMA devices, and a
CPU run (whose gloo traffic never crosses these ports), SKIP once with the reason.
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass
from pathlib import Path

from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.metrics import higher, info
from mlenv.acceptance.core.options import CheckOptions, at_least, option
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import ibports

NAME = "fabric.ports"
NO_GPU = "no CUDA device on this run: its gloo traffic does not cross the RDMA ports, which are read on GPU runs only"


@dataclass(frozen=True)
class PortsOptions(CheckOptions):
    """Options of fabric.ports."""

    hcas: str = option(
        "*", help="glob of the HCA names to judge, e.g. 'mlx5_ib*' (Azure's GPU rails)"
    )
    rate_gbps: float = option(
        0.0,
        help="rate every port must reach, Gb/s, e.g. 400 for NDR (0: the per-SKU floor or baseline)",
    )
    load_bytes: int = option(
        64 * 2**20, cuda=256 * 2**20, help="all_reduce buffer of the load, bytes"
    )
    load_iters: int = option(5, cuda=50, help="all_reduce calls between the two counter reads")
    error_warn_delta: int = option(
        0, help="growth of an error counter (symbol, receive errors, ...) above which a port WARNs"
    )

    def problems(self) -> list[tuple[str, str]]:
        """Non-negative bars; a load of at least one float32 and one call."""
        return (
            at_least(self, 0, "rate_gbps", "error_warn_delta")
            + at_least(self, 4, "load_bytes")
            + at_least(self, 1, "load_iters")
        )


def judge_port(
    before: ibports.Port,
    after: ibports.Port,
    *,
    host: str,
    rate_gbps: float = 0.0,
    error_warn_delta: int = 0,
) -> CheckResult:
    """One port's result from its readings before and after the load."""
    fail: list[str] = []
    warn: list[str] = []
    if after.state != "ACTIVE":
        fail.append(f"state {after.state or 'unreadable'} (phys {after.phys_state or '?'})")
    if rate_gbps and (after.rate_gbps is None or after.rate_gbps < rate_gbps):
        fail.append(f"rate {after.rate_text or 'unreadable'}, expected >= {rate_gbps:g} Gb/s")
    if before.rate_gbps is not None and after.rate_gbps != before.rate_gbps:
        fail.append(f"rate changed under load: {before.rate_text} -> {after.rate_text}")
    d = ibports.deltas(before, after)
    flaps = {k: v for k, v in d.items() if k in ibports.FLAP_COUNTERS and v > 0}
    errors = {k: v for k, v in d.items() if k in ibports.ERROR_COUNTERS and v > error_warn_delta}
    if flaps:
        fail.append(
            "the link flapped under load: " + ", ".join(f"{k} +{v}" for k, v in flaps.items())
        )
    if errors:
        warn.append("errors under load: " + ", ".join(f"{k} +{v}" for k, v in errors.items()))
    metrics: dict[str, float] = {f"delta_{k}": float(v) for k, v in d.items()}
    if after.rate_gbps is not None:
        metrics["rate_gbps"] = after.rate_gbps
    metrics["active"] = float(after.state == "ACTIVE")
    return CheckResult(
        name=NAME,
        status=Status.FAIL if fail else Status.WARN if warn else Status.PASS,
        scope="node",
        node=host,
        metrics=metrics,
        reasons=[f"{after.name}: " + "; ".join(fail + warn)] if fail or warn else [],
        details={
            "port": after.name,
            "hca": after.hca,
            "link_layer": after.link_layer,
            "state": after.state,
            "phys_state": after.phys_state,
            "rate": after.rate_text,
            "counters_before": {k: before.counters[k] for k in d},
            "counters_after": {k: after.counters[k] for k in d},
        },
    )


def judge_node(
    before: list[ibports.Port],
    after: list[ibports.Port],
    *,
    host: str,
    hcas: str = "*",
    rate_gbps: float = 0.0,
    error_warn_delta: int = 0,
) -> list[CheckResult]:
    """Every selected port's result; a port gone after the load FAILs; none at all SKIPs."""
    sel_b = {p.name: p for p in before if fnmatch.fnmatchcase(p.hca, hcas)}
    sel_a = {p.name: p for p in after if fnmatch.fnmatchcase(p.hca, hcas)}
    if not sel_b:
        return [
            CheckResult(
                name=NAME,
                status=Status.SKIP,
                scope="node",
                node=host,
                reasons=[f"no RDMA port matching {hcas!r} under {ibports.SYSFS} on {host}"],
            )
        ]
    out = []
    for name, b in sel_b.items():
        a = sel_a.get(name)
        if a is None:
            out.append(
                CheckResult(
                    name=NAME,
                    status=Status.FAIL,
                    scope="node",
                    node=host,
                    reasons=[f"{name}: the port disappeared under load"],
                    details={"port": name, "hca": b.hca},
                )
            )
            continue
        out.append(
            judge_port(b, a, host=host, rate_gbps=rate_gbps, error_warn_delta=error_warn_delta)
        )
    return out


@register
class PortsCheck(Check):
    """The RDMA ports of this node, before and after a burst of NCCL traffic."""

    name = NAME
    description = (
        "InfiniBand/RoCE port state, rate vs expected and error counters before/after "
        "a burst of all_reduce (/sys/class/infiniband)"
    )
    Options = PortsOptions
    metrics = {
        "rate_gbps": higher("Gb/s"),
        "active": info("flag"),
        "delta_*": info("count"),
    }

    def run(self, ctx: RunContext, root: Path = ibports.SYSFS) -> list[CheckResult]:
        """Node-scope results from each node's first rank; every rank drives the load."""
        if not ctx.is_cuda:
            if ctx.rank != 0:
                return []
            return [CheckResult(name=NAME, status=Status.SKIP, scope="world", reasons=[NO_GPU])]
        import torch
        import torch.distributed as dist

        o = ctx.options_of(PortsOptions, NAME)
        t0 = time.perf_counter()
        before = ibports.read_ports(root) if ctx.local_rank == 0 else []
        t = torch.ones(o.load_bytes // 4, dtype=torch.float32, device=torch.device(ctx.device))
        for _ in range(o.load_iters):  # the same count on every rank: a collective
            dist.all_reduce(t)
        torch.cuda.synchronize(torch.device(ctx.device))
        if ctx.local_rank != 0:
            return []
        after = ibports.read_ports(root)
        out = judge_node(
            before,
            after,
            host=ctx.host,
            hcas=o.hcas,
            rate_gbps=o.rate_gbps,
            error_warn_delta=o.error_warn_delta,
        )
        took = time.perf_counter() - t0
        for r in out:
            r.duration_s = took
            r.details["load"] = {"bytes": o.load_bytes, "all_reduce_calls": o.load_iters}
        return out
