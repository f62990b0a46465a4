"""`make bench-gpu`: the acceptance checks against plain PyTorch on the same device, one process.

For each figure, rounds of *reference, ours* then *ours, reference* (the order alternates)
on one GPU in one process, each matmul pair after a second of untimed GEMMs, so both
sides of a pair see the same clocks and temperature:

* ``matmul_bf16`` / ``matmul_tf32``: a plain ``a @ b`` loop (written here, the TF32 switch
  the check's own, so both run with the same setting, recorded in the row) against the
  check's :func:`~mlenv.acceptance.checks.compute.time_matmul`, same shape, warm-up and
  samples;
* ``copy``: a plain ``dst.copy_(src)`` loop against the check's
  :func:`~mlenv.acceptance.checks.memory.time_copy`;
* ``h2d`` / ``d2h`` (GPU only): a plain pinned ``copy_`` each way against memory.h2d's
  :func:`~mlenv.acceptance.checks.hostcopy.time_h2d_d2h`, 128 MiB;
* ``training_plain`` / ``training_deepspeed``: a plain autocast training loop written
  here against the training check's :func:`~mlenv.acceptance.checks.training.train_one`
  (its own plain loop, the hardware figure, and its DeepSpeed run), same model and batch.

Prints each ratio (ours / reference) with its min / median / max over the rounds, and
writes one JSON row per figure (GPU, driver, torch and DeepSpeed versions, date, the
medians and the ratio spread) to ``--out`` (``BENCH_OUT`` in the Makefile). ``--record
FILE`` appends such rows to docs/benchmarks.md's bench-gpu table on the development
machine (a GPU machine may hand back only files).

Without CUDA it prints one line and exits 0, claiming nothing. ``--cpu`` runs the same
code on the CPU (gloo, small sizes: fp32 matmul, a small copy, ResNet-18 at 16 px), which
is what the tests run so this path cannot rot; its figures say nothing about a GPU.

    python benchmarks/bench_gpu.py [--out FILE] [--rounds N] [--cpu]
    python benchmarks/bench_gpu.py --record FILE [--doc docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- bench-gpu rows: appended by `make bench-record` -->"
ROW_KEYS = (
    "date",
    "device",
    "driver",
    "torch",
    "deepspeed",
    "figure",
    "unit",
    "reference",
    "ours",
    "ratio_min",
    "ratio_median",
    "ratio_max",
    "rounds",
    "setup",
)


# ----------------------------------------------------------------------- plain references
# Written out here, not through the checks' code, so the reference does not share what it judges.


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def _best_per_call_s(
    fn: Callable[[], object], *, cuda: bool, iters: int, warmup: int, inner: int
) -> float:
    """Best per-call seconds over ``iters`` samples of ``inner`` calls (CUDA events or perf_counter)."""
    import time

    import torch

    for _ in range(warmup):
        fn()
    _sync(cuda)
    best = math.inf
    for _ in range(iters):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(inner):
                fn()
            e.record()
            e.synchronize()
            sec = s.elapsed_time(e) / 1e3
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            sec = time.perf_counter() - t0
        best = min(best, sec / inner)
    return best


def plain_matmul_tflops(
    n: int, dtype: Any, *, tf32: bool, device: str, iters: int, warmup: int, inner: int
) -> tuple[float, dict[str, Any]]:
    """A plain ``a @ b`` loop; (TFLOPS, the fp32 matmul setting it ran with).

    The one thing shared with the check is the TF32 switch (``matmul_tf32``), on purpose:
    the two must run with the same precision setting, or the ratio compares settings.
    """
    import contextlib

    import torch

    from mlenv.acceptance.checks.compute import matmul_settings, matmul_tf32

    cuda = device.startswith("cuda")
    with matmul_tf32(tf32) if cuda else contextlib.nullcontext():
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        best = _best_per_call_s(lambda: a @ b, cuda=cuda, iters=iters, warmup=warmup, inner=inner)
        settings = matmul_settings() if cuda else {}
    return 2.0 * n**3 / best / 1e12, settings


def plain_copy_gbps(nbytes: int, *, device: str, iters: int, warmup: int, inner: int) -> float:
    import torch

    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    best = _best_per_call_s(
        lambda: dst.copy_(src),
        cuda=device.startswith("cuda"),
        iters=iters,
        warmup=warmup,
        inner=inner,
    )
    return 2.0 * (nbytes // 4 * 4) / best / 1e9


def plain_h2d_gbps(
    nbytes: int, *, device: str, iters: int, warmup: int, inner: int
) -> tuple[float, float]:
    """A plain pinned ``copy_`` each way between host and GPU: (H2D GB/s, D2H GB/s), bytes
    counted once (what crosses the link), as the check and CUDA's bandwidthTest count them."""
    import torch

    host = torch.ones(nbytes // 4).pin_memory()
    dev = torch.empty(nbytes // 4, device=device)
    moved = nbytes // 4 * 4
    up = _best_per_call_s(
        lambda: dev.copy_(host, non_blocking=True),
        cuda=True,
        iters=iters,
        warmup=warmup,
        inner=inner,
    )
    down = _best_per_call_s(
        lambda: host.copy_(dev, non_blocking=True),
        cuda=True,
        iters=iters,
        warmup=warmup,
        inner=inner,
    )
    return moved / up / 1e9, moved / down / 1e9


def plain_training_sps(
    model_name: str, dataset: Any, *, device: str, batch: int, steps: int, warmup: int, lr: float
) -> float:
    """Samples/s of the loop a user writes without DeepSpeed: autocast bf16 on a GPU
    (fp32 on CPU), channels_last weights and inputs for image models, fused AdamW, the
    check's gradient clipping; median step of ``steps`` after ``warmup``."""
    import time

    import torch

    from mlenv.acceptance.checks.models import build_model, is_image_model

    cuda = device.startswith("cuda")
    torch.manual_seed(0)
    # Any: torch's stubs lack Module.to(memory_format=...), which exists at run time.
    model: Any = build_model(
        model_name, num_classes=dataset.num_classes, in_shape=dataset.sample_shape
    ).to(device)
    image = is_image_model(model_name)
    fmt = torch.channels_last if image else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x, y = dataset.get_batch(list(range(batch)))
    x, y = x.to(device), y.to(device)
    if image:
        x = x.contiguous(memory_format=fmt)
    opt = torch.optim.AdamW(
        model.parameters(), lr=lr, weight_decay=0.0, fused=True if cuda else None
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    dtype = torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else None
    times = []
    for i in range(warmup + steps):
        _sync(cuda)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(
            device_type="cuda" if cuda else "cpu",
            dtype=dtype or torch.float32,
            enabled=dtype is not None,
        ):
            out = model(x)
        loss = loss_fn(out.float().reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        _sync(cuda)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return batch / statistics.median(times)


# ----------------------------------------------------------------------- the bench


# Seconds of untimed GEMMs before each matmul pair. Measured on an H200 (2026-11-27): the
# first 8192³ bf16 burst after the GPU did something lighter runs at 780 TFLOPS and every
# later one at 650-675 (the board's power limit pulls the clock down within a second), so
# whichever side ran first won by ~14 %. After this burst both sides run at the steady clock.
SETTLE_S = 1.0


def in_turn(round_index: int, ref: Callable[[], Any], ours: Callable[[], Any]) -> tuple[Any, Any]:
    """(ref(), ours()), run reference first in even rounds and ours first in odd ones, so an
    advantage of going first (clocks, caches, allocator) falls on each side equally often."""
    if round_index % 2 == 0:
        first = ref()
        return first, ours()
    second = ours()
    return ref(), second


def settle_gemm(n: int, dtype: Any, *, tf32: bool, device: str, seconds: float) -> int:
    """Run ``n``³ GEMMs untimed for ``seconds`` (the GPU reaches its steady, power-limited
    clock); returns how many ran."""
    import time

    import torch

    from mlenv.acceptance.checks.compute import matmul_tf32

    with matmul_tf32(tf32):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(5):
                a @ b
            torch.cuda.synchronize(device)
            done += 5
    return done


def sizes(cpu: bool) -> dict[str, Any]:
    """What is measured: the checks' GPU defaults on a GPU, small sizes on the CPU path."""
    if cpu:
        return {
            "n": 256,
            "mm_iters": 5,
            "mm_warmup": 2,
            "mm_inner": 2,
            "copy_bytes": 8 * 2**20,
            "copy_iters": 5,
            "copy_warmup": 1,
            "copy_inner": 2,
            "model": "resnet18",
            "batch": 8,
            "image_size": 16,
            "steps": 4,
            "train_warmup": 1,
        }
    return {
        "n": 8192,
        "mm_iters": 10,
        "mm_warmup": 3,
        "mm_inner": 10,
        "copy_bytes": 2**30,
        "copy_iters": 10,
        "copy_warmup": 3,
        "copy_inner": 5,
        # memory.h2d's GPU defaults (128 MiB, Azure's check_cuda_bw size)
        "h2d_bytes": 128 * 2**20,
        "h2d_iters": 10,
        "h2d_warmup": 3,
        "h2d_inner": 5,
        "model": "resnet50",
        "batch": 256,
        "image_size": 224,
        "steps": 20,
        "train_warmup": 5,
    }


def spread(ours: list[float], ref: list[float]) -> dict[str, float]:
    """Medians of both sides and min / median / max of the paired ratios ours / reference."""
    ratios = [o / r for o, r in zip(ours, ref, strict=True)]
    return {
        "reference": statistics.median(ref),
        "ours": statistics.median(ours),
        "ratio_min": min(ratios),
        "ratio_median": statistics.median(ratios),
        "ratio_max": max(ratios),
    }


def environment(cuda: bool) -> dict[str, str]:
    """Device, driver, torch and DeepSpeed versions and the date, for every row."""
    import platform
    import subprocess

    import torch

    try:
        import deepspeed

        ds = str(deepspeed.__version__)
    except ImportError as e:
        ds = f"absent ({e})"
    if cuda:
        device = torch.cuda.get_device_name(0)
        try:
            driver = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            ).stdout.split("\n")[0]
        except OSError:
            driver = ""
        driver = driver.strip() or "unknown"
    else:
        device = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
        driver = "none"
    return {
        "date": datetime.date.today().isoformat(),
        "device": device,
        "driver": driver,
        "torch": str(torch.__version__),
        "deepspeed": ds,
    }


def run(cpu: bool, rounds: int, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every figure's rounds, reference and ours in turn (alternating order); one row per figure."""
    import torch
    import torch.distributed as dist

    from mlenv.acceptance.checks.compute import time_matmul
    from mlenv.acceptance.checks.datasets import build_dataset
    from mlenv.acceptance.checks.hostcopy import time_h2d_d2h
    from mlenv.acceptance.checks.memory import time_copy
    from mlenv.acceptance.run.world import free_port

    cuda = not cpu
    device = "cuda:0" if cuda else "cpu"
    z = sizes(cpu)
    env = environment(cuda)
    if cuda:
        torch.cuda.set_device(0)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)

    pairs: dict[str, tuple[list[float], list[float]]] = {}
    units: dict[str, str] = {}
    setups: dict[str, str] = {}

    def add(figure: str, unit: str, ref: float, ours: float, setup: str = "") -> None:
        pairs.setdefault(figure, ([], []))
        pairs[figure][0].append(ref)
        pairs[figure][1].append(ours)
        units[figure] = unit
        if setup:
            setups[figure] = setup
        say(
            f"  {figure}: reference {ref:.4g} {unit}, ours {ours:.4g} {unit} (ratio {ours / ref:.3f})"
        )

    mm = (
        [("matmul_bf16", torch.bfloat16, False), ("matmul_tf32", torch.float32, True)]
        if cuda
        else [("matmul_fp32", torch.float32, False)]
    )
    ds = build_dataset("synthetic", model=z["model"], size=z["batch"], image_size=z["image_size"])
    for r in range(rounds):
        say(f"round {r + 1}/{rounds} ({'reference' if r % 2 == 0 else 'ours'} first)")
        for figure, dtype, tf32 in mm:
            kw = {"iters": z["mm_iters"], "warmup": z["mm_warmup"], "inner": z["mm_inner"]}
            if cuda:
                settle_gemm(z["n"], dtype, tf32=tf32, device=device, seconds=SETTLE_S)
            (ref, ref_settings), (ours, timing) = in_turn(
                r,
                partial(plain_matmul_tflops, z["n"], dtype, tf32=tf32, device=device, **kw),
                partial(time_matmul, z["n"], dtype, device=device, tf32=tf32, **kw),
            )
            ours_settings = {k: v for k, v in timing.items() if k in ref_settings}
            if ours_settings != ref_settings:
                raise RuntimeError(
                    f"{figure}: the check ran with {ours_settings}, the reference with {ref_settings}"
                )
            add(figure, "TFLOPS", ref, ours, " ".join(f"{k}={v}" for k, v in ref_settings.items()))
        kw = {"iters": z["copy_iters"], "warmup": z["copy_warmup"], "inner": z["copy_inner"]}
        ref, (ours, _, _) = in_turn(
            r,
            partial(plain_copy_gbps, z["copy_bytes"], device=device, **kw),
            partial(time_copy, z["copy_bytes"], device=device, **kw),
        )
        add("copy", "GB/s", ref, ours)
        if cuda:  # host<->device needs a GPU: memory.h2d against a plain pinned copy
            kw = {"iters": z["h2d_iters"], "warmup": z["h2d_warmup"], "inner": z["h2d_inner"]}
            (ref_up, ref_down), (up, down, _) = in_turn(
                r,
                partial(plain_h2d_gbps, z["h2d_bytes"], device=device, **kw),
                partial(time_h2d_d2h, z["h2d_bytes"], device=device, **kw),
            )
            add("h2d", "GB/s", ref_up, up, "pinned, one buffer each way")
            add("d2h", "GB/s", ref_down, down, "pinned, one buffer each way")
        ref_sps, plain_sps, ds_sps, setup = _training_pair(z, ds, device, ours_first=r % 2 == 1)
        add("training_plain", "samples/s", ref_sps, plain_sps, setup)
        add("training_deepspeed", "samples/s", ref_sps, ds_sps, setup)
        if cuda:
            torch.cuda.empty_cache()
    dist.destroy_process_group()
    rows = []
    for figure, (ref_list, ours_list) in pairs.items():
        rows.append(
            {
                **env,
                "figure": figure,
                "unit": units[figure],
                **spread(ours_list, ref_list),
                "rounds": len(ref_list),
                "setup": setups.get(figure, ""),
            }
        )
    return rows


def _training_pair(
    z: dict[str, Any], ds: Any, device: str, *, ours_first: bool = False
) -> tuple[float, float, float, str]:
    """(reference samples/s, the check's plain loop, the check's DeepSpeed run, its setup)."""
    from mlenv.acceptance.checks.training import train_one

    ref, rec = in_turn(
        int(ours_first),
        partial(
            plain_training_sps,
            z["model"],
            ds,
            device=device,
            batch=z["batch"],
            steps=z["steps"],
            warmup=z["train_warmup"],
            lr=1e-3,
        ),
        partial(
            train_one,
            z["model"],
            dataset=ds,
            steps=z["steps"],
            warmup_steps=z["train_warmup"],
            batch_size=z["batch"],
            device=device,
            max_batches=1,
        ),
    )
    plain = z["batch"] / statistics.median(rec.timed(rec.plain_step_s))
    ours = z["batch"] / statistics.median(rec.timed(rec.step_s))
    return ref, plain, ours, str(rec.setup.get("name", ""))


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown rows: figure, reference and ours (medians), ratio min / median / max."""
    out = []
    for r in rows:
        out.append(
            f"| {r['date']} | {r['device']} | {r['driver']} | {r['torch']} | {r['deepspeed']} | "
            f"{r['figure']}{' (' + r['setup'] + ')' if r['setup'] else ''} | {r['reference']:.4g} {r['unit']} | "
            f"{r['ours']:.4g} {r['unit']} | {r['ratio_min']:.3f} / **{r['ratio_median']:.3f}** / "
            f"{r['ratio_max']:.3f} | {r['rounds']} |"
        )
    return "\n".join(out)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``--out`` file; ValueError naming the line and what was wrong."""
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{i}: not a JSON row ({e})") from None
        if not isinstance(row, dict) or set(row) != set(ROW_KEYS):
            raise ValueError(f"{path}:{i}: expected a row with the keys {', '.join(ROW_KEYS)}")
        for k in ("reference", "ours", "ratio_min", "ratio_median", "ratio_max"):
            if (
                isinstance(row[k], bool)
                or not isinstance(row[k], int | float)
                or not math.isfinite(row[k])
                or row[k] <= 0
            ):
                raise ValueError(f"{path}:{i}: {k}: expected a positive number, got {row[k]!r}")
        if any("|" in str(row[k]) or "\n" in str(row[k]) for k in ROW_KEYS):
            raise ValueError(
                f"{path}:{i}: a value holds '|' or a line break (it would break the table)"
            )
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def record(rows_file: Path, doc: Path) -> None:
    """Append the rows to the bench-gpu table of ``doc`` (after its marker line)."""
    rows = read_rows(rows_file)
    text = doc.read_text(encoding="utf-8")
    if MARKER not in text:
        raise ValueError(f"{doc}: no bench-gpu table (the line {MARKER!r} is missing)")
    head, _, tail = text.partition(MARKER + "\n")
    # The table's rows follow the marker; new rows go after the last of them.
    lines = tail.split("\n")
    n = 0
    while n < len(lines) and lines[n].startswith("|"):
        n += 1
    new = [*lines[:n], table(rows), *lines[n:]]
    doc.write_text(head + MARKER + "\n" + "\n".join(new), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Measure (exit 0; without CUDA and --cpu: one line, exit 0), or --record (exit 2 on bad rows)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out",
        default=os.environ.get("BENCH_OUT", ""),
        help="JSON rows file (default: $BENCH_OUT)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="reference/ours pairs per figure (the order alternates: use an even number)",
    )
    ap.add_argument(
        "--cpu", action="store_true", help="the CPU path (gloo, small sizes): what the tests run"
    )
    ap.add_argument(
        "--record", metavar="FILE", help="append FILE's rows to --doc's bench-gpu table"
    )
    ap.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"))
    a = ap.parse_args(argv)
    if a.record:
        try:
            record(Path(a.record), Path(a.doc))
        except (OSError, ValueError) as e:
            print(f"bench-record: {e}", file=sys.stderr)
            return 2
        print(
            f"bench-record: appended {len(read_rows(Path(a.record)))} row(s) of {a.record} to {a.doc}"
        )
        return 0
    if a.rounds < 1:
        print("bench-gpu: --rounds must be >= 1", file=sys.stderr)
        return 2
    import torch

    if not a.cpu and not torch.cuda.is_available():
        print(
            f"bench-gpu: no CUDA device on this machine (torch {torch.__version__}): nothing measured"
        )
        return 0
    if a.cpu:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    rows = run(a.cpu, a.rounds, lambda s: print(s, flush=True))
    print(
        "\n| figure | reference (median) | ours (median) | ratio min / median / max |\n|---|---:|---:|---|"
    )
    for r in rows:
        print(
            f"| {r['figure']} | {r['reference']:.4g} {r['unit']} | {r['ours']:.4g} {r['unit']} | "
            f"{r['ratio_min']:.3f} / {r['ratio_median']:.3f} / {r['ratio_max']:.3f} |"
        )
    print(
        f"\n{rows[0]['device']}, driver {rows[0]['driver']}, torch {rows[0]['torch']}, "
        f"DeepSpeed {rows[0]['deepspeed']}, {rows[0]['date']}"
    )
    if a.out:
        Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        print(f"rows: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
