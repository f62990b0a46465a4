"""compute.matmul (per-device throughput) and compute.quorum (cross-rank correctness).

matmul: square GEMMs timed with CUDA events (GPU) or perf_counter (CPU) after a
warm-up, best of N samples; bf16, fp16 and tf32 (fp32 with TF32 allowed) on a GPU,
fp32 on CPU. 2·n³ floating-point operations per multiply.

quorum: every rank multiplies the same seeded integer-valued matrices in fp32 with
TF32 off. Every product and partial sum is an integer far below 2²⁴, so any correct
device and any summation order give bitwise the same result; the checksums are
all-gathered and a rank that disagrees with the majority is named (silent data
corruption). Rank 0 also computes the exact result in float64 on the CPU, which
breaks ties (two ranks, one bad) and catches a world that agrees on a wrong answer.

Faults (``mlenv.acceptance.core.faults``): ``slow`` stretches matmul's timed samples by
``factor``; ``corrupt`` perturbs this rank's quorum result before the checksum.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.metrics import higher, info
from mlenv.acceptance.core.options import CheckOptions, at_least, option
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.core.timing import measure, stretch_factor

QUORUM_SEED = 20240917
# Entries in [-QUORUM_RANGE, QUORUM_RANGE]: n·R² must stay below 2**24 for exactness.
QUORUM_RANGE = 4
QUORUM_MAX_N = (2**24) // (QUORUM_RANGE * QUORUM_RANGE)


def matmul_tflops(n: int, seconds: float) -> float:
    """TFLOPS of one n×n by n×n multiply (2·n³ operations) taking ``seconds``."""
    if seconds <= 0.0:
        raise ValueError(f"time must be positive, got {seconds}")
    return 2.0 * n**3 / seconds / 1e12


@dataclass(frozen=True)
class QuorumOutcome:
    """The majority checksum and the ranks that disagree with it."""

    majority: str
    agreeing: int
    disagreeing: tuple[int, ...]
    matches_reference: bool | None  # None when no reference was given


def quorum(digests: Sequence[str], reference: str | None = None) -> QuorumOutcome:
    """Which ranks disagree with the majority of ``digests`` (index = rank).

    The majority is the most common checksum. A tie (two ranks, one bad) is broken in
    favour of the checksum equal to ``reference`` (the exact result), then of the one
    rank 0 holds, so the outcome never depends on dict ordering.
    Raises ValueError on an empty list.
    """
    if not digests:
        raise ValueError("no checksums to compare")
    counts = Counter(digests)
    top = max(counts.values())
    tied = [d for d, c in counts.items() if c == top]
    if len(tied) == 1:
        majority = tied[0]
    elif reference is not None and reference in tied:
        majority = reference
    else:
        majority = min(tied, key=lambda d: digests.index(d))
    bad = tuple(r for r, d in enumerate(digests) if d != majority)
    return QuorumOutcome(
        majority=majority,
        agreeing=counts[majority],
        disagreeing=bad,
        matches_reference=None if reference is None else majority == reference,
    )


def quorum_reasons(
    outcome: QuorumOutcome, digests: Sequence[str], hosts: Sequence[str]
) -> list[str]:
    """One human line per disagreeing rank (rank, host, checksums), plus a world-wide one."""
    n = len(digests)
    out = [
        f"rank {r} ({hosts[r]}): matmul checksum {digests[r][:12]} differs from the "
        f"majority {outcome.majority[:12]} ({outcome.agreeing}/{n} ranks): silent data corruption"
        for r in outcome.disagreeing
    ]
    if outcome.matches_reference is False:
        out.append(
            f"the majority checksum {outcome.majority[:12]} ({outcome.agreeing}/{n} ranks) "
            "differs from the exact float64 reference: the ranks agree on a wrong result"
        )
    return out


def quorum_blame(
    outcome: QuorumOutcome, digests: Sequence[str], hosts: Sequence[str], reference: str
) -> list[dict[str, Any]]:
    """The ranks the node verdicts blame (action ``drain``: a GPU computing wrong answers
    is drained, never reset): those that disagree with the majority; and when the
    majority itself is wrong, every rank that differs from the exact reference, unless
    those span every node of a world of several (all nodes agreeing on a wrong answer
    points at the software, not at one node). A world of one node whose ranks agree on a
    wrong answer (a re-check on a quarantined node) is that node's FAIL."""
    n = len(digests)
    if outcome.matches_reference is not False:
        return [
            {
                "rank": r,
                "action": "drain",
                "figure": f"rank {r}: matmul checksum differs from the majority "
                f"({outcome.agreeing}/{n} ranks): silent data corruption",
            }
            for r in outcome.disagreeing
        ]
    wrong = [r for r, d in enumerate(digests) if d != reference]
    if len({hosts[r] for r in wrong}) == len(set(hosts)) > 1:
        return []
    return [
        {
            "rank": r,
            "action": "drain",
            "figure": f"rank {r}: matmul checksum differs from the exact float64 reference: "
            "silent data corruption",
        }
        for r in wrong
    ]


