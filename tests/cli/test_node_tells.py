"""``mlenv quarantine`` / ``mlenv release`` tell the Node where a fleet looks (fake cluster):
an Event about the Node on every --apply and release, and with ``--condition`` the Node
condition ``MlenvAcceptance``, permission for ``nodes/status`` asked before anything."""

from __future__ import annotations

import json

from _fakeenv import fake_state, run
from test_quarantine import NODES, _node, _report

from mlenv.cluster import nodetell
from mlenv.contract import LABEL_HEALTH
from mlenv.testing.fakecluster import FakeCluster

RUN1 = "20261125-090000-aaaaaa"


def _events(state, node: str) -> list:
    return FakeCluster.load(str(state)).events(nodetell.EVENT_NAMESPACE, "Node", node)


def test_apply_records_an_event_on_the_failed_node_only_and_release_another(
    tmp_path, monkeypatch
) -> None:
    state = fake_state(tmp_path)
    hist = tmp_path / "h"
    rep = _report(tmp_path, "r1", RUN1, "2026-11-25T09:00:00+00:00", slow=2)
    bad = NODES[2]
    r = run(["quarantine", str(rep), "--apply", "--history-dir", str(hist)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    [e] = _events(state, bad)
    assert (e.type, e.reason) == ("Warning", "MlenvAcceptanceFailed")
    assert (
        e.message.startswith(f"mlenv run {RUN1}: quarantined (") and "compute.matmul" in e.message
    )
    for other in (NODES[0], NODES[1], NODES[3]):
        assert _events(state, other) == []
    # no --condition: the Node's status is not touched
    assert nodetell.condition_of(_node(state, bad)) is None
    # the commands recorded for the node include the Event, as printed
    rec = json.loads((rep / "quarantine.json").read_text())
    assert any("kubectl create" in c or "oc create" in c for c in rec["nodes"][bad]["commands"])

    r = run(["release", str(rep), "--force", "--history-dir", str(hist)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    events = _events(state, bad)
    assert [(x.type, x.reason) for x in events] == [
        ("Warning", "MlenvAcceptanceFailed"),
        ("Normal", "MlenvAcceptanceReleased"),
    ]
    assert events[1].message.startswith(f"mlenv run {RUN1}: released (")
    assert nodetell.condition_of(_node(state, bad)) is None


def test_condition_is_set_false_on_the_failed_node_and_release_sets_it_true(
    tmp_path, monkeypatch
) -> None:
    state = fake_state(tmp_path)
    hist = tmp_path / "h"
    rep = _report(tmp_path, "r1", RUN1, "2026-11-25T09:00:00+00:00", slow=1)
    bad = NODES[1]
    fake = FakeCluster.load(str(state))  # the kubelet's own condition stays as it is
    fake.objects[f"Node||{bad}"].setdefault("status", {})["conditions"] = [
        {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    ]
    fake.save(str(state))
    r = run(
        ["quarantine", str(rep), "--apply", "--condition", "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    n = _node(state, bad)
    c = nodetell.condition_of(n)
    assert c is not None and (c["status"], c["reason"]) == ("False", "MlenvAcceptanceFailed")
    assert c["message"].startswith(f"mlenv run {RUN1}: quarantined (")
    assert nodetell.ours(n, RUN1) and not nodetell.ours(n, "20261125-100000-bbbbbb")
    assert {x["type"] for x in n["status"]["conditions"]} == {"Ready", "MlenvAcceptance"}
    for other in (NODES[0], NODES[2], NODES[3]):
        assert nodetell.condition_of(_node(state, other)) is None

    r = run(["release", str(rep), "--force", "--history-dir", str(hist)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    n = _node(state, bad)
    c = nodetell.condition_of(n)
    assert c is not None and (c["status"], c["reason"]) == ("True", "MlenvAcceptanceReleased")
    assert c["message"].startswith(f"mlenv run {RUN1}: released (")
    assert {x["type"]: x["status"] for x in n["status"]["conditions"]}["Ready"] == "True"


def test_dry_run_prints_the_event_and_the_condition_patch(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", RUN1, "2026-11-25T09:00:00+00:00", slow=3)
    r = run(
        ["quarantine", str(rep), "--condition", "--history-dir", str(tmp_path / "h")],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    bad = NODES[3]
    assert "| oc create --namespace=default --filename=-" in r.stdout
    assert '"reason": "MlenvAcceptanceFailed"' in r.stdout
    assert 'oc patch --subresource=status --type=strategic \'--patch={"status": ' in r.stdout
    assert f"-- node {bad}" in r.stdout
    assert _events(state, bad) == [] and nodetell.condition_of(_node(state, bad)) is None


def test_without_the_nodes_status_right_condition_is_refused_in_one_line_nothing_written(
    tmp_path, monkeypatch
) -> None:
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", RUN1, "2026-11-25T09:00:00+00:00", slow=2)
    fake = FakeCluster.load(str(state))
    fake.denied = ["patch nodes/status"]
    fake.save(str(state))
    r = run(
        ["quarantine", str(rep), "--apply", "--condition", "--history-dir", str(tmp_path / "h")],
        state,
        monkeypatch,
    )
    assert r.exit_code == 3, r.output
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "may not patch nodes/status" in err[0], r.stderr
    assert "patch nodes --subresource=status: no" in err[0]
    bad = NODES[2]
    n = _node(state, bad)
    assert LABEL_HEALTH not in (n["metadata"].get("labels") or {})
    assert nodetell.condition_of(n) is None and _events(state, bad) == []
    assert not (rep / "quarantine.json").exists()
    # the same user without --condition: the Event needs no nodes/status right
    r = run(
        ["quarantine", str(rep), "--apply", "--history-dir", str(tmp_path / "h")],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    assert [e.reason for e in _events(state, bad)] == ["MlenvAcceptanceFailed"]


def test_without_the_right_to_create_events_nothing_is_marked(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", RUN1, "2026-11-25T09:00:00+00:00", slow=2)
    fake = FakeCluster.load(str(state))
    fake.denied = ["create events"]
    fake.save(str(state))
    r = run(
        ["quarantine", str(rep), "--apply", "--history-dir", str(tmp_path / "h")],
        state,
        monkeypatch,
    )
    assert r.exit_code == 3 and "may not create events in default" in r.stderr, r.output
    assert LABEL_HEALTH not in (_node(state, NODES[2])["metadata"].get("labels") or {})


def test_condition_on_a_run_without_kubernetes_nodes_is_bad_input(tmp_path, monkeypatch) -> None:
    rep = _report(tmp_path, "r1", RUN1, "2026-11-25T09:00:00+00:00", slow=2)
    (rep / "record.json").write_text(json.dumps({"run_id": RUN1, "cluster": "local"}))
    r = run(
        ["quarantine", str(rep), "--condition", "--history-dir", str(tmp_path / "h")],
        None,
        monkeypatch,
    )
    assert r.exit_code == 2 and "--condition: a Node condition is a Kubernetes Node's" in r.stderr
