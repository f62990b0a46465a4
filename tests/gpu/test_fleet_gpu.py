"""The fleet checks on a real GPU: memory.h2d measures the link, gpu.health reads the GPU.

Skipped without CUDA (and gpu.health without nvidia-smi). What a lent GPU must show: a
pinned copy each way well above what no PCIe link would give, the GPU found by its UUID,
its PCIe link read under load (not idle), and a node result that counts it.
"""

from __future__ import annotations

import shutil

import pytest

from mlenv.acceptance.core.base import RunContext

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _ctx() -> RunContext:
    return RunContext(
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        nnodes=1,
        host="gpu-host",
        backend="nccl",
        device="cuda:0",
    )


def test_h2d_measures_both_directions_and_names_the_gpu() -> None:
    from mlenv.acceptance.checks.hostcopy import H2dCheck

    (r,) = H2dCheck().run(_ctx())
    # PCIe Gen3 x16 moves ~12 GB/s; anything on a working link of this decade is above 5
    assert r.metrics["h2d_gbps"] > 5 and r.metrics["d2h_gbps"] > 5, r.metrics
    assert str(r.details["gpu_uuid"]).startswith("GPU-")


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs nvidia-smi")
def test_health_reads_this_gpu_under_load() -> None:
    from mlenv.acceptance.checks.gpuhealth import HealthCheck
    from mlenv.acceptance.checks.hostcopy import gpu_uuid

    out = HealthCheck().run(_ctx())
    gpu = next(r for r in out if r.scope == "rank")
    node = next(r for r in out if r.scope == "node")
    assert gpu.details["gpu_uuid"] == gpu_uuid("cuda:0")
    assert gpu.details["read_idle"] is False, gpu.details  # the load kept the link up
    assert gpu.metrics["pcie_gen_current"] >= 1 and gpu.metrics["pcie_width_max"] >= 1
    assert node.metrics["gpu_count"] >= 1
