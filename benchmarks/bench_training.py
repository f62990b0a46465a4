"""Training-check throughput.

CPU mode (default): the acceptance quick profile's training check (ResNet-18, 16 px
synthetic images, batch 8 per rank, ZeRO-2, fp32) on 2 CPU ranks with gloo, launched
through the real DeepSpeed launcher as the suite runs it; reports global samples/s,
step-time p50 and the launcher's wall time (DeepSpeed start-up included), median of
``--runs``.

GPU mode (``--gpu``, needs CUDA): ResNet-50, 224 px synthetic images, batch 256, one
GPU, one rank, the check's own setup on one node (torch_autocast bf16, ZeRO-0,
channels_last) with its plain PyTorch loop beside it, through
:func:`mlenv.acceptance.checks.training.train_one`: DeepSpeed's and the plain loop's
samples/s and the stack ratio. ``make bench-gpu`` is the interleaved, paired version.

Run: .venv/bin/python benchmarks/bench_training.py [--runs 3] [--gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench_cpu(runs: int, port: int = 29851) -> dict[str, float]:
    """Median figures of ``runs`` 2-rank quick training checks through the DeepSpeed launcher."""
    env = dict(
        os.environ,
        DS_ACCELERATOR="cpu",
        LOCAL_SIZE="2",
        MLENV_FAULT="",
        PYTHONPATH=str(ROOT),
        TORCH_EXTENSIONS_DIR=os.environ.get(
            "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/mlenv/torch_extensions")
        ),
    )
    sps, p50, wall, plain, ratio = [], [], [], [], []
    for i in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable,
                "-m",
                "deepspeed.launcher.runner",
                "--num_gpus",
                "2",
                "--master_port",
                str(port + i),
                "--module",
                "mlenv.acceptance",
                "--checks",
                "training",
                "--report-dir",
                tmp,
            ]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
            wall.append(time.perf_counter() - t0)
            doc = json.loads((Path(tmp) / "results.json").read_text())
            if p.returncode != 0:
                raise SystemExit(f"run {i} exited {p.returncode}: {doc['reasons']}")
            (world,) = [c for c in doc["checks"] if c["name"] == "training.deepspeed"]
            sps.append(world["metrics"]["samples_per_s"])
            p50.append(world["metrics"]["step_time_p50_ms"])
            plain.append(world["metrics"]["plain_samples_per_s_per_rank"])
            ratio.append(world["metrics"]["stack_ratio"])
        print(
            f"run {i}: {sps[-1]:.1f} samples/s ({world['details']['setup']['name']}), step p50 {p50[-1]:.0f} ms, "
            f"plain loop {plain[-1]:.1f} samples/s per rank, stack ratio {ratio[-1]:.3f}, wall {wall[-1]:.1f} s",
            flush=True,
        )
    return {
        "samples_per_s": statistics.median(sps),
        "step_p50_ms": statistics.median(p50),
        "plain_samples_per_s_per_rank": statistics.median(plain),
        "stack_ratio": statistics.median(ratio),
        "stack_ratio_min": min(ratio),
        "stack_ratio_max": max(ratio),
        "wall_s": statistics.median(wall),
        "wall_min_s": min(wall),
        "wall_max_s": max(wall),
    }


def bench_gpu(steps: int = 50, warmup: int = 15, batch: int = 256) -> dict[str, float | str]:
    """ResNet-50 mixed-precision samples/s on one GPU (one rank)."""
    import torch
    import torch.distributed as dist

    from mlenv.acceptance.checks.datasets import build_dataset
    from mlenv.acceptance.checks.training import train_one
    from mlenv.acceptance.run.world import free_port

    if not torch.cuda.is_available():
        raise SystemExit("--gpu needs CUDA; none is available here")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its fastest kernels
    ds = build_dataset("synthetic", model="resnet50", size=8 * batch, image_size=224)
    rec = train_one(
        "resnet50",
        dataset=ds,
        steps=steps,
        warmup_steps=warmup,
        batch_size=batch,
        lr=1e-3,
        device="cuda:0",
        max_batches=8,
    )
    step = statistics.median(rec.timed(rec.step_s))
    plain = statistics.median(rec.timed(rec.plain_step_s))
    dist.destroy_process_group()
    return {
        "samples_per_s": batch / step,
        "step_p50_ms": 1e3 * step,
        "plain_samples_per_s": batch / plain,
        "stack_ratio": rec.stack_ratio() or 0.0,
        "setup": str(rec.setup.get("name")),
        "gpu": torch.cuda.get_device_name(0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gpu", action="store_true", help="ResNet-50 mixed precision on one GPU")
    args = ap.parse_args()
    res: dict[str, float | str] = dict(bench_gpu()) if args.gpu else dict(bench_cpu(args.runs))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
