"""Pure helpers of compute and collectives: quorum majority, TFLOPS/GBps, group plan."""

from __future__ import annotations

import pytest

from mlenv.acceptance.checks.collectives import apply_nccl_deadline_env, plan_groups
from mlenv.acceptance.checks.compute import (
    QUORUM_MAX_N,
    QUORUM_RANGE,
    matmul_tflops,
    quorum,
    quorum_reasons,
)
from mlenv.acceptance.checks.memory import copy_gbps


def test_quorum_all_agree() -> None:
    o = quorum(["a", "a", "a"], reference="a")
    assert o.disagreeing == () and o.agreeing == 3 and o.matches_reference is True
    assert quorum_reasons(o, ["a", "a", "a"], ["h0", "h1", "h2"]) == []


def test_quorum_names_the_minority_with_host() -> None:
    digests = ["good", "good", "bad!", "good"]
    o = quorum(digests)
    assert o.majority == "good" and o.disagreeing == (2,) and o.matches_reference is None
    (reason,) = quorum_reasons(o, digests, ["n0", "n0", "n1", "n1"])
    assert reason.startswith("rank 2 (n1)") and "3/4 ranks" in reason


def test_quorum_tie_is_broken_by_the_exact_reference() -> None:
    # two ranks, rank 0 is the corrupted one: the reference decides, not rank order
    o = quorum(["bad", "ref"], reference="ref")
    assert o.majority == "ref" and o.disagreeing == (0,)
    # without a reference the tie goes to rank 0's checksum, deterministically
    assert quorum(["x", "y"]).disagreeing == (1,)


def test_quorum_flags_a_world_that_agrees_on_a_wrong_answer() -> None:
    o = quorum(["w", "w"], reference="r")
    assert o.disagreeing == () and o.matches_reference is False
    (reason,) = quorum_reasons(o, ["w", "w"], ["a", "b"])
    assert "exact float64 reference" in reason
    with pytest.raises(ValueError):
        quorum([])


def test_quorum_size_limit_keeps_sums_exact_in_fp32() -> None:
    assert QUORUM_MAX_N * QUORUM_RANGE**2 <= 2**24


def test_throughput_formulas() -> None:
    assert matmul_tflops(1000, 2e-3) == pytest.approx(2 * 1000**3 / 2e-3 / 1e12)
    assert copy_gbps(10**9, 0.5) == pytest.approx(4.0)  # read + write
    with pytest.raises(ValueError):
        matmul_tflops(8, 0.0)
    with pytest.raises(ValueError):
        copy_gbps(8, -1.0)


def test_single_node_measures_only_the_world() -> None:
    layout = [(0, 0, "a"), (0, 1, "a")]
    (g,) = plan_groups(layout)
    assert g.scope == "world" and g.ranks == (0, 1)


def test_two_nodes_add_intra_and_inter_groups_in_a_fixed_order() -> None:
    layout = [(0, 0, "a"), (0, 1, "a"), (1, 0, "b"), (1, 1, "b")]
    plan = plan_groups(layout)
    assert [(g.scope, g.ranks) for g in plan] == [
        ("world", (0, 1, 2, 3)),
        ("intra", (0, 1)),
        ("intra", (2, 3)),
        ("inter", (0, 2)),
        ("inter", (1, 3)),
    ]
    assert "(b)" in plan[2].label
    # the plan depends only on the layout, so every rank builds the same groups
    assert plan_groups(list(layout)) == plan


def test_one_rank_per_node_has_no_intra_groups() -> None:
    plan = plan_groups([(0, 0, "a"), (1, 0, "b"), (2, 0, "c")])
    assert [(g.scope, g.ranks) for g in plan] == [("world", (0, 1, 2)), ("inter", (0, 1, 2))]


def test_nccl_deadline_env_does_not_override_the_user() -> None:
    env = {"TORCH_NCCL_BLOCKING_WAIT": "0"}
    apply_nccl_deadline_env(env)
    assert env == {"TORCH_NCCL_BLOCKING_WAIT": "0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
