"""GPU figures of the compute and memory checks against plain torch on the same device.

Needs CUDA; on a machine without it, prints why and exits 0 (so ``make bench`` still
runs the CPU benchmarks). For each precision (bf16, fp16, tf32) it measures the
``compute.matmul`` check at its default shape and the best plain ``torch.matmul``
figure at the same shape, in paired rounds whose order alternates (target: median
paired ratio ≥ 97 %), and the best plain figure it can find over square shapes
4096…16384 (CUDA events, warm-up, best of N). Then ``memory.copy`` against a plain
``Tensor.copy_`` loop of the same buffer.

    python benchmarks/bench_gpu.py [--n 8192] [--iters 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from typing import Any

TARGET = 0.97
SHAPES = (4096, 8192, 12288, 16384)


def _best_event_s(fn: Callable[[], object], iters: int, inner: int, warmup: int) -> float:
    """Best per-call seconds of ``fn`` over ``iters`` samples of ``inner`` calls, with CUDA
    events. Written out here rather than through the check's own ``measure``, so the
    reference does not share the code it is judging."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e) / 1e3 / inner)
    return best


def _plain_matmul_tflops(n: int, dtype: Any, tf32: bool, iters: int) -> float:
    import torch

    from mlenv.acceptance.checks.compute import matmul_tf32

    with matmul_tf32(tf32):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        best = _best_event_s(lambda: torch.matmul(a, b), iters, inner=10, warmup=5)
    return 2.0 * n**3 / best / 1e12


def _plain_copy_gbps(nbytes: int, iters: int) -> float:
    import torch

    src = torch.ones(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    best = _best_event_s(lambda: dst.copy_(src), iters, inner=5, warmup=3)
    return 2.0 * (nbytes // 4 * 4) / best / 1e9


def main() -> int:
    """Measure, print Markdown tables; exit 1 when a same-shape matmul ratio misses 97 %."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8192, help="the check's matmul shape")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="paired check/plain rounds (order alternates)")
    ap.add_argument("--copy-mb", type=int, default=1024)
    a = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("bench_gpu: skipped: no CUDA device on this machine (torch "
              f"{torch.__version__}); run it where a GPU is present")
        return 0
    from mlenv.acceptance.checks.compute import MatmulCheck
    from mlenv.acceptance.checks.memory import CopyCheck
    from mlenv.acceptance.core.base import RunContext

    torch.cuda.set_device(0)
    name = torch.cuda.get_device_name(0)
    ctx = RunContext(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
                     nnodes=1, host="localhost", backend="nccl", device="cuda:0",
                     options={"compute": {"n": a.n, "iters": a.iters},
                              "memory": {"bytes": a.copy_mb * 2**20, "iters": a.iters}})
    precisions = (("bf16", torch.bfloat16, False), ("fp16", torch.float16, False),
                  ("tf32", torch.float32, True))
    # Paired rounds at the same shape, alternating which goes first: a GPU that heats
    # up and lowers its clocks over a run would otherwise favour whichever ran first.
    check: dict[str, list[float]] = {p: [] for p, _, _ in precisions}
    plain: dict[str, list[float]] = {p: [] for p, _, _ in precisions}
    for r in range(a.rounds):
        def run_check() -> None:
            (mm,) = MatmulCheck().run(ctx)
            for p, _, _ in precisions:
                check[p].append(mm.metrics[f"tflops_{p}"])

        def run_plain() -> None:
            for p, dtype, tf32 in precisions:
                plain[p].append(_plain_matmul_tflops(a.n, dtype, tf32, a.iters))

        for step in ((run_check, run_plain) if r % 2 == 0 else (run_plain, run_check)):
            step()
    sweep = {p: {n: _plain_matmul_tflops(n, dtype, tf32, a.iters) for n in SHAPES}
             for p, dtype, tf32 in precisions}
    print(f"\n{name}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
          f"{a.rounds} paired rounds at n={a.n}, best of {a.iters} samples each\n")
    print("| precision | compute.matmul (TFLOPS, median) | plain torch.matmul, same shape | "
          "median paired ratio | best plain over shapes (n) | check / best |")
    print("|---|---:|---:|---:|---:|---:|")
    worst = float("inf")
    for p, _, _ in precisions:
        ratios = [c / q for c, q in zip(check[p], plain[p], strict=True)]
        ratio = statistics.median(ratios)
        worst = min(worst, ratio)
        best_n = max(sweep[p], key=sweep[p].__getitem__)
        best = sweep[p][best_n]
        print(f"| {p} | {statistics.median(check[p]):.1f} | {statistics.median(plain[p]):.1f} | {ratio:.3f} | "
              f"{best:.1f} ({best_n}) | {statistics.median(check[p]) / best:.3f} |")
    (cp,) = CopyCheck().run(ctx)
    plain_copy = _plain_copy_gbps(a.copy_mb * 2**20, a.iters)
    print(f"\nmemory.copy: {cp.metrics['copy_gbps']:.0f} GB/s (read + write, {a.copy_mb} MiB); "
          f"plain copy_ loop: {plain_copy:.0f} GB/s; ratio {cp.metrics['copy_gbps'] / plain_copy:.3f}")
    ok = worst >= TARGET
    print(f"\nworst same-shape matmul ratio {worst:.3f} ({'meets' if ok else 'MISSES'} the 97 % target)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
