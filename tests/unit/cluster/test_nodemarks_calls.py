"""Quarantine's marks as few kubectl calls: one per kind of mark for all the nodes (the
annotation one per distinct note), bounded in names per call, and the tells the same."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlenv.argv import UnsafeArgument
from mlenv.cluster import nodemarks, nodetell
from mlenv.cluster.nodemarks import MAX_NAMES, NodeMarks, mark_calls

RUN = "20261129-000000-abcdef"
KEY = "ml-dev-env.io/health"
NOTE_KEY = "ml-dev-env.io/quarantine"


def _marks(n: int, notes: int = 1) -> list[NodeMarks]:
    return [
        NodeMarks(f"gpu-{i:04d}", f"mlenv {RUN}: compute.matmul tflops = 0.{i % notes}")
        for i in range(n)
    ]


def test_one_call_per_kind_of_mark_and_one_annotation_per_distinct_note() -> None:
    """Fails on the code before: three calls per node (label, annotate, taint each of one node)."""
    marks = _marks(5, notes=2)
    calls = mark_calls(marks)
    assert [(c.verb, c.nodes) for c in calls] == [
        ("label", tuple(m.node for m in marks)),
        ("annotate", ("gpu-0000", "gpu-0002", "gpu-0004")),
        ("annotate", ("gpu-0001", "gpu-0003")),
        ("taint", tuple(m.node for m in marks)),
    ]
    assert calls[0].words() == [
        "label",
        "--overwrite",
        "--",
        "node",
        *(m.node for m in marks),
        f"{KEY}=fail",
    ]
    assert calls[1].words()[-1] == f"{NOTE_KEY}=mlenv {RUN}: compute.matmul tflops = 0.0"
    assert calls[2].words()[-1] == f"{NOTE_KEY}=mlenv {RUN}: compute.matmul tflops = 0.1"
    assert calls[3].words() == [
        "taint",
        "--",
        "node",
        *(m.node for m in marks),
        f"{KEY}=fail:NoSchedule",
    ]


def test_release_takes_each_kind_off_every_node_in_one_call_taint_first() -> None:
    marks = _marks(3, notes=3)  # the notes differ: the removal does not depend on them
    calls = mark_calls(marks, remove=True)
    names = tuple(m.node for m in marks)
    assert [c.words() for c in calls] == [
        ["taint", "--", "node", *names, f"{KEY}=fail:NoSchedule-"],
        ["annotate", "--", "node", *names, f"{NOTE_KEY}-"],
        ["label", "--", "node", *names, f"{KEY}-"],
    ]


def test_one_node_runs_what_it_ran_before() -> None:
    """A single node's commands are the three a quarantine of one node always printed."""
    m = NodeMarks("gpu-node-03", f"mlenv {RUN}: compute.matmul tflops = 0.2")
    assert m.shell_lines("oc") == [
        f"oc label --overwrite -- node gpu-node-03 {KEY}=fail",
        f"oc annotate --overwrite -- node gpu-node-03 '{NOTE_KEY}=mlenv {RUN}: compute.matmul tflops = 0.2'",
        f"oc taint -- node gpu-node-03 {KEY}=fail:NoSchedule",
    ]


def test_calls_are_bounded_in_names_so_4096_nodes_still_work() -> None:
    marks = _marks(4096)
    calls = mark_calls(marks)
    by_verb: dict[str, list[int]] = {}
    for c in calls:
        by_verb.setdefault(c.verb, []).append(len(c.nodes))
    assert by_verb == {v: [MAX_NAMES] * 20 + [96] for v in ("label", "annotate", "taint")}
    # every node in exactly one call of each kind, in order
    for verb in by_verb:
        assert [n for c in calls if c.verb == verb for n in c.nodes] == [m.node for m in marks]
    # the longest argv at the longest names a Node may have stays far below ARG_MAX (2 MiB)
    long = [NodeMarks(f"{i:04d}" + "a" * 249, m.note) for i, m in enumerate(marks[:MAX_NAMES])]
    assert max(sum(len(w) + 1 for w in c.words()) for c in mark_calls(long)) < 64 * 1024


def test_a_node_named_twice_is_marked_once_and_a_bad_name_never_reaches_kubectl() -> None:
    m = _marks(2)
    assert mark_calls([m[0], m[1], m[0]])[0].nodes == ("gpu-0000", "gpu-0001")
    with pytest.raises(UnsafeArgument):
        mark_calls([NodeMarks("--all", m[0].note)])
    with pytest.raises(UnsafeArgument):
        mark_calls([NodeMarks("gpu-0000", "x'; rm -rf /")])
    with pytest.raises(ValueError):
        mark_calls(m, per_call=0)


