"""``mlenv recheck RUN`` on the fake cluster: the re-check Pod is created on the
quarantined node only, refused where a re-check of that node is under way, named with
the scheduler's reason when it cannot start (a taint someone else set), and deleted
whatever happened. The whole loop on a real control plane is tests/kube/test_recheck_loop.py."""

from __future__ import annotations

import json
from pathlib import Path

from _fakeenv import fake_state, run

from mlenv.contract import LABEL_HEALTH
from mlenv.render import recheck
from mlenv.testing.fakecluster import FakeCluster

NODES = [f"gpu-node-0{i}.barcelona.example.com" for i in range(1, 5)]
RUN1 = "20261125-090000-aaaaaa"
OUR_TAINT = {"key": LABEL_HEALTH, "value": "fail", "effect": "NoSchedule"}


def _quarantined(tmp_path: Path, node: str) -> Path:
    """A barcelona run folder whose quarantine.json says ``node`` was quarantined."""
    d = tmp_path / "run1"
    d.mkdir()
    doc = {
        "schema_version": 1,
        "run_id": RUN1,
        "started": "2026-11-25T09:00:00+00:00",
        "verdict": "FAIL",
        "node_verdicts": {"nodes": [{"node": node, "status": "FAIL", "findings": []}]},
        "checks": [],
    }
    (d / "results.json").write_text(json.dumps(doc))
    (d / "record.json").write_text(json.dumps({"run_id": RUN1, "cluster": "barcelona"}))
    (d / "quarantine.json").write_text(
        json.dumps(
            {
                "version": 1,
                "run_id": RUN1,
                "cluster": "barcelona",
                "platform": "kubernetes",
                "nodes": {node: {"state": "applied", "check": "compute.quorum", "figure": "x"}},
            }
        )
    )
    return d


def _taint(state: Path, node: str, *taints: dict) -> None:
    fake = FakeCluster.load(str(state))
    fake.objects[f"Node||{node}"].setdefault("spec", {})["taints"] = list(taints)
    fake.save(str(state))


def _pods(state: Path) -> list[dict]:
    fake = FakeCluster.load(str(state))
    return [o for k, o in fake.objects.items() if k.startswith("Pod|")]


def test_a_run_that_quarantined_nothing_is_bad_input(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    rep = _quarantined(tmp_path, NODES[2])
    (rep / "quarantine.json").unlink()
    r = run(["recheck", str(rep), "--history-dir", str(tmp_path / "h")], state, monkeypatch)
    assert r.exit_code == 2, r.output
    assert f"run {RUN1}: no node of it is in quarantine" in r.stderr
    assert _pods(state) == []


def test_a_second_recheck_of_the_node_is_refused_in_one_line(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    rep = _quarantined(tmp_path, NODES[2])
    name = recheck.node_pod_name(NODES[2])
    fake = FakeCluster.load(str(state))
    fake.objects[f"Pod|ml-dev-env|{name}"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-dev-env"},
        "spec": {"containers": [{"name": "recheck", "image": "x"}]},
        "status": {"phase": "Running"},
    }
    fake.save(str(state))
    r = run(["recheck", str(rep), "--history-dir", str(tmp_path / "h")], state, monkeypatch)
    assert r.exit_code == 3, r.output
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert err == [
        f"error: a re-check of node {NODES[2]} is in progress (pod {name} in ml-dev-env): nothing "
        "started (wait for it to end, or delete that pod if it is left over)"
    ], r.stderr
    assert [p["metadata"]["name"] for p in _pods(state)] == [name]  # the other one's, kept


def test_a_node_with_someone_elses_taint_is_not_rechecked_and_the_pod_goes(
    tmp_path, monkeypatch
) -> None:
    state = fake_state(tmp_path)
    rep = _quarantined(tmp_path, NODES[2])
    _taint(state, NODES[2], OUR_TAINT, {"key": "ops/maintenance", "effect": "NoSchedule"})
    r = run(
        ["recheck", str(rep), "--wait", "20", "--history-dir", str(tmp_path / "h")],
        state,
        monkeypatch,
    )
    assert r.exit_code == 3, r.output
    assert (
        f"node {NODES[2]} not re-checked: pod {recheck.node_pod_name(NODES[2])} did not start"
        in r.stderr
    )
    assert "untolerated taint" in r.stderr and "0 node(s) passed" in r.stdout
    assert _pods(state) == []  # deleted; nothing ran
    taints = FakeCluster.load(str(state)).objects[f"Node||{NODES[2]}"]["spec"]["taints"]
    assert {t["key"] for t in taints} == {LABEL_HEALTH, "ops/maintenance"}


def test_the_pod_lands_on_the_quarantined_node_alone_and_a_run_without_results_is_an_error(
    tmp_path, monkeypatch
) -> None:
    """Only our taint on the node: the Pod is scheduled there (and nowhere else, though
    three other nodes are free), the suite is run in it; the fake runs no suite, so no
    report comes back: exit 3, said, and the Pod deleted."""
    state = fake_state(tmp_path)
    rep = _quarantined(tmp_path, NODES[2])
    _taint(state, NODES[2], OUR_TAINT)
    fake = FakeCluster.load(str(state))
    fake.exec_responses["python -m mlenv.pod run-torchrun"] = {"rc": 0}
    fake.save(str(state))
    r = run(["recheck", str(rep), "--history-dir", str(tmp_path / "h")], state, monkeypatch)
    assert r.exit_code == 3, r.output
    fake = FakeCluster.load(str(state))
    name = recheck.node_pod_name(NODES[2])
    suite = [c for c in fake.calls if c[:2] == ["exec", name] and "run-torchrun" in c]
    assert len(suite) == 1, fake.calls
    assigned = [
        e.message for e in fake.events("ml-dev-env", "Pod", name) if e.reason == "Scheduled"
    ]
    assert assigned == [f"Successfully assigned ml-dev-env/{name} to {NODES[2]}"]
    assert "no record of this run of cluster barcelona" in r.stderr
    assert _pods(state) == []


def test_the_pod_is_gone_when_the_verb_ends_so_the_next_recheck_is_not_refused(
    tmp_path, monkeypatch
) -> None:
    """Deleting a Pod takes its grace period (the kube tier showed the first re-check's
    Pod still Terminating when the next began, which then read "in progress"): the verb
    waits for it to go, and one still going away is waited for, not refused."""
    state = fake_state(tmp_path)
    rep = _quarantined(tmp_path, NODES[2])
    _taint(state, NODES[2], OUR_TAINT)
    fake = FakeCluster.load(str(state))
    fake.grace_s = 8.0
    fake.exec_responses["python -m mlenv.pod run-torchrun"] = {"rc": 0}
    fake.save(str(state))
    args = ["recheck", str(rep), "--history-dir", str(tmp_path / "h")]
    first = run(args, state, monkeypatch)
    assert first.exit_code == 3 and "no record of this run" in first.stderr, first.output
    assert _pods(state) == []  # gone, not Terminating
    # a Pod of an earlier re-check still going away: waited for, then this one runs
    name = recheck.node_pod_name(NODES[2])
    fake = FakeCluster.load(str(state))
    fake.objects[f"Pod|ml-dev-env|{name}"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-dev-env", "deletionTimestamp": "t=0"},
        "spec": {"containers": [{"name": "recheck", "image": "x"}]},
        "status": {"phase": "Running"},
    }
    fake.terminating[f"Pod|ml-dev-env|{name}"] = fake.clock + 5
    fake.save(str(state))
    second = run(args, state, monkeypatch)
    assert "in progress" not in second.stderr and "no record of this run" in second.stderr
    assert _pods(state) == []
