"""memory.h2d: pinned host<->device copy bandwidth per GPU, each direction.

What Azure's node health checks (``check_cuda_bw``: 128 MiB pinned copies, host to device
and device to host) and nvbandwidth's copy-engine tests measure: a GPU on a PCIe link
that trained down (Gen1 after a bad reset, x8 in an x16 slot) or a host bridge that is
misconfigured moves a fraction of what its peers do. Bandwidth here counts the bytes
crossing the link once (the CUDA ``bandwidthTest`` convention for H2D/D2H, unlike
memory.copy's read + write), best of N samples after a warm-up, on this rank's GPU.
The figures are judged against the per-SKU floor (``mlenv/data/floors.yaml``) or a
baseline rule, and against peers like every throughput.

A CPU rank has no link to measure: the check SKIPs once for the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.metrics import higher
from mlenv.acceptance.core.options import CheckOptions, at_least, option
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.core.timing import measure, stretch_factor

NAME = "memory.h2d"
NO_GPU = "no CUDA device on this run: host<->device bandwidth is measured on GPUs only"


def link_gbps(nbytes: int, seconds: float) -> float:
    """GB/s (10⁹ B/s) of moving ``nbytes`` across the link once in ``seconds``."""
    if seconds <= 0.0:
        raise ValueError(f"time must be positive, got {seconds}")
    return nbytes / seconds / 1e9


def time_h2d_d2h(
    nbytes: int, *, device: str, iters: int, warmup: int, inner: int, stretch: float = 1.0
) -> tuple[float, float, dict[str, Any]]:
    """(H2D GB/s, D2H GB/s, timing details) of ``copy_`` between one pinned host buffer and
    one device buffer of ``nbytes``, non-blocking on the current stream: the check's
    measurement (also what ``benchmarks/bench_gpu.py`` puts beside a plain pinned copy)."""
    import torch

    count = nbytes // 4
    host = torch.ones(count, dtype=torch.float32).pin_memory()
    dev = torch.empty(count, dtype=torch.float32, device=torch.device(device))

    def h2d(host: Any = host, dev: Any = dev) -> None:
        dev.copy_(host, non_blocking=True)

    def d2h(host: Any = host, dev: Any = dev) -> None:
        host.copy_(dev, non_blocking=True)

    moved = count * 4
    up = measure(h2d, device=device, iters=iters, warmup=warmup, inner=inner, stretch=stretch)
    down = measure(d2h, device=device, iters=iters, warmup=warmup, inner=inner, stretch=stretch)
    return (
        link_gbps(moved, up.best_s),
        link_gbps(moved, down.best_s),
        {"bytes": moved, "h2d": up.describe(), "d2h": down.describe(), "pinned": True},
    )


@dataclass(frozen=True)
class H2dOptions(CheckOptions):
    """Options of memory.h2d (the ``memory`` family's sizes apply, as for memory.copy)."""

    bytes: int = option(
        128 * 2**20, help="buffer size in bytes, copied whole each way (Azure's check: 128 MiB)"
    )
    iters: int = option(10, help="timed samples per direction (the best one counts)")
    warmup: int = option(3, help="untimed copies first, each direction")
    inner: int = option(5, help="copies per timed sample")

    def problems(self) -> list[tuple[str, str]]:
        """At least one float32; positive counts (warm-up may be 0)."""
        return (
            at_least(self, 4, "bytes")
            + at_least(self, 1, "iters", "inner")
            + at_least(self, 0, "warmup")
        )


@register
class H2dCheck(Check):
    """Pinned host-to-device and device-to-host bandwidth of this rank's GPU."""

    name = NAME
    description = "pinned host-to-device and device-to-host copy bandwidth per GPU (GB/s each way)"
    Options = H2dOptions
    metrics = {"h2d_gbps": higher("GB/s", trend=True), "d2h_gbps": higher("GB/s", trend=True)}

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """One rank-scope result with ``h2d_gbps`` and ``d2h_gbps``; one SKIP on a CPU run."""
        if not ctx.is_cuda:
            if ctx.rank != 0:
                return []
            return [CheckResult(name=NAME, status=Status.SKIP, scope="world", reasons=[NO_GPU])]
        t0 = time.perf_counter()
        o = ctx.options_of(H2dOptions, NAME)
        stretch = stretch_factor(ctx.fault("slow", NAME))
        up, down, details = time_h2d_d2h(
            o.bytes,
            device=ctx.device,
            iters=o.iters,
            warmup=o.warmup,
            inner=o.inner,
            stretch=stretch,
        )
        return [
            CheckResult(
                name=NAME,
                status=Status.PASS,
                scope="rank",
                node=ctx.host,
                rank=ctx.rank,
                metrics={"h2d_gbps": up, "d2h_gbps": down},
                details={
                    **details,
                    "device": ctx.device,
                    "gpu_uuid": gpu_uuid(ctx.device),
                    **({"slow_fault_factor": stretch} if stretch > 1.0 else {}),
                },
                duration_s=time.perf_counter() - t0,
            )
        ]


def gpu_uuid(device: str) -> str:
    """``GPU-<uuid>`` of a CUDA device as nvidia-smi prints it ("" when torch cannot say):
    what history and metrics key a GPU by, so a re-indexed GPU stays the same GPU."""
    import torch

    try:
        u = str(torch.cuda.get_device_properties(torch.device(device)).uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return ""
    return u if u.startswith("GPU-") else f"GPU-{u}"