def _digest(t: Any) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def _dtypes(ctx: RunContext) -> list[tuple[str, Any, bool]]:
    """(metric suffix, torch dtype, allow_tf32) per measured precision on this device."""
    import torch

    if ctx.is_cuda:
        return [
            ("bf16", torch.bfloat16, False),
            ("fp16", torch.float16, False),
            ("tf32", torch.float32, True),
        ]
    return [("fp32", torch.float32, False)]


@contextmanager
def matmul_tf32(enabled: bool) -> Iterator[None]:
    """Let fp32 CUDA matmuls use TF32 (or forbid it) inside the block, then restore.

    torch >= 2.9 has ``fp32_precision``; mixing it with the legacy ``allow_tf32`` flag
    raises once anything in the process used the new one, so the new API wins where
    it exists. The plain reference of ``benchmarks/bench_gpu.py`` sets TF32 through this
    same switch (the check and its reference run with the same settings).
    """
    import torch

    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        prev_p = m.fp32_precision
        m.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            m.fp32_precision = prev_p
        return
    prev = m.allow_tf32
    m.allow_tf32 = enabled
    try:
        yield
    finally:
        m.allow_tf32 = prev


def matmul_settings() -> dict[str, Any]:
    """The fp32 matmul setting in force, recorded beside a figure (the flag of the API in use)."""
    import torch

    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        return {"fp32_precision": str(m.fp32_precision)}
    return {"allow_tf32": bool(m.allow_tf32)}


def time_matmul(
    n: int,
    dtype: Any,
    *,
    device: str,
    iters: int,
    warmup: int,
    inner: int,
    tf32: bool = False,
    stretch: float = 1.0,
) -> tuple[float, dict[str, Any]]:
    """(TFLOPS, timing details) of square ``n``-GEMMs in ``dtype``: the check's measurement, one dtype.

    ``tf32`` lets fp32 use TF32 inside (CUDA). Used by :class:`MatmulCheck` per dtype and
    by ``benchmarks/bench_gpu.py`` against a plain ``torch.matmul`` loop.
    """
    import torch

    cuda = device.startswith("cuda")
    dev = torch.device(device)
    with matmul_tf32(tf32) if cuda else nullcontext():
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        c = torch.empty(n, n, device=dev, dtype=dtype)

        def gemm(a: Any = a, b: Any = b, c: Any = c) -> None:
            torch.matmul(a, b, out=c)

        t = measure(gemm, device=device, iters=iters, warmup=warmup, inner=inner, stretch=stretch)
        settings = matmul_settings() if cuda else {}
        del a, b, c
    return matmul_tflops(n, t.best_s), {**t.describe(), **settings}


@dataclass(frozen=True)
class MatmulOptions(CheckOptions):
    """Options of compute.matmul (a 512³ GEMM is launch-bound on a GPU: 8192³ measures the device)."""

    n: int = option(512, cuda=8192, help="matrix size: n×n by n×n multiplies")
    iters: int = option(5, cuda=10, help="timed samples (the best one counts)")
    warmup: int = option(2, cuda=3, help="untimed multiplies first")
    # A single 8192³ GEMM is ~1 ms on an H100: several per sample keep event overhead
    # out of the figure; on CPU one multiply is already milliseconds.
    inner: int = option(1, cuda=10, help="multiplies per timed sample")

    def problems(self) -> list[tuple[str, str]]:
        """Sizes and counts must be positive (warm-up may be 0)."""
        return at_least(self, 1, "n", "iters", "inner") + at_least(self, 0, "warmup")


