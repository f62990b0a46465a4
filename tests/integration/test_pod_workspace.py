"""workspace/train_multi_node.py trains for real: 2 gloo ranks under the DeepSpeed launcher."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlenv.acceptance.core.cpus import threads_per_rank
from mlenv.acceptance.run.world import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "workspace" / "train_multi_node.py"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/mlenv/torch_extensions"))
    env["DS_ACCELERATOR"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def test_example_training_runs_on_two_ranks_under_the_deepspeed_launcher(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "deepspeed.launcher.runner",
        "--num_gpus",
        "2",
        "--master_port",
        str(port),
        str(SCRIPT),
        "--model",
        "resnet18",
        "--steps",
        "3",
        "--micro-batch",
        "4",
        "--image-size",
        "16",
        "--out",
        str(out),
    ]
    r = subprocess.run(
        argv, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    doc = json.loads(out.read_text())
    assert (doc["model"], doc["steps"], doc["world"]) == ("resnet18", 3, 2)
    assert len(doc["losses"]) == 3 and all(math.isfinite(x) for x in doc["losses"])
    assert doc["samples_per_s"] > 0
    # each of the 2 CPU ranks its share of the cores this test may use (before: torch's
    # default, every core for each rank)
    assert doc["threads"] == threads_per_rank(2, _env()), doc
    assert "resnet18: 3 steps on 2 rank(s)" in r.stdout
    # DeepSpeed's CPU op made a /dev/shm buffer per rank; the example removes its own (dsops).
    assert not sorted(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"))


def test_example_training_rejects_a_dataset_that_does_not_fit_the_model(tmp_path: Path) -> None:
    # A real image dataset for the GPT: a clear message and exit 2, before any rendezvous.
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", "gpt", "--data", "cifar10", "--steps", "1"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "dataset cifar10 holds images; model gpt needs token sequences" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr
