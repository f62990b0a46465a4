"""The training check on real GPUs (skipped without CUDA): mixed precision, channels_last,
CUDA-event timing, and the check through the DeepSpeed launcher on every local GPU."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
ROOT = Path(__file__).resolve().parents[2]


# One process group for the module: DeepSpeed caches its groups from the first one it
# sees (as a real training process, which trains once, never notices).
@pytest.fixture(scope="module")
def one_gpu_group() -> Iterator[None]:
    import torch.distributed as dist

    from mlenv.acceptance.run.world import free_port

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_port())
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("model", ["resnet50", "gpt"])
def test_mixed_precision_training_on_one_gpu(one_gpu_group: None, model: str) -> None:
    from mlenv.acceptance.checks.datasets import build_dataset
    from mlenv.acceptance.checks.training import loss_trend, train_one

    ds = build_dataset("synthetic", model=model, size=8 * 32, image_size=64)
    rec = train_one(
        model,
        dataset=ds,
        steps=12,
        warmup_steps=3,
        batch_size=32,
        zero_stage=2,
        device="cuda:0",
        max_batches=8,
    )
    assert rec.precision == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    trend = loss_trend(rec.losses, 3)
    assert trend.drop_frac > 0.05, rec.losses
    steps = rec.timed(rec.step_s)
    # CUDA-event spans: the parts fit inside the step they were measured in.
    for s, c, m, o in zip(
        steps,
        rec.timed(rec.compute_s),
        rec.timed(rec.comm_s),
        rec.timed(rec.optimizer_s),
        strict=True,
    ):
        assert 0 < c < s and m >= 0 and o > 0
        assert c + m + o == pytest.approx(s, rel=1e-3)
    assert statistics.median(steps) > 0


def test_fast_setup_trains_beside_its_plain_loop(one_gpu_group: None) -> None:
    """The measured setup on a real GPU: torch_autocast bf16, ZeRO-0, channels_last applied after
    initialize (before it, DeepSpeed's broadcast raised), with the plain loop interleaved."""
    from mlenv.acceptance.checks.training import loss_trend, train_one
    from mlenv.acceptance.datasets import build_dataset

    if not torch.cuda.is_bf16_supported():
        pytest.skip("torch_autocast bf16 needs a GPU with bf16")
    ds = build_dataset("synthetic", model="resnet50", size=4 * 64, image_size=64)
    rec = train_one(
        "resnet50",
        dataset=ds,
        steps=10,
        warmup_steps=3,
        batch_size=64,
        device="cuda:0",
        max_batches=4,
    )
    assert rec.setup["name"] == "torch_autocast bf16, ZeRO-0, channels_last"
    assert loss_trend(rec.losses, 3).drop_frac > 0.05, rec.losses
    assert len(rec.plain_step_s) == len(rec.step_s)
    ratio = rec.stack_ratio()
    assert ratio is not None and 0.3 < ratio < 1.5, ratio


def test_training_check_on_every_local_gpu(tmp_path: Path) -> None:
    n = torch.cuda.device_count()
    # Prepend, not replace: the GPU machine may bring DeepSpeed on its own PYTHONPATH.
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        MLENV_FAULT="",
    )
    cmd = [
        sys.executable,
        "-m",
        "deepspeed.launcher.runner",
        "--num_gpus",
        str(n),
        "--master_port",
        "29861",
        "--module",
        "mlenv.acceptance",
        "--checks",
        "training",
        "--report-dir",
        str(tmp_path),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert (tmp_path / "results.json").exists(), (p.returncode, (p.stdout + p.stderr)[-3000:])
    doc = json.loads((tmp_path / "results.json").read_text())
    (world,) = [c for c in doc["checks"] if c["name"] == "training.deepspeed"]
    assert world["status"] == "PASS", (world, (p.stdout + p.stderr)[-3000:])
    assert world["details"]["world_size"] == n and world["details"]["precision"] in ("bf16", "fp16")
    assert len([c for c in doc["checks"] if c["name"] == "training.step_time"]) == n