@dataclass(frozen=True)
class QuorumOptions(CheckOptions):
    """Options of compute.quorum."""

    # Its own name, not "n": the family's "n" (8192 in the full profile) would make
    # rank 0's float64 CPU reference take minutes.
    quorum_n: int = option(
        256, cuda=1024, help=f"matrix size of the agreement multiply (1..{QUORUM_MAX_N})"
    )

    def problems(self) -> list[tuple[str, str]]:
        """The size keeps every sum exact in fp32."""
        if not 1 <= self.quorum_n <= QUORUM_MAX_N:
            return [
                ("quorum_n", f"must be in 1..{QUORUM_MAX_N} (exact in fp32), got {self.quorum_n}")
            ]
        return []


@register
class MatmulCheck(Check):
    """Per-device GEMM throughput in TFLOPS."""

    name = "compute.matmul"
    description = "matmul TFLOPS per device (bf16/fp16/tf32 on GPU, fp32 on CPU)"
    Options = MatmulOptions
    run_order = 30
    metrics = {"tflops_*": higher("TFLOP/s", trend=True)}

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """Time square multiplies per precision; one rank-scope result."""
        t_start = time.perf_counter()
        o = ctx.options_of(MatmulOptions, self.name)
        n, iters, warmup, inner = o.n, o.iters, o.warmup, o.inner
        stretch = stretch_factor(ctx.fault("slow", self.name))
        metrics: dict[str, float] = {}
        timings: dict[str, Any] = {}
        for suffix, dtype, tf32 in _dtypes(ctx):
            metrics[f"tflops_{suffix}"], timings[suffix] = time_matmul(
                n,
                dtype,
                device=ctx.device,
                iters=iters,
                warmup=warmup,
                inner=inner,
                tf32=tf32,
                stretch=stretch,
            )
        return [
            CheckResult(
                name=self.name,
                status=Status.PASS,
                scope="rank",
                node=ctx.host,
                rank=ctx.rank,
                metrics=metrics,
                details={
                    "shape": [n, n, n],
                    "iterations": iters,
                    "warmup": warmup,
                    "inner": inner,
                    "timing": timings,
                    "device": ctx.device,
                    **({"slow_fault_factor": stretch} if stretch > 1.0 else {}),
                },
                duration_s=time.perf_counter() - t_start,
            )
        ]


@register
class QuorumCheck(Check):
    """Cross-rank agreement on one exactly-representable matmul."""

    name = "compute.quorum"
    description = "every rank multiplies the same seeded inputs; disagreeing ranks are named"
    Options = QuorumOptions
    metrics = {"disagreeing_ranks": info("ranks")}

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """All ranks compute and all-gather a checksum; rank 0 returns the world result."""
        import torch
        import torch.distributed as dist

        t_start = time.perf_counter()
        n = ctx.options_of(QuorumOptions, self.name).quorum_n
        gen = torch.Generator().manual_seed(QUORUM_SEED)
        a64 = torch.randint(-QUORUM_RANGE, QUORUM_RANGE + 1, (n, n), generator=gen).double()
        b64 = torch.randint(-QUORUM_RANGE, QUORUM_RANGE + 1, (n, n), generator=gen).double()
        dev = torch.device(ctx.device)
        with matmul_tf32(False) if ctx.is_cuda else nullcontext():  # TF32 would round the sums
            c = torch.matmul(a64.float().to(dev), b64.float().to(dev))
        if ctx.fault("corrupt", self.name):
            c[0, 0] += 1.0  # one flipped value is what silent corruption looks like
        mine = (_digest(c), ctx.host)
        gathered: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(gathered, mine)
        if ctx.rank != 0:
            return []
        digests = [str(g[0]) for g in gathered]
        hosts = [str(g[1]) for g in gathered]
        reference = _digest(torch.matmul(a64, b64).float())
        outcome = quorum(digests, reference)
        reasons = quorum_reasons(outcome, digests, hosts)
        return [
            CheckResult(
                name=self.name,
                status=Status.FAIL if reasons else Status.PASS,
                scope="world",
                node=None,
                rank=None,
                metrics={"disagreeing_ranks": float(len(outcome.disagreeing))},
                reasons=reasons,
                details={
                    "shape": [n, n, n],
                    "seed": QUORUM_SEED,
                    "dtype": "float32",
                    "checksums": {str(r): d for r, d in enumerate(digests)},
                    "hosts": hosts,
                    "reference": reference,
                    "disagreeing": list(outcome.disagreeing),
                    "blame": quorum_blame(outcome, digests, hosts, reference),
                },
                duration_s=time.perf_counter() - t_start,
            )
        ]
