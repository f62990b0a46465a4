"""The Event and Node condition ``mlenv quarantine`` / ``release`` tell a Node: built once,
every value validated, the JSON a file on stdin or the value of ``--patch=``."""

from __future__ import annotations

import json

import pytest

from mlenv.argv import UnsafeArgument
from mlenv.cluster import nodetell
from mlenv.cluster.nodetell import NodeTell

AT = "2026-11-25T09:00:00Z"


def _tell(**kw: object) -> NodeTell:
    base: dict[str, object] = {
        "node": "gpu-node-03.example.com",
        "run_id": "20261125-090000-aaaaaa",
        "reason": nodetell.REASON_FAILED,
        "action": "quarantined",
        "why": "compute.matmul tflops_fp32 = 0.2",
        "at": AT,
    }
    base.update(kw)
    return NodeTell(**base)  # type: ignore[arg-type]


def test_the_event_is_about_the_node_with_the_run_id_and_the_action() -> None:
    words, body = _tell().event_command()
    assert words == ["create", "--namespace=default", "--filename=-"]
    ev = json.loads(body)
    assert ev["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "gpu-node-03.example.com",
        "uid": "gpu-node-03.example.com",
    }
    assert (ev["type"], ev["reason"]) == ("Warning", "MlenvAcceptanceFailed")
    assert ev["message"] == (
        "mlenv run 20261125-090000-aaaaaa: quarantined: compute.matmul tflops_fp32 = 0.2"
    )
    assert ev["metadata"]["generateName"] == "gpu-node-03.example.com.mlenv-"
    assert ev["firstTimestamp"] == ev["lastTimestamp"] == AT
    released = json.loads(_tell(reason=nodetell.REASON_RELEASED).event_command()[1])
    assert (released["type"], released["reason"]) == ("Normal", "MlenvAcceptanceReleased")


def test_the_condition_patch_is_a_strategic_merge_on_the_status_subresource() -> None:
    words = _tell(condition=True).condition_command()
    assert words[:3] == ["patch", "--subresource=status", "--type=strategic"]
    assert words[3].startswith("--patch=") and words[-3:] == [
        "--",
        "node",
        "gpu-node-03.example.com",
    ]
    patch = json.loads(words[3].removeprefix("--patch="))
    [entry] = patch["status"]["conditions"]
    assert (entry["type"], entry["status"], entry["reason"]) == (
        "MlenvAcceptance",
        "False",
        "MlenvAcceptanceFailed",
    )
    assert entry["lastTransitionTime"] == AT
    back = _tell(reason=nodetell.REASON_RELEASED).condition_entry()
    assert back["status"] == "True"


def test_shell_lines_print_the_condition_only_when_asked() -> None:
    assert len(_tell().shell_lines("oc")) == 1
    lines = _tell(condition=True).shell_lines("oc")
    assert lines[0].startswith("echo '{") and lines[0].endswith(
        "| oc create --namespace=default --filename=-"
    )
    assert lines[1].startswith("oc patch --subresource=status --type=strategic '--patch=")


def test_no_value_becomes_an_option_or_escapes_its_word() -> None:
    with pytest.raises(UnsafeArgument):
        _tell(node="--all").event_command()
    with pytest.raises(UnsafeArgument):
        _tell(node="a b", condition=True).condition_command()
    # the message is made a quarantine note: quotes and newlines never reach kubectl
    msg = _tell(why="x'; rm -rf /\n$(id)").message
    assert "'" not in msg and "\n" not in msg and "$" not in msg
    with pytest.raises(ValueError):
        _tell(reason="Whatever")


def test_merge_keeps_other_conditions_and_replaces_ours_by_type() -> None:
    node: dict = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    nodetell.merge_condition(node, _tell().condition_entry())
    assert nodetell.ours(node, "20261125-090000-aaaaaa")
    assert not nodetell.ours(node, "20261125-100000-bbbbbb")
    nodetell.merge_condition(node, _tell(reason=nodetell.REASON_RELEASED).condition_entry())
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready", "MlenvAcceptance"]
    assert nodetell.condition_of(node)["status"] == "True"  # type: ignore[index]
    assert not nodetell.ours(node, "20261125-090000-aaaaaa")
    assert nodetell.condition_of({}) is None and nodetell.condition_of(None) is None
