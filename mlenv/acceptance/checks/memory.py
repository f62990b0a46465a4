"""memory.copy: per-device copy bandwidth.

A device-to-device ``copy_`` of one large buffer on a GPU, a large tensor copy in host
memory on CPU. Bandwidth counts bytes read plus bytes written (2 × buffer) per copy,
the convention of the CUDA ``bandwidthTest`` and STREAM's Copy kernel; best of N
samples after a warm-up. The ``slow`` fault stretches the samples like compute's.
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


def copy_gbps(nbytes: int, seconds: float) -> float:
    """GB/s (10⁹ B/s) of copying ``nbytes`` (read once, written once) in ``seconds``."""
    if seconds <= 0.0:
        raise ValueError(f"time must be positive, got {seconds}")
    return 2.0 * nbytes / seconds / 1e9


def time_copy(
    nbytes: int, *, device: str, iters: int, warmup: int, inner: int, stretch: float = 1.0
) -> tuple[float, int, dict[str, Any]]:
    """(GB/s, bytes moved, timing details) of ``dst.copy_(src)`` of one ``nbytes`` buffer:
    the check's measurement (also what ``benchmarks/bench_gpu.py`` puts beside a plain loop)."""
    import torch

    count = nbytes // 4
    dev = torch.device(device)
    # Fill the source so pages are really mapped and the copy reads real memory.
    src = torch.ones(count, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)

    def copy(src: Any = src, dst: Any = dst) -> None:
        dst.copy_(src)

    t = measure(copy, device=device, iters=iters, warmup=warmup, inner=inner, stretch=stretch)
    moved = count * 4
    return copy_gbps(moved, t.best_s), moved, t.describe()


@dataclass(frozen=True)
class CopyOptions(CheckOptions):
    """Options of memory.copy (on a GPU the buffer must not fit the L2 cache: 50 MB on an H100)."""

    bytes: int = option(32 * 2**20, cuda=1024 * 2**20, help="buffer size in bytes (copied whole)")
    iters: int = option(5, cuda=10, help="timed samples (the best one counts)")
    warmup: int = option(1, cuda=3, help="untimed copies first")
    inner: int = option(1, cuda=5, help="copies per timed sample")

    def problems(self) -> list[tuple[str, str]]:
        """At least one float32; positive counts (warm-up may be 0)."""
        return (
            at_least(self, 4, "bytes")
            + at_least(self, 1, "iters", "inner")
            + at_least(self, 0, "warmup")
        )


@register
class CopyCheck(Check):
    """Copy bandwidth of this rank's device."""

    name = "memory.copy"
    description = "device-to-device copy bandwidth (GPU) or large host-memory copy (CPU)"
    Options = CopyOptions
    run_order = 40
    metrics = {"copy_gbps": higher("GB/s", trend=True)}

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """Time ``dst.copy_(src)`` of a large buffer; one rank-scope result."""
        t_start = time.perf_counter()
        o = ctx.options_of(CopyOptions, self.name)
        iters, warmup = o.iters, o.warmup
        stretch = stretch_factor(ctx.fault("slow", self.name))
        gbps, moved, timing = time_copy(
            o.bytes, device=ctx.device, iters=iters, warmup=warmup, inner=o.inner, stretch=stretch
        )
        return [
            CheckResult(
                name=self.name,
                status=Status.PASS,
                scope="rank",
                node=ctx.host,
                rank=ctx.rank,
                metrics={"copy_gbps": gbps},
                details={
                    "bytes": moved,
                    "iterations": iters,
                    "warmup": warmup,
                    "timing": timing,
                    "device": ctx.device,
                    "kind": "device-to-device" if ctx.is_cuda else "host memory",
                    **({"slow_fault_factor": stretch} if stretch > 1.0 else {}),
                },
                duration_s=time.perf_counter() - t_start,
            )
        ]
