"""compute, memory and collectives checks on a real CUDA device (skipped without one).

A world of one NCCL rank in this process: the matmul check reports all three GPU
precisions timed with CUDA events, the quorum agrees with the float64 reference, copy
bandwidth is measured device to device; with two or more GPUs the collectives run on
NCCL ranks (one process per GPU) and their data check passes.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.fixture(scope="module")
def ctx() -> Iterator[object]:
    import torch.distributed as dist

    from mlenv.acceptance.checks.collectives import apply_nccl_deadline_env
    from mlenv.acceptance.core.base import RunContext

    apply_nccl_deadline_env(os.environ)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=0,
        world_size=1,
        timeout=timedelta(seconds=120),
    )
    yield RunContext(
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        nnodes=1,
        host="gpu-host",
        backend="nccl",
        device="cuda:0",
        options={
            "compute": {"n": 4096, "iters": 5, "warmup": 2},
            "memory": {"bytes": 256 * 2**20, "iters": 5},
            "collectives": {
                "min_bytes": 1024,
                "max_bytes": 2**24,
                "factor": 16,
                "iters": 5,
                "warmup": 2,
            },
        },
    )
    dist.destroy_process_group()


def test_matmul_reports_three_gpu_precisions_with_cuda_events(ctx: object) -> None:
    from mlenv.acceptance.checks.compute import MatmulCheck

    m = torch.backends.cuda.matmul
    switch = "fp32_precision" if hasattr(m, "fp32_precision") else "allow_tf32"
    before = getattr(m, switch)
    (r,) = MatmulCheck().run(ctx)  # type: ignore[arg-type]
    assert getattr(m, switch) == before  # the check restores the switch
    assert set(r.metrics) == {"tflops_bf16", "tflops_fp16", "tflops_tf32"}
    assert all(v > 0 for v in r.metrics.values())
    assert {t["method"] for t in r.details["timing"].values()} == {"cuda-events"}
    # half precision runs on tensor cores: faster than tf32 on every recent GPU
    assert r.metrics["tflops_bf16"] > r.metrics["tflops_tf32"]
    assert r.details["shape"] == [4096] * 3


def test_quorum_is_bitwise_exact_on_the_gpu(ctx: object) -> None:
    from mlenv.acceptance.checks.compute import QuorumCheck

    (q,) = QuorumCheck().run(ctx)  # type: ignore[arg-type]
    assert q.status.value == "PASS", q.reasons
    assert q.details["checksums"]["0"] == q.details["reference"]


def test_copy_bandwidth_is_device_to_device(ctx: object) -> None:
    from mlenv.acceptance.checks.memory import CopyCheck

    (c,) = CopyCheck().run(ctx)  # type: ignore[arg-type]
    assert c.details["kind"] == "device-to-device" and c.metrics["copy_gbps"] > 0


OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]


def test_collectives_skip_a_world_of_one(ctx: object) -> None:
    from mlenv.acceptance.checks import collectives  # noqa: F401 - registers the ops
    from mlenv.acceptance.core.base import registry

    (r,) = registry()["collectives.all_reduce"]().run(ctx)
    assert r.status.value == "SKIP" and "one rank" in r.reasons[0]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (one NCCL rank each)")
def test_collectives_data_check_and_busbw_on_nccl(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
    from checks_harness import WorldSpec, run_world

    n = torch.cuda.device_count()
    spec = WorldSpec(
        n,
        [f"collectives.{op}" for op in OPS],
        backend="nccl",
        options={
            "collectives": {
                "min_bytes": 1024,
                "max_bytes": 2**26,
                "factor": 16,
                "iters": 5,
                "warmup": 2,
            }
        },
    )
    (rank0, *_) = run_world(spec, tmp_path, timeout_s=300)
    assert rank0["error"] is None, rank0["error"]
    assert len(rank0["results"]) == len(OPS)
    for r in rank0["results"]:
        assert r["status"] == "PASS", r["reasons"]
        assert r["metrics"]["wrong_elements"] == 0.0 and r["metrics"]["busbw_gbps_max"] > 0