def test_carried_reads_which_marks_a_node_has() -> None:
    note = f"mlenv {RUN}: compute.matmul tflops = 0.2"
    node: dict[str, Any] = {
        "metadata": {"name": "n", "labels": {KEY: "fail"}, "annotations": {NOTE_KEY: note}},
        "spec": {"taints": [{"key": KEY, "value": "fail", "effect": "NoSchedule"}]},
    }
    assert nodemarks.carried(node, note) == ["label", "annotation", "taint"]
    assert nodemarks.carried(node, note + " other") == ["label", "taint"]
    node["spec"]["taints"] = [{"key": KEY, "value": "fail", "effect": "NoExecute"}]
    node["metadata"]["labels"][KEY] = "rma"
    assert nodemarks.carried(node, note) == ["annotation"]
    assert nodemarks.carried(None, note) == []


def _tells(n: int, whys: int, condition: bool) -> list[nodetell.NodeTell]:
    return [
        nodetell.NodeTell(
            node=f"gpu-{i:04d}",
            run_id=RUN,
            reason=nodetell.REASON_FAILED,
            action="quarantined",
            why=f"compute.matmul tflops = 0.{i % whys}",
            at="2026-11-29T00:00:00Z",
            condition=condition,
        )
        for i in range(n)
    ]


def test_the_events_go_in_one_list_and_the_condition_in_one_patch_per_group() -> None:
    tells = _tells(5, whys=2, condition=True)
    calls = nodetell.tell_calls(tells)
    (create, body, told), *patches = calls
    assert create == ["create", "--namespace=default", "--filename=-"]
    doc = json.loads(body or "")
    assert doc["kind"] == "List" and [e["involvedObject"]["name"] for e in doc["items"]] == list(
        told
    )
    assert doc["items"] == [t.event() for t in tells]  # each node's own Event, unchanged
    assert [nodes for _, _, nodes in patches] == [
        ("gpu-0000", "gpu-0002", "gpu-0004"),
        ("gpu-0001", "gpu-0003"),
    ]
    words, stdin, nodes = patches[0]
    assert stdin is None and words[:2] == ["patch", "--subresource=status"]
    assert words[-4:] == ["--", "node", *nodes][-4:]
    patch = json.loads(next(w for w in words if w.startswith("--patch="))[len("--patch=") :])
    assert patch == {"status": {"conditions": [tells[0].condition_entry()]}}
    # without the condition: the Events only; bounded as the marks are
    assert len(nodetell.tell_calls(_tells(5, 2, condition=False))) == 1
    assert [len(n) for _, _, n in nodetell.tell_calls(_tells(450, 1, False))] == [200, 200, 50]
    assert nodetell.tell_lines(tells[:1], "oc")[0].startswith("echo '{")


def test_the_label_and_the_notes_run_at_once_and_the_taint_never_before_them() -> None:
    """The kinds of mark are separate fields, so the label's and the notes' calls run
    together (one call's duration, not three: quarantine was 1.43x kubectl's three calls
    at 32 nodes); the taint keeps work off the node, so it lands only after the label
    release finds it by, and is the first thing taken off."""
    marks = _marks(450, notes=2)  # three chunks per kind
    on = nodemarks.mark_phases(mark_calls(marks, per_call=200))
    assert [sorted({c.verb for c in phase}) for phase in on] == [["annotate", "label"], ["taint"]]
    assert [len(phase) for phase in on] == [3 + 4, 3]
    off = nodemarks.mark_phases(mark_calls(marks, remove=True, per_call=200))
    assert [sorted({c.verb for c in phase}) for phase in off] == [["taint"], ["annotate", "label"]]
    # every call once, in mark_calls' order
    assert [c for phase in on for c in phase] == mark_calls(marks, per_call=200)


def test_nodes_read_with_their_own_hostname_label_are_chosen_by_a_selector() -> None:
    """kubectl reads each named node with a throttled GET of its own; a hostname selector
    is one list. A node not known to carry its name as its hostname label (never read,
    overridden, or too long for a label value) is named."""
    marks = _marks(3)
    long = NodeMarks("n" * 64, marks[0].note)
    calls = mark_calls([*marks, long], by_hostname={"gpu-0000", "gpu-0002", long.node})
    chosen = "--selector=kubernetes.io/hostname in (gpu-0000,gpu-0002)"
    assert [c.words() for c in calls if c.verb == "taint"] == [
        ["taint", chosen, "--", "node", f"{KEY}=fail:NoSchedule"],
        ["taint", "--", "node", "gpu-0001", long.node, f"{KEY}=fail:NoSchedule"],
    ]
    assert [
        len(c.nodes)
        for c in mark_calls(_marks(450), by_hostname={m.node for m in _marks(450)})
        if c.verb == "label"
    ] == [MAX_NAMES, MAX_NAMES, 50]

    def node(name: str, hostname: str | None) -> dict[str, Any]:
        labels = {} if hostname is None else {nodemarks.HOSTNAME_LABEL: hostname}
        return {"metadata": {"name": name, "labels": labels}}

    assert nodemarks.hostname_is_name(node("gpu-0000", "gpu-0000"))
    assert not nodemarks.hostname_is_name(node("gpu-0000", "ip-10-0-0-7"))
    assert not nodemarks.hostname_is_name(node("gpu-0000", None))
    assert not nodemarks.hostname_is_name(node("n" * 64, "n" * 64))
    assert not nodemarks.hostname_is_name({"metadata": {"name": "gpu-0000", "labels": None}})
