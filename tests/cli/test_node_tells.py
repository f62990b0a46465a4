"""``mlenv quarantine`` / ``mlenv release`` tell the Node where a fleet looks (fake cluster):
an Event about the Node on every --apply and release, and with ``--condition`` the Node
condition ``MlenvAcceptance``, permission for ``nodes/status`` asked before anything."""

from __future__ import annotations

import json
from pathlib import Path

from _fakeenv import ROOT, fake_state, run
from test_quarantine import NODES, _node, _report
from typer.testing import CliRunner

from mlenv.acceptance.records.history import make_record
from mlenv.cli.app import app
from mlenv.cluster import nodetell
from mlenv.cluster.connect import use_factory
from mlenv.contract import LABEL_HEALTH
from mlenv.testing.fakecluster import FakeCluster
from mlenv.testing.fakecluster.session import state_file

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
    r = run(
        ["quarantine", str(rep), "--confirm", "1/1", "--apply", "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
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
    # the commands recorded include the Event, as printed
    rec = json.loads((rep / "quarantine.json").read_text())
    assert any("kubectl create" in c or "oc create" in c for c in rec["commands"])

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
        [
            "quarantine",
            str(rep),
            "--confirm",
            "1/1",
            "--apply",
            "--condition",
            "--history-dir",
            str(hist),
        ],
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
        [
            "quarantine",
            str(rep),
            "--confirm",
            "1/1",
            "--condition",
            "--history-dir",
            str(tmp_path / "h"),
        ],
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
        [
            "quarantine",
            str(rep),
            "--confirm",
            "1/1",
            "--apply",
            "--condition",
            "--history-dir",
            str(tmp_path / "h"),
        ],
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
        [
            "quarantine",
            str(rep),
            "--confirm",
            "1/1",
            "--apply",
            "--history-dir",
            str(tmp_path / "h"),
        ],
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
        [
            "quarantine",
            str(rep),
            "--confirm",
            "1/1",
            "--apply",
            "--history-dir",
            str(tmp_path / "h"),
        ],
        state,
        monkeypatch,
    )
    assert r.exit_code == 3 and "may not create events in default" in r.stderr, r.output
    assert LABEL_HEALTH not in (_node(state, NODES[2])["metadata"].get("labels") or {})


def test_condition_on_a_run_without_kubernetes_nodes_is_bad_input(tmp_path, monkeypatch) -> None:
    rep = _report(tmp_path, "r1", RUN1, "2026-11-25T09:00:00+00:00", slow=2)
    (rep / "record.json").write_text(json.dumps({"run_id": RUN1, "cluster": "local"}))
    r = run(
        [
            "quarantine",
            str(rep),
            "--confirm",
            "1/1",
            "--condition",
            "--history-dir",
            str(tmp_path / "h"),
        ],
        None,
        monkeypatch,
    )
    assert r.exit_code == 2 and "--condition: a Node condition is a Kubernetes Node's" in r.stderr


def _with_node_events(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """A checkout whose barcelona config sets acceptance.node_events, deployed on the fake."""
    root = tmp_path / "checkout"
    (root / "clusters").mkdir(parents=True)
    text = (ROOT / "clusters" / "barcelona.yaml").read_text()
    (root / "clusters" / "barcelona.yaml").write_text(text + "acceptance:\n  node_events: true\n")
    state = fake_state(tmp_path)
    monkeypatch.setenv("MLENV_HISTORY_DIR", str(tmp_path / "reports"))
    assert _in(root, ["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    return root, state


def _in(root: Path, args: list[str], state: Path, monkeypatch):
    """``mlenv ARGS`` with ``root`` as the checkout and the fake as the cluster."""
    monkeypatch.setenv("MLENV_ROOT", str(root))
    monkeypatch.setenv("MLENV_STATE_DIR", str(state.parent / ".mlenv"))
    with use_factory(state_file(state)):
        return CliRunner().invoke(app, args)


def _scheduled_run(fake: FakeCluster, rid: str, bad: str, good: str, host: str) -> None:
    """A finished run in pod-0's results folder: ``bad`` FAILED, ``good`` passed, ``host`` a
    node known only as a pod (no Kubernetes Node name), ``NODES[3]`` a WARN."""

    def verdict(node: str, status: str, node_from: str = "kubernetes") -> dict:
        failed = [{"status": "FAIL", "check": "memory.h2d", "figure": "h2d_gbps = 12.2"}]
        return {
            "node": node,
            "hosts": ["ml-dev-env-0"],
            "node_from": node_from,
            "status": status,
            "action": {"id": "reset-gpu" if status == "FAIL" else "none"},
            "checks": ["memory.h2d", "compute.matmul"],
            "findings": failed if status == "FAIL" else [],
        }

    doc = {
        "run_id": rid,
        "started": "2026-11-22T03:00:00+00:00",
        "finished": "2026-11-22T03:05:00+00:00",
        "verdict": "FAIL",
        "profile": "quick",
        "checks": [],
        "node_verdicts": {
            "nodes": [
                verdict(bad, "FAIL"),
                verdict(good, "PASS"),
                verdict(host, "FAIL", node_from="host"),
                verdict(NODES[3], "WARN"),
            ]
        },
    }
    base = f"/workspace/results/{rid}"
    fake.write_pod_file(
        "ml-dev-env-0", "ml-dev-env", f"{base}/results.json", json.dumps(doc).encode()
    )
    rec = make_record(doc, [], "barcelona", Path(base), origin="cluster")
    fake.write_pod_file(
        "ml-dev-env-0", "ml-dev-env", f"{base}/record.json", json.dumps(rec).encode()
    )


def test_with_node_events_each_fetched_run_tells_the_nodes_it_judged(tmp_path, monkeypatch) -> None:
    root, state = _with_node_events(tmp_path, monkeypatch)
    fake = FakeCluster.load(str(state))
    rid = "20261122-030000-aaaaaa"
    _scheduled_run(fake, rid, NODES[0], NODES[1], "ml-dev-env-2")
    fake.save(str(state))
    r = _in(root, ["history", "barcelona", "--fetch"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert f"told 2 Node(s) run {rid}'s verdict" in r.stdout
    [failed] = _events(state, NODES[0])
    assert (failed.type, failed.reason) == ("Warning", "MlenvAcceptanceFailed")
    assert failed.message == f"mlenv run {rid}: FAIL, action reset-gpu: memory.h2d h2d_gbps = 12.2"
    [passed] = _events(state, NODES[1])
    assert (passed.type, passed.reason) == ("Normal", "MlenvAcceptancePassed")
    assert passed.message == f"mlenv run {rid}: PASS, action none: 2 check(s) passed"
    # a WARN node and a node known only as a pod get none; nothing touches a Node's status
    assert _events(state, NODES[3]) == [] and _events(state, "ml-dev-env-2") == []
    assert all(nodetell.condition_of(_node(state, n)) is None for n in NODES)
    # a second fetch brings nothing and tells nothing again
    r = _in(root, ["history", "barcelona", "--fetch"], state, monkeypatch)
    assert r.exit_code == 0 and "told" not in r.stdout, r.output
    assert len(_events(state, NODES[0])) == 1


def test_node_events_without_the_right_warn_once_and_still_fetch(tmp_path, monkeypatch) -> None:
    root, state = _with_node_events(tmp_path, monkeypatch)
    fake = FakeCluster.load(str(state))
    rid = "20261122-030000-aaaaaa"
    _scheduled_run(fake, rid, NODES[0], NODES[1], "ml-dev-env-2")
    fake.denied = ["create events"]
    fake.save(str(state))
    r = _in(root, ["history", "barcelona", "--fetch"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert f"fetched run {rid}" in r.stdout
    warned = [ln for ln in r.stderr.splitlines() if "acceptance.node_events" in ln]
    assert len(warned) == 1 and "may not create events in default" in warned[0], r.stderr
    assert _events(state, NODES[0]) == []


def test_without_node_events_a_fetch_tells_no_node(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    monkeypatch.setenv("MLENV_HISTORY_DIR", str(tmp_path / "reports"))
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    fake = FakeCluster.load(str(state))
    _scheduled_run(fake, "20261122-030000-aaaaaa", NODES[0], NODES[1], "ml-dev-env-2")
    fake.save(str(state))
    r = run(["history", "barcelona", "--fetch"], state, monkeypatch)
    assert r.exit_code == 0 and "told" not in r.stdout, r.output
    assert _events(state, NODES[0]) == [] and _events(state, NODES[1]) == []


def test_release_checks_the_request_before_it_reads_any_node(tmp_path, monkeypatch) -> None:
    """A release naming a node the run never quarantined is bad input (exit 2), decided
    before the Nodes are read for this run's condition."""
    state = fake_state(tmp_path)
    hist = tmp_path / "h"
    rep = _report(tmp_path, "r1", RUN1, "2026-11-25T09:00:00+00:00", slow=2)
    args = [
        "quarantine",
        str(rep),
        "--confirm",
        "1/1",
        "--apply",
        "--condition",
        "--history-dir",
        str(hist),
    ]
    assert run(args, state, monkeypatch).exit_code == 0
    fake = FakeCluster.load(str(state))
    fake.denied = ["get nodes"]
    fake.save(str(state))
    r = run(
        ["release", str(rep), "--force", "--node", NODES[0], "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert r.exit_code == 2 and "quarantined no such node" in r.stderr, r.output
