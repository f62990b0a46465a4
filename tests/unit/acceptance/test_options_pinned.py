"""The options every check runs with, per profile and device, pinned.

The figures were taken from the code before options became typed (profiles.PROFILES,
CUDA_OVERRIDES and the defaults inline in each check, read with ``ctx.opt``); moving the
defaults into each check's options dataclass must not change any of them. (The
environment check's busy-GPU thresholds became options later, with the constants'
values as defaults.)
"""

from __future__ import annotations

from typing import Any

import pytest

from mlenv.acceptance.core import profiles
from mlenv.acceptance.core.base import RunContext, registry

MiB = 2**20
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
TRAINING_COMMON: dict[str, Any] = {
    # the stage is chosen by node count (-1: 0 on one node, 2 across nodes), and the
    # plain-loop reference with its stack-ratio bars is new (judged on a GPU only: CPU_STACK).
    "zero_stage": -1,
    "plain_loop": True,
    "dataset": "synthetic",
    "data_dir": "",
    "lr": 0.001,
    "loss_window": 3,
    "min_loss_drop": 0.05,
    "straggler_factor": 1.5,
    "straggler_status": "WARN",
    "max_batches": 16,
    "seq_len": 64,
    "vocab_size": 256,
    "seed": 0,
}
CPU_STACK = {"stack_warn_ratio": 0.0, "stack_fail_ratio": 0.0}
GPU_STACK = {"stack_warn_ratio": 0.8, "stack_fail_ratio": 0.5}
# The quick GPU profile's batch 64 is launch-bound: its stack ratio is reported, WARN bar off
# (0.74 on a healthy H200, 2026-11-28), FAIL bar kept.
GPU_QUICK_STACK = {"stack_warn_ratio": 0.0, "stack_fail_ratio": 0.5}


def _pinned(
    matmul: dict[str, int],
    quorum_n: int,
    copy: dict[str, int],
    coll: dict[str, int],
    training: dict[str, Any],
) -> dict[str, dict[str, Any]]:
    return {
        "environment": {"busy_mem_gib": 2.0, "busy_mem_frac": 0.1, "busy_util_pct": 50.0},
        "compute.matmul": matmul,
        "compute.quorum": {"quorum_n": quorum_n},
        "memory.copy": copy,
        **{f"collectives.{op}": coll for op in COLLECTIVES},
        "training.deepspeed": {**training, **TRAINING_COMMON},
    }


PINNED: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("quick", "cpu"): _pinned(
        {"n": 512, "iters": 5, "warmup": 2, "inner": 1},
        256,
        {"bytes": 32 * MiB, "iters": 5, "warmup": 1, "inner": 1},
        {"min_bytes": 1024, "max_bytes": 4 * MiB, "factor": 4, "iters": 5, "warmup": 2},
        {
            "model": "resnet18",
            "steps": 8,
            "warmup_steps": 2,
            "batch_size": 8,
            "image_size": 0,
            **CPU_STACK,
        },
    ),
    ("quick", "cuda"): _pinned(
        {"n": 8192, "iters": 10, "warmup": 3, "inner": 10},
        1024,
        {"bytes": 1024 * MiB, "iters": 10, "warmup": 3, "inner": 5},
        {"min_bytes": 1024, "max_bytes": 256 * MiB, "factor": 4, "iters": 10, "warmup": 3},
        {
            "model": "resnet50",
            "steps": 20,
            "warmup_steps": 5,
            "batch_size": 64,
            "image_size": 0,
            **GPU_QUICK_STACK,
        },
    ),
    ("full", "cpu"): _pinned(
        {"n": 8192, "iters": 50, "warmup": 10, "inner": 1},
        256,
        {"bytes": 1024 * MiB, "iters": 20, "warmup": 1, "inner": 1},
        {"min_bytes": 8, "max_bytes": 8192 * MiB, "factor": 2, "iters": 20, "warmup": 5},
        {
            "model": "resnet50",
            "steps": 100,
            "warmup_steps": 2,
            "batch_size": 64,
            "image_size": 0,
            **CPU_STACK,
        },
    ),
    ("full", "cuda"): _pinned(
        {"n": 8192, "iters": 50, "warmup": 10, "inner": 10},
        1024,
        {"bytes": 1024 * MiB, "iters": 20, "warmup": 3, "inner": 5},
        {"min_bytes": 8, "max_bytes": 8192 * MiB, "factor": 2, "iters": 20, "warmup": 5},
        {
            "model": "resnet50",
            "steps": 100,
            "warmup_steps": 10,
            "batch_size": 256,
            "image_size": 224,
            **GPU_STACK,
        },
    ),
}


def _ctx(profile: str, device: str, options: dict[str, Any]) -> RunContext:
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
        options=options,
    )


@pytest.mark.parametrize(("profile", "device"), sorted(PINNED))
def test_every_check_resolves_to_the_pinned_options(profile: str, device: str) -> None:
    dev = "cuda:1" if device == "cuda" else "cpu"
    layer = profiles.resolve(profile, device=dev)  # what the entry point hands the context
    ctx = _ctx(profile, dev, layer)
    shipped = {n: c for n, c in registry().items() if n in PINNED[(profile, device)]}
    assert set(shipped) == set(PINNED[(profile, device)])  # no shipped check unpinned
    got = {n: ctx.options_of(c.Options, n).to_dict() for n, c in shipped.items()}
    assert got == PINNED[(profile, device)]
    # the types are the declared ones, not whatever the layer held
    for n, c in shipped.items():
        for spec in c.Options.specs():
            assert type(got[n][spec.name]) is spec.type, (n, spec.name)


@pytest.mark.parametrize(("profile", "device"), sorted(PINNED))
def test_a_context_with_only_the_profile_name_resolves_the_same(profile: str, device: str) -> None:
    """The profile applies under ctx.options, so an empty layer and the resolved one agree."""
    dev = "cuda:0" if device == "cuda" else "cpu"
    ctx = _ctx(profile, dev, {})
    got = {
        n: ctx.options_of(c.Options, n).to_dict()
        for n, c in registry().items()
        if n in PINNED[(profile, device)]
    }
    assert got == PINNED[(profile, device)]
