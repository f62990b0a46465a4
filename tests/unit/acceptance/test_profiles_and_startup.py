"""Profiles per device, the never-joined message, and the TF32 switch (pure, no ranks)."""

from __future__ import annotations

import pytest

from mlenv.acceptance.core import profiles
from mlenv.acceptance.run import world
from mlenv.errors import InputError


def test_gpu_ranks_get_sizes_that_measure_the_device_and_the_options_file_still_wins() -> None:
    from mlenv.acceptance.checks.compute import MatmulOptions
    from mlenv.acceptance.checks.training import TrainingOptions
    from mlenv.acceptance.core.base import RunContext

    def ctx(
        profile: str, device: str, overrides: dict[str, dict[str, int]] | None = None
    ) -> RunContext:
        return RunContext(
            rank=0,
            world_size=1,
            local_rank=0,
            local_world_size=1,
            node_rank=0,
            nnodes=1,
            host="h",
            backend="gloo",
            device=device,
            profile=profile,
            options=profiles.resolve(profile, overrides, device),
        )

    assert ctx("quick", "cpu").options_of(MatmulOptions, "compute.matmul").n == 512
    assert ctx("quick", "cuda:3").options_of(MatmulOptions, "compute.matmul").n == 8192
    # the full profile's GPU training is the published ResNet-50 setup the baselines quote
    full = ctx("full", "cuda:0").options_of(TrainingOptions, "training.deepspeed")
    assert (full.model, full.batch_size, full.image_size) == ("resnet50", 256, 224)
    mine = ctx("quick", "cuda:0", {"compute": {"n": 1024}}).options_of(
        MatmulOptions, "compute.matmul"
    )
    assert mine.n == 1024 and mine.iters == 10
    assert "compute" not in profiles.PROFILES["quick"].overrides  # resolving never edits the table
    with pytest.raises(InputError, match="unknown profile 'fast'"):
        profiles.resolve("fast", device="cuda:0")


def _env(size: int, per_node: int) -> world.LaunchEnv:
    return world.LaunchEnv(
        rank=0,
        world_size=size,
        local_rank=0,
        local_world_size=per_node,
        master_addr="pod-0.svc",
        master_port=29500,
        node_rank=None,
        nnodes=None,
        restart=0,
    )


def test_never_joined_names_ranks_with_their_node_and_its_host_when_known() -> None:
    msg = world._never_joined([3, 4, 5], {0: "pod-0", 1: "pod-0", 2: "pod-1"}, _env(6, 2), 30.0)
    assert msg == (
        "rank 3 (node 1: pod-1); ranks 4, 5 (node 2: no rank of it joined) never joined the run "
        "within 30 s (not started, or cannot reach pod-0.svc:29500)"
    )


def test_tf32_switch_is_set_inside_and_restored_after() -> None:
    torch = pytest.importorskip("torch")
    from mlenv.acceptance.checks.compute import matmul_tf32

    m = torch.backends.cuda.matmul
    name = "fp32_precision" if hasattr(m, "fp32_precision") else "allow_tf32"
    before = getattr(m, name)
    with matmul_tf32(True):
        assert getattr(m, name) in ("tf32", True)
        with matmul_tf32(False):
            assert getattr(m, name) in ("ieee", False)
        assert getattr(m, name) in ("tf32", True)
    assert getattr(m, name) == before
