"""Which ranks compute.quorum hands to the node verdicts (blame, action drain)."""

from __future__ import annotations

from mlenv.acceptance.checks.compute import quorum, quorum_blame


def _blamed(digests: list[str], hosts: list[str], reference: str = "ref") -> list[int]:
    blame = quorum_blame(quorum(digests, reference), digests, hosts, reference)
    assert all(b["action"] == "drain" for b in blame)
    return [b["rank"] for b in blame]


def test_the_minority_against_a_correct_majority_is_blamed() -> None:
    assert _blamed(["ref", "ref", "bad", "ref"], ["n0", "n0", "n1", "n1"]) == [2]
    assert _blamed(["ref"] * 4, ["n0", "n0", "n1", "n1"]) == []


def test_one_node_agreeing_on_a_wrong_answer_is_blamed() -> None:
    """A re-check on the quarantined node is a world of that node alone: its ranks agree
    with each other, not with the exact reference; that is the node's FAIL (it was none:
    the node stayed UNKNOWN and never failed its re-check)."""
    assert _blamed(["bad", "bad"], ["node-a", "node-a"]) == [0, 1]
    assert _blamed(["bad"], ["node-a"]) == [0]


def test_a_wrong_majority_on_one_node_blames_it_not_the_right_minority() -> None:
    # node n1's two ranks agree on a wrong answer and outnumber n0's one right rank
    assert _blamed(["ref", "bad", "bad"], ["n0", "n1", "n1"]) == [1, 2]


def test_every_node_agreeing_on_a_wrong_answer_blames_no_node() -> None:
    # the same wrong answer on every node points at the software stack: no drain anywhere
    assert _blamed(["bad", "bad", "bad", "bad"], ["n0", "n0", "n1", "n1"]) == []
