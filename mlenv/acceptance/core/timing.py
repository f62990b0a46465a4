"""Timing of device work: CUDA events on a GPU, ``perf_counter`` on CPU.

Every measurement runs ``warmup`` untimed repetitions first (allocator, cuBLAS
heuristics, gloo connections), then ``iters`` timed samples of ``inner`` calls each.
Throughput checks report the best sample (the device's capability, least disturbed by
the OS); collectives report the mean, as nccl-tests does.

torch is imported inside the functions that need it; the statistics are pure.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """Per-call durations in seconds of one measurement, one entry per sample."""

    samples: tuple[float, ...]
    inner: int  # calls per sample; every sample is already divided by it
    method: str  # "cuda-events" | "perf_counter"

    @property
    def best_s(self) -> float:
        """The fastest sample's seconds per call."""
        return min(self.samples)

    @property
    def mean_s(self) -> float:
        """The mean seconds per call over the samples."""
        return statistics.fmean(self.samples)

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary for a result's ``details``."""
        return {
            "method": self.method,
            "samples": len(self.samples),
            "inner": self.inner,
            "best_s": self.best_s,
            "mean_s": self.mean_s,
        }


def stretch_factor(fault: dict[str, str] | None) -> float:
    """The ``factor`` of an injected ``slow`` fault (1.0 without one).

    Raises ValueError when the factor is not a number of at least 1, so a typo in
    MLENV_FAULT is loud instead of silently testing nothing.
    """
    if fault is None:
        return 1.0
    raw = fault.get("factor", "4")
    try:
        f = float(raw)
    except ValueError:
        raise ValueError(f"MLENV_FAULT slow: factor={raw!r} is not a number") from None
    if f < 1.0:
        raise ValueError(f"MLENV_FAULT slow: factor={raw!r} must be >= 1")
    return f


class Stretch:
    """The ``slow`` fault's padding: after each timed sample, ``(factor - 1)`` times the
    fastest sample this stretch has seen, slept inside the sample.

    Not ``(factor - 1)`` times the sample itself: a collective's call right after a long
    sleep is slower on its own (its partner wakes from a long wait: 6 ms after 0.2 s of
    idle against 0.5 ms back to back, two gloo ranks on loopback, 256 KB), so padding by
    the sample fed each sleep into a longer call and a longer sleep, and a 200x fault
    came out at 6,000x and overran the check's deadline. One object may span several
    :func:`measure` calls (a probe call, then the timed ones) so the fastest is known.
    """

    def __init__(self, factor: float = 1.0) -> None:
        self.factor = factor
        self.fastest_s = math.inf

    @property
    def active(self) -> bool:
        """Whether the fault pads at all (a factor above 1)."""
        return self.factor > 1.0

    def seen(self, elapsed_s: float) -> None:
        """Note an unpadded call or sample's seconds (warm-up calls count too)."""
        self.fastest_s = min(self.fastest_s, elapsed_s)

    def pad_s(self, elapsed_s: float) -> float:
        """Seconds to add to a sample that took ``elapsed_s`` unpadded."""
        self.seen(elapsed_s)
        return (self.factor - 1.0) * self.fastest_s if self.active else 0.0


def measure(
    fn: Callable[[], object],
    *,
    device: str,
    iters: int,
    warmup: int,
    inner: int = 1,
    stretch: float | Stretch = 1.0,
) -> Timing:
    """Time ``fn`` on ``device`` ("cpu" or "cuda:<i>").

    ``fn`` must launch its work on the current CUDA stream (or run it synchronously on
    CPU). ``stretch`` > 1 (the ``slow`` fault) sleeps inside each sample (see
    :class:`Stretch`), so the sample really takes about that many times longer and the
    rank becomes a genuine throughput outlier rather than a relabelled one.
    """
    if iters < 1 or inner < 1 or warmup < 0:
        raise ValueError(f"iters={iters}, inner={inner} must be >= 1 and warmup={warmup} >= 0")
    pad = stretch if isinstance(stretch, Stretch) else Stretch(stretch)
    if device.startswith("cuda"):
        return _measure_cuda(fn, device=device, iters=iters, warmup=warmup, inner=inner, pad=pad)
    return _measure_cpu(fn, iters=iters, warmup=warmup, inner=inner, pad=pad)


def _measure_cpu(
    fn: Callable[[], object], *, iters: int, warmup: int, inner: int, pad: Stretch
) -> Timing:
    for _ in range(warmup):
        t0 = time.perf_counter()
        fn()
        if pad.active:
            pad.seen(time.perf_counter() - t0)
    samples: list[float] = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        elapsed = time.perf_counter() - t0
        if pad.active:
            time.sleep(pad.pad_s(elapsed / inner) * inner)
            elapsed = time.perf_counter() - t0
        samples.append(elapsed / inner)
    return Timing(tuple(samples), inner, "perf_counter")


def _measure_cuda(
    fn: Callable[[], object], *, device: str, iters: int, warmup: int, inner: int, pad: Stretch
) -> Timing:
    import torch

    # Events and syncs name the device's current stream explicitly: the current device
    # is per thread, and timing cuda:0's stream while the work runs on cuda:3 would
    # measure nothing.
    dev = torch.device(device)
    stream = torch.cuda.current_stream(dev)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(dev)
    samples: list[float] = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record(stream)
        for _ in range(inner):
            fn()
        end.record(stream)
        end.synchronize()
        elapsed = start.elapsed_time(end) / 1e3  # events report milliseconds
        if pad.active:
            # The GPU work is already done: the stretch is host time, added honestly.
            extra = pad.pad_s(elapsed / inner) * inner
            time.sleep(extra)
            elapsed += extra
        samples.append(elapsed / inner)
    return Timing(tuple(samples), inner, "cuda-events")
