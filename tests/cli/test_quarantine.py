"""``mlenv quarantine`` / ``mlenv release`` on the fake cluster: dry run first,
--apply through the client with a permission check, release only what this run set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _fakeenv import fake_state, run

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging import nodeverdicts
from mlenv.acceptance.judging.verdict import judge
from mlenv.contract import ANNOTATION_QUARANTINE, LABEL_HEALTH
from mlenv.testing.fakecluster import FakeCluster

NODES = [f"gpu-node-0{i}.barcelona.example.com" for i in range(1, 5)]
# These runs FAIL a node on a slow figure, which needs 2 of 3 runs by default: the
# marking itself is tested on one run's evidence.
ONE_RUN = ["--confirm", "1/1"]


def _report(tmp_path: Path, name: str, run_id: str, started: str, slow: int | None) -> Path:
    """A report folder of a 4-pod run on barcelona, pod i on NODES[i]; ``slow``: that pod's rank is 5x slower."""
    pods = [f"ml-dev-env-{i}" for i in range(4)]
    rs = [
        CheckResult(
            name="environment",
            status=Status.PASS,
            scope="rank",
            node=p,
            rank=i,
            details={"node_name": NODES[i]},
        )
        for i, p in enumerate(pods)
    ]
    rs += [
        CheckResult(
            name="compute.matmul",
            status=Status.PASS,
            scope="rank",
            node=p,
            rank=i,
            metrics={"tflops_fp32": 0.2 if i == slow else 1.0},
        )
        for i, p in enumerate(pods)
    ]
    j = judge(rs)
    world = {"nodes": 4, "ranks": 4, "device": "cpu", "hosts": pods}
    doc = {
        "schema_version": 1,
        "run_id": run_id,
        "started": started,
        "verdict": j.verdict.value,
        "reasons": j.reasons,
        "world": world,
        "node_verdicts": nodeverdicts.build(j.results, j.findings, world),
        "checks": [r.to_dict() for r in j.results],
    }
    d = tmp_path / name
    d.mkdir()
    (d / "results.json").write_text(json.dumps(doc))
    (d / "record.json").write_text(json.dumps({"run_id": run_id, "cluster": "barcelona"}))
    return d


def _node(state: Path, name: str) -> dict:
    node = FakeCluster.load(str(state)).get("Node", name, None)
    assert node is not None
    return node


def test_dry_run_prints_the_exact_commands_and_changes_nothing(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=2)
    r = run(
        ["quarantine", str(rep), *ONE_RUN, "--history-dir", str(tmp_path / "h")], state, monkeypatch
    )
    assert r.exit_code == 0, r.output
    bad = NODES[2]
    assert f"oc label --overwrite -- node {bad} ml-dev-env.io/health=fail" in r.stdout
    assert f"oc taint -- node {bad} ml-dev-env.io/health=fail:NoSchedule" in r.stdout
    assert (
        f"oc annotate --overwrite -- node {bad} "
        f"'ml-dev-env.io/quarantine=mlenv 20261125-090000-aaaaaa: compute.matmul is an outlier: "
        f"tflops_fp32 = 0.2"
    ) in r.stdout
    assert not any(
        n in r.stdout for n in (NODES[0], NODES[1], NODES[3])
    )  # passed nodes are never named
    assert LABEL_HEALTH not in (_node(state, bad)["metadata"].get("labels") or {})
    assert not (rep / "quarantine.json").exists()


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_the_dry_run_as_data_names_the_commands_and_each_node(
    tmp_path, monkeypatch, fmt: str
) -> None:
    import yaml

    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=2)
    args = ["quarantine", str(rep), *ONE_RUN, "--history-dir", str(tmp_path / "h"), "-o", fmt]
    r = run(args, state, monkeypatch)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout) if fmt == "json" else yaml.safe_load(r.stdout)
    assert {k: doc[k] for k in ("run_id", "platform", "dry_run")} == {
        "run_id": "20261125-090000-aaaaaa",
        "platform": "kubernetes",
        "dry_run": True,
    }
    (only,) = doc["nodes"]
    assert only["node"] == NODES[2] and only["cannot"] is None
    assert only["note"].startswith("mlenv 20261125-090000-aaaaaa: compute.matmul")
    assert f"oc taint -- node {NODES[2]} ml-dev-env.io/health=fail:NoSchedule" in doc["commands"]
    assert LABEL_HEALTH not in (_node(state, NODES[2])["metadata"].get("labels") or {})
    # data is for the dry run: with --apply it is refused before anything is read
    r = run([*args, "--apply"], state, monkeypatch)
    assert r.exit_code == 2 and "goes without --apply" in r.output


def test_apply_marks_records_and_release_after_a_passing_run_undoes_exactly_that(
    tmp_path, monkeypatch
) -> None:
    state = fake_state(tmp_path)
    hist = tmp_path / "h"
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=2)
    bad = NODES[2]
    fake = FakeCluster.load(
        str(state)
    )  # a taint someone else set on the bad node stays through it all
    node = fake.objects[f"Node||{bad}"]
    node.setdefault("spec", {})["taints"] = [{"key": "gpu-maintenance", "effect": "NoSchedule"}]
    fake.save(str(state))
    r = run(
        ["quarantine", str(rep), *ONE_RUN, "--apply", "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    n = _node(state, bad)
    assert n["metadata"]["labels"][LABEL_HEALTH] == "fail"
    assert n["metadata"]["annotations"][ANNOTATION_QUARANTINE].startswith(
        "mlenv 20261125-090000-aaaaaa: compute.matmul"
    )
    assert {t["key"] for t in n["spec"]["taints"]} == {"gpu-maintenance", LABEL_HEALTH}
    for other in (NODES[0], NODES[1], NODES[3]):
        assert LABEL_HEALTH not in (_node(state, other)["metadata"].get("labels") or {})
    rec = json.loads((rep / "quarantine.json").read_text())
    assert rec["nodes"][bad]["state"] == "applied"
    events = [
        json.loads(x) for x in (hist / "barcelona" / "quarantine.jsonl").read_text().splitlines()
    ]
    assert [(e["node"], e["event"]) for e in events] == [(bad, "quarantine")]

    # release needs a later run that passed the node, or --force
    r = run(["release", str(rep), "--history-dir", str(hist)], state, monkeypatch)
    assert r.exit_code == 2 and "--after RUN2" in r.stderr
    still_bad = _report(
        tmp_path, "r2", "20261125-100000-bbbbbb", "2026-11-25T10:00:00+00:00", slow=2
    )
    r = run(
        ["release", str(rep), "--after", str(still_bad), "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert (
        r.exit_code == 0
        and f"kept: {bad}: run 20261125-100000-bbbbbb did not pass it (FAIL)" in r.stderr
    )
    assert _node(state, bad)["metadata"]["labels"][LABEL_HEALTH] == "fail"
    good = _report(tmp_path, "r3", "20261125-110000-cccccc", "2026-11-25T11:00:00+00:00", slow=None)
    r = run(
        ["release", str(rep), "--after", str(good), "--history-dir", str(hist)], state, monkeypatch
    )
    assert r.exit_code == 0, r.output
    assert f"released {bad}" in r.stdout
    n = _node(state, bad)
    assert (
        LABEL_HEALTH not in n["metadata"]["labels"]
        and ANNOTATION_QUARANTINE not in n["metadata"]["annotations"]
    )
    assert n["spec"]["taints"] == [{"key": "gpu-maintenance", "effect": "NoSchedule"}]
    assert json.loads((rep / "quarantine.json").read_text())["nodes"][bad]["state"] == "released"
    events = [
        json.loads(x) for x in (hist / "barcelona" / "quarantine.jsonl").read_text().splitlines()
    ]
    assert [e["event"] for e in events] == ["quarantine", "release"]


def test_a_node_someone_else_labelled_is_left_alone(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=1)
    fake = FakeCluster.load(str(state))
    meta = fake.objects[f"Node||{NODES[1]}"]["metadata"]
    meta["labels"][LABEL_HEALTH] = "fail"
    meta["annotations"] = {ANNOTATION_QUARANTINE: "ops: bad PSU, ticket 4711"}
    fake.save(str(state))
    r = run(
        ["quarantine", str(rep), *ONE_RUN, "--apply", "--history-dir", str(tmp_path / "h")],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    assert f"left alone: {NODES[1]}: already carries the ml-dev-env.io/health label" in r.stderr
    assert (
        _node(state, NODES[1])["metadata"]["annotations"][ANNOTATION_QUARANTINE]
        == "ops: bad PSU, ticket 4711"
    )
    assert "0 node(s) quarantined, 1 left alone" in r.stdout


def test_not_permitted_prints_the_commands_for_an_admin_and_exits_3(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=3)
    fake = FakeCluster.load(str(state))
    fake.denied = ["patch nodes"]
    fake.save(str(state))
    r = run(
        ["quarantine", str(rep), *ONE_RUN, "--apply", "--history-dir", str(tmp_path / "h")],
        state,
        monkeypatch,
    )
    assert r.exit_code == 3, r.output
    assert "commands for an admin to run" in r.stdout and f"oc taint -- node {NODES[3]}" in r.stdout
    assert LABEL_HEALTH not in (_node(state, NODES[3])["metadata"].get("labels") or {})
    assert not (rep / "quarantine.json").exists()


def test_bad_input_exits_2(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=3)
    r = run(
        [
            "quarantine",
            str(rep),
            *ONE_RUN,
            "--node",
            "gpu-node-99",
            "--history-dir",
            str(tmp_path / "h"),
        ],
        state,
        monkeypatch,
    )
    assert r.exit_code == 2 and "--node gpu-node-99: not a node of run" in r.stderr
    r = run(["quarantine", "no-such-run", "--history-dir", str(tmp_path / "h")], state, monkeypatch)
    assert r.exit_code == 2 and "no-such-run: no such run" in r.stderr
    r = run(
        ["release", str(rep), "--force", "--history-dir", str(tmp_path / "h")], state, monkeypatch
    )
    assert r.exit_code == 2 and "nothing was quarantined" in r.stderr


def test_a_run_on_this_machine_goes_to_the_hosts_list_without_a_config_or_a_cluster(
    tmp_path, monkeypatch
) -> None:
    """A run whose record says ``local`` (mlenv acceptance --local) has no config and no
    scheduler: the hosts platform prints the list, --apply records it, release puts it back;
    no cluster is contacted (no fake installed: a real client call would fail)."""
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=2)
    (rep / "record.json").write_text(
        json.dumps({"run_id": "20261125-090000-aaaaaa", "cluster": "local"})
    )
    hist = tmp_path / "h"
    r = run(["quarantine", str(rep), *ONE_RUN, "--history-dir", str(hist)], None, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "(local, hosts): 1 FAILED node(s); dry run" in r.stdout
    assert f"# take out of the hosts list: {NODES[2]} (compute.matmul:" in r.stdout
    assert not (rep / "quarantine.json").exists()
    r = run(
        ["quarantine", str(rep), *ONE_RUN, "--apply", "--history-dir", str(hist)], None, monkeypatch
    )
    assert r.exit_code == 0, r.output
    assert f"quarantined {NODES[2]} (hosts)" in r.stdout
    rec = json.loads((rep / "quarantine.json").read_text())
    assert rec["platform"] == "hosts" and rec["nodes"][NODES[2]]["state"] == "applied"
    r = run(["release", str(rep), "--force", "--history-dir", str(hist)], None, monkeypatch)
    assert r.exit_code == 0, r.output
    assert f"# put back: {NODES[2]}" in r.stdout and f"released {NODES[2]}" in r.stdout
    assert "warning: --force" in r.stderr


def test_release_of_a_run_that_quarantined_nothing_is_bad_input_before_any_permission_check(
    tmp_path, monkeypatch
) -> None:
    """Exit 2 (the request is wrong), not 3, even for a user who may not patch nodes."""
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=3)
    fake = FakeCluster.load(str(state))
    fake.denied = ["patch nodes"]
    fake.save(str(state))
    r = run(
        ["release", str(rep), "--force", "--history-dir", str(tmp_path / "h")], state, monkeypatch
    )
    assert r.exit_code == 2 and "nothing was quarantined" in r.stderr


def test_a_failed_node_that_cannot_be_marked_exits_3_and_says_why(tmp_path, monkeypatch) -> None:
    """A run whose pods did not know their Node: the FAILED node is named, never a quiet 0."""
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=2)
    doc = json.loads((rep / "results.json").read_text())
    for n in doc["node_verdicts"]["nodes"]:
        n["node_from"], n["node"] = "host", n["hosts"][0]  # no Node name recorded
    (rep / "results.json").write_text(json.dumps(doc))
    for extra in ([], ["--apply"]):
        r = run(
            ["quarantine", str(rep), *ONE_RUN, *extra, "--history-dir", str(tmp_path / "h")],
            state,
            monkeypatch,
        )
        assert r.exit_code == 3, r.output
        assert "1 FAILED node(s) cannot be quarantined here: ml-dev-env-2:" in r.stderr
        assert "did not record the Kubernetes Node" in r.stderr


def _history(root: Path, cluster: str, *reports: tuple[str, str, Path]) -> None:
    """Record runs (run id, started, report folder) in ``cluster``'s history under ``root``."""
    from mlenv.acceptance.records import history

    for rid, started, folder in reports:
        history.append(
            history.history_path(root, cluster),
            {"run_id": rid, "cluster": cluster, "started": started, "report_dir": str(folder)},
        )


def test_a_slow_node_is_acted_on_only_once_it_failed_in_2_of_the_last_3_runs(
    tmp_path, monkeypatch
) -> None:
    state = fake_state(tmp_path)
    hist = tmp_path / "h"
    r1 = _report(tmp_path, "r1", "20261125-080000-aaaaaa", "2026-11-25T08:00:00+00:00", slow=None)
    r2 = _report(tmp_path, "r2", "20261125-090000-bbbbbb", "2026-11-25T09:00:00+00:00", slow=2)
    other = _report(tmp_path, "o1", "20261125-083000-oooooo", "2026-11-25T08:30:00+00:00", slow=2)
    _history(hist, "barcelona", ("20261125-080000-aaaaaa", "2026-11-25T08:00:00+00:00", r1))
    _history(hist, "madrid", ("20261125-083000-oooooo", "2026-11-25T08:30:00+00:00", other))
    _history(hist, "barcelona", ("20261125-090000-bbbbbb", "2026-11-25T09:00:00+00:00", r2))
    r = run(["quarantine", str(r2), "--apply", "--history-dir", str(hist)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert (
        f"# {NODES[2]}: not confirmed, left in service: FAILed in 1 of the last 2 run(s) of "
        "barcelona (20261125-090000-bbbbbb); --confirm 2/3 needs 2" in r.stdout
    )  # madrid's FAIL of a node with the same name does not count
    assert LABEL_HEALTH not in (_node(state, NODES[2])["metadata"].get("labels") or {})
    r3 = _report(tmp_path, "r3", "20261125-100000-cccccc", "2026-11-25T10:00:00+00:00", slow=2)
    _history(hist, "barcelona", ("20261125-100000-cccccc", "2026-11-25T10:00:00+00:00", r3))
    r = run(["quarantine", str(r3), "--history-dir", str(hist)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert (
        f"# {NODES[2]}: confirmed: FAILed in 2 of the last 3 run(s) of barcelona "
        "(20261125-100000-cccccc, 20261125-090000-bbbbbb), --confirm 2/3" in r.stdout
    )
    assert f"oc taint -- node {NODES[2]} ml-dev-env.io/health=fail:NoSchedule" in r.stdout
    r = run(
        ["quarantine", str(r3), "--confirm", "3/3", "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert "not confirmed" in r.stdout and "oc taint" not in r.stdout
    r = run(
        ["quarantine", str(r3), "--confirm", "3/2", "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert r.exit_code == 2 and "--confirm '3/2': expected N/M" in r.stderr


def test_wrong_answers_are_confirmed_by_one_run(tmp_path, monkeypatch) -> None:
    """compute.quorum naming a rank is silent data corruption: never waits for a repeat."""
    state = fake_state(tmp_path)
    pods = [f"ml-dev-env-{i}" for i in range(4)]
    world = {
        "nodes": 4,
        "ranks": 4,
        "device": "cpu",
        "hosts": pods,
        "node_names": NODES,
        "node_sources": ["kubernetes"] * 4,
    }
    quorum = CheckResult(
        name="compute.quorum",
        status=Status.FAIL,
        scope="world",
        reasons=["rank 1 (ml-dev-env-1): matmul checksum differs"],
        details={"blame": [{"rank": 1, "action": "drain", "figure": "rank 1: SDC"}]},
    )
    j = judge([quorum])
    doc = {
        "schema_version": 2,
        "run_id": "20261125-090000-qqqqqq",
        "started": "2026-11-25T09:00:00+00:00",
        "verdict": j.verdict.value,
        "world": world,
        "node_verdicts": nodeverdicts.build(j.results, j.findings, world),
        "checks": [r.to_dict() for r in j.results],
    }
    d = tmp_path / "q"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(doc))
    (d / "record.json").write_text(
        json.dumps({"run_id": "20261125-090000-qqqqqq", "cluster": "barcelona"})
    )
    r = run(["quarantine", str(d), "--history-dir", str(tmp_path / "h")], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert (
        f"# {NODES[1]}: confirmed by run 20261125-090000-qqqqqq alone (compute.quorum" in r.stdout
    )
    assert f"oc taint -- node {NODES[1]} ml-dev-env.io/health=fail:NoSchedule" in r.stdout


def test_release_after_only_accepts_a_later_run_of_the_same_cluster(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    hist = tmp_path / "h"
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=2)
    r = run(
        ["quarantine", str(rep), *ONE_RUN, "--apply", "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    good = _report(tmp_path, "r2", "20261125-100000-bbbbbb", "2026-11-25T10:00:00+00:00", slow=None)
    (good / "record.json").write_text(
        json.dumps({"run_id": "20261125-100000-bbbbbb", "cluster": "madrid"})
    )
    r = run(
        ["release", str(rep), "--after", str(good), "--history-dir", str(hist)], state, monkeypatch
    )
    assert r.exit_code == 2 and "a run of madrid, not of barcelona" in r.stderr
    assert _node(state, NODES[2])["metadata"]["labels"][LABEL_HEALTH] == "fail"
    earlier = _report(
        tmp_path, "r0", "20261125-080000-cccccc", "2026-11-25T08:00:00+00:00", slow=None
    )
    r = run(
        ["release", str(rep), "--after", str(earlier), "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert r.exit_code == 2 and "not after run 20261125-090000-aaaaaa" in r.stderr


def test_release_leaves_a_label_a_human_changed_and_its_taint(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    hist = tmp_path / "h"
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=2)
    r = run(
        ["quarantine", str(rep), *ONE_RUN, "--apply", "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    fake = FakeCluster.load(str(state))
    fake.objects[f"Node||{NODES[2]}"]["metadata"]["labels"][LABEL_HEALTH] = "rma"  # a human's
    fake.save(str(state))
    r = run(["release", str(rep), "--force", "--history-dir", str(hist)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert f"kept: {NODES[2]}: its {LABEL_HEALTH} label is now 'rma'" in r.stderr
    n = _node(state, NODES[2])
    assert n["metadata"]["labels"][LABEL_HEALTH] == "rma"
    assert any(t["key"] == LABEL_HEALTH for t in n["spec"]["taints"])  # still out of service
    assert (
        json.loads((rep / "quarantine.json").read_text())["nodes"][NODES[2]]["state"] == "applied"
    )


def test_a_node_with_someone_elses_health_taint_is_left_alone_before_any_mark(
    tmp_path, monkeypatch
) -> None:
    state = fake_state(tmp_path)
    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=2)
    fake = FakeCluster.load(str(state))
    node = fake.objects[f"Node||{NODES[2]}"]
    node.setdefault("spec", {})["taints"] = [
        {"key": LABEL_HEALTH, "value": "maintenance", "effect": "NoExecute"}
    ]
    fake.save(str(state))
    r = run(
        ["quarantine", str(rep), *ONE_RUN, "--apply", "--history-dir", str(tmp_path / "h")],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    assert (
        f"left alone: {NODES[2]}: already carries the taint "
        f"{LABEL_HEALTH}=maintenance:NoExecute" in r.stderr
    )
    n = _node(state, NODES[2])
    assert LABEL_HEALTH not in (n["metadata"].get("labels") or {})
    assert ANNOTATION_QUARANTINE not in (n["metadata"].get("annotations") or {})
    assert n["spec"]["taints"] == [
        {"key": LABEL_HEALTH, "value": "maintenance", "effect": "NoExecute"}
    ]


def test_a_quarantine_that_stops_half_way_is_recorded_and_release_undoes_it(tmp_path) -> None:
    """The taint step fails after the label: the record says so and release removes the label."""
    from mlenv import quarantine as q

    class HalfMarker(q.ListMarker):
        kind, acts = "kubernetes", True

        def __init__(self) -> None:
            self.marks: set[str] = set()

        def mark(self, t: q.Target, *, remove: bool = False) -> None:
            if remove:
                self.marks.discard(t.node)
                return
            self.marks.add(t.node)  # the label went on
            raise RuntimeError("taint: Forbidden")  # the taint did not

        def not_ours_now(self, t: q.Target) -> str | None:
            return None if t.partial or t.node not in self.marks else "?"

    rep = _report(tmp_path, "r1", "20261125-090000-aaaaaa", "2026-11-25T09:00:00+00:00", slow=2)
    the_run = q.load_run(str(rep), tmp_path / "h")
    marker = HalfMarker()
    with pytest.raises(RuntimeError):
        q.apply(the_run, marker, "barcelona", q.targets(the_run), history_root=tmp_path / "h")
    entry = json.loads((rep / "quarantine.json").read_text())["nodes"][NODES[2]]
    assert entry["state"] == "applying" and entry["note"].startswith("mlenv 20261125-090000-aaaaaa")
    out = q.release(
        the_run,
        marker,
        "barcelona",
        after=None,
        force=True,
        only=None,
        history_root=tmp_path / "h",
    )
    assert out.done == [NODES[2]] and marker.marks == set()
    assert (
        json.loads((rep / "quarantine.json").read_text())["nodes"][NODES[2]]["state"] == "released"
    )


def _all_failed(tmp_path: Path, run_id: str, figures: list[str]) -> Path:
    """A 4-node run of barcelona in which every node FAILED, node i with ``figures[i]``."""
    nodes = [
        {
            "node": node,
            "hosts": [f"ml-dev-env-{i}"],
            "node_from": "kubernetes",
            "status": "FAIL",
            "findings": [{"status": "FAIL", "check": "compute.matmul", "figure": figures[i]}],
        }
        for i, node in enumerate(NODES)
    ]
    doc = {
        "schema_version": 1,
        "run_id": run_id,
        "started": "2026-11-25T09:00:00+00:00",
        "verdict": "FAIL",
        "node_verdicts": {"nodes": nodes},
        "checks": [],
    }
    d = tmp_path / "all"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(doc))
    (d / "record.json").write_text(json.dumps({"run_id": run_id, "cluster": "barcelona"}))
    return d


def _mark_calls(state: Path) -> list[list[str]]:
    kinds = ("label", "annotate", "taint", "create-events", "patch-status", "mark-node")
    return [c for c in FakeCluster.load(str(state)).calls if c[0] in kinds]


def test_every_node_is_marked_in_one_call_per_kind_and_released_the_same(
    tmp_path, monkeypatch
) -> None:
    """Four FAILED nodes, two figures: one label, one taint, one annotation per note and one
    List of Events, not three calls and an Event per node (the code before: four
    ``mark-node`` and four ``tell-node``). The dry run prints exactly those calls."""
    state = fake_state(tmp_path)
    hist = tmp_path / "h"
    rep = _all_failed(tmp_path, "20261125-090000-aaaaaa", ["tflops = 0.2", "tflops = 0.3"] * 2)
    r = run(["quarantine", str(rep), *ONE_RUN, "--history-dir", str(hist)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    printed = [ln for ln in r.stdout.splitlines() if ln.startswith("oc ")]
    assert printed == [
        f"oc label --overwrite -- node {' '.join(NODES)} ml-dev-env.io/health=fail",
        f"oc annotate --overwrite -- node {NODES[0]} {NODES[2]} "
        "'ml-dev-env.io/quarantine=mlenv 20261125-090000-aaaaaa: compute.matmul tflops = 0.2'",
        f"oc annotate --overwrite -- node {NODES[1]} {NODES[3]} "
        "'ml-dev-env.io/quarantine=mlenv 20261125-090000-aaaaaa: compute.matmul tflops = 0.3'",
        f"oc taint -- node {' '.join(NODES)} ml-dev-env.io/health=fail:NoSchedule",
    ]
    assert sum(ln.startswith("echo ") for ln in r.stdout.splitlines()) == 1  # one List
    r = run(
        ["quarantine", str(rep), *ONE_RUN, "--apply", "--history-dir", str(hist)],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    assert "4 node(s) quarantined, 0 left alone" in r.stdout
    assert _mark_calls(state) == [
        ["label", *NODES],
        ["annotate", NODES[0], NODES[2]],
        ["annotate", NODES[1], NODES[3]],
        ["taint", *NODES],
        ["create-events", *NODES],
    ]
    for i, node in enumerate(NODES):
        n = _node(state, node)
        assert n["metadata"]["labels"][LABEL_HEALTH] == "fail"
        assert n["metadata"]["annotations"][ANNOTATION_QUARANTINE].endswith(f"0.{2 + i % 2}")
    rec = json.loads((rep / "quarantine.json").read_text())
    assert {v["state"] for v in rec["nodes"].values()} == {"applied"}

    # --apply read the nodes, so its calls (and the record) choose them by their hostname
    # label: kubectl reads each named node with a throttled GET of its own (85 s at 512)
    def sel(*nodes: str) -> str:
        return f"'--selector=kubernetes.io/hostname in ({','.join(nodes)})'"

    note = "ml-dev-env.io/quarantine=mlenv 20261125-090000-aaaaaa: compute.matmul tflops = 0."
    assert [c for c in rec["commands"] if c.startswith("oc ")] == [
        f"oc label --overwrite {sel(*NODES)} -- node ml-dev-env.io/health=fail",
        f"oc annotate --overwrite {sel(NODES[0], NODES[2])} -- node '{note}2'",
        f"oc annotate --overwrite {sel(NODES[1], NODES[3])} -- node '{note}3'",
        f"oc taint {sel(*NODES)} -- node ml-dev-env.io/health=fail:NoSchedule",
    ]

    fake = FakeCluster.load(str(state))
    fake.calls.clear()
    fake.save(str(state))
    r = run(["release", str(rep), "--force", "--history-dir", str(hist)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert _mark_calls(state) == [
        ["taint", *NODES],
        ["annotate", *NODES],
        ["label", *NODES],
        ["create-events", *NODES],
    ]
    rec = json.loads((rep / "quarantine.json").read_text())
    assert {v["state"] for v in rec["nodes"].values()} == {"released"}
    for node in NODES:
        assert LABEL_HEALTH not in _node(state, node)["metadata"]["labels"]


def _apply_all(the_run, marker, history: Path, said: list[str]) -> None:
    """``quarantine --apply`` of every FAILED node of ``the_run``, what it says into ``said``."""
    from mlenv import quarantine as q

    q.quarantine_verb(
        the_run,
        marker,
        "barcelona",
        q.targets(the_run),
        apply_them=True,
        only=None,
        history_root=history,
        say=said.append,
        warn=said.append,
    )


def test_a_node_gone_after_it_was_read_is_named_and_the_others_are_marked(tmp_path) -> None:
    """The calls choose the nodes by their hostname label, and a selector passes over the
    gone node without a word: the nodes are read back, each judged by what it carries;
    the record says which are marked, the gone one stays "applying" with why, and the
    verb ends in exit 3 naming it."""
    from mlenv import quarantine as q
    from mlenv.errors import InfraError
    from mlenv.platforms.kubenodes import KubeMarker

    fake = FakeCluster.typical("ml-dev", NODES, gpus=8)
    rep = _all_failed(tmp_path, "20261125-090000-aaaaaa", ["tflops = 0.2"] * 4)
    the_run = q.load_run(str(rep), tmp_path / "h")
    marker = KubeMarker("oc", fake)
    marker.read(NODES)  # what quarantine reads before it marks …
    del fake.objects[f"Node||{NODES[1]}"]  # … and the node deleted right after
    said: list[str] = []
    with pytest.raises(InfraError) as e:
        _apply_all(the_run, marker, tmp_path / "h", said)
    assert str(e.value).startswith(f"1 node(s) not quarantined: {NODES[1]}: no such Node")
    assert "quarantine of run 20261125-090000-aaaaaa: 3 node(s) quarantined" in said[-1]
    # still one call per kind for all four names
    assert [c[0] for c in fake.calls] == ["label", "annotate", "taint", "create-events"]
    assert fake.calls[-1] == ["create-events", NODES[0], NODES[2], NODES[3]]
    rec = json.loads((rep / "quarantine.json").read_text())["nodes"]
    assert {n: v["state"] for n, v in rec.items()} == {
        NODES[0]: "applied",
        NODES[1]: "applying",
        NODES[2]: "applied",
        NODES[3]: "applied",
    }
    assert "no such Node" in rec[NODES[1]]["error"]
    for node in (NODES[0], NODES[2], NODES[3]):
        n = fake.get("Node", node, None)
        assert n is not None and n["metadata"]["labels"][LABEL_HEALTH] == "fail"


def test_a_node_whose_hostname_label_is_not_its_name_is_marked_by_name(tmp_path) -> None:
    """A hostname selector would not find a node whose kubelet overrode its hostname: its
    calls name it, and every node carries the marks."""
    from mlenv import quarantine as q
    from mlenv.platforms.kubenodes import KubeMarker

    fake = FakeCluster.typical("ml-dev", NODES, gpus=8)
    fake.objects[f"Node||{NODES[2]}"]["metadata"]["labels"]["kubernetes.io/hostname"] = "ip-7"
    rep = _all_failed(tmp_path, "20261125-090000-aaaaaa", ["tflops = 0.2"] * 4)
    the_run = q.load_run(str(rep), tmp_path / "h")
    said: list[str] = []
    _apply_all(the_run, KubeMarker("oc", fake), tmp_path / "h", said)
    assert "4 node(s) quarantined" in said[-1], said
    for node in NODES:
        n = fake.get("Node", node, None)
        assert n is not None and n["metadata"]["labels"][LABEL_HEALTH] == "fail", node
        assert [t["key"] for t in n["spec"]["taints"]] == [LABEL_HEALTH]
    rest = [NODES[0], NODES[1], NODES[3]]
    assert [c for c in fake.calls if c[0] == "label"] == [["label", *rest], ["label", NODES[2]]]
    cmds = json.loads((rep / "quarantine.json").read_text())["commands"]
    assert f"oc label --overwrite -- node {NODES[2]} ml-dev-env.io/health=fail" in cmds


def test_a_half_marked_node_is_judged_by_what_it_carries_at_release(tmp_path) -> None:
    """The taint of one node was taken off by hand: the batched taint removal fails for that
    name, the read-back finds none of the marks left, and the node counts as released."""
    from mlenv import quarantine as q
    from mlenv.platforms.kubenodes import KubeMarker

    fake = FakeCluster.typical("ml-dev", NODES, gpus=8)
    rep = _all_failed(tmp_path, "20261125-090000-aaaaaa", ["tflops = 0.2"] * 4)
    the_run = q.load_run(str(rep), tmp_path / "h")
    out = q.apply(
        the_run,
        KubeMarker("oc", fake),
        "barcelona",
        q.targets(the_run),
        history_root=tmp_path / "h",
    )
    assert len(out.done) == 4 and not out.failed
    fake.objects[f"Node||{NODES[3]}"]["spec"]["taints"] = []
    back = q.release(
        the_run,
        KubeMarker.for_release("oc", fake, the_run),
        "barcelona",
        after=None,
        force=True,
        only=None,
        history_root=tmp_path / "h",
    )
    assert back.done == NODES and not back.failed
    rec = json.loads((rep / "quarantine.json").read_text())["nodes"]
    assert {v["state"] for v in rec.values()} == {"released"}


def test_nodes_are_read_once_in_one_read(tmp_path) -> None:
    """Each Node is read once however often it is judged (quarantine and the condition at
    release), all of them in one ``get_many`` (one list of every Node on the client; read
    in chunks of 50, each chunk listed every Node again: 11 lists at 512)."""
    from mlenv.platforms.kubenodes import KubeMarker

    names = [f"gpu-{i:03d}" for i in range(120)]
    fake = FakeCluster.typical("ml-dev", names, gpus=8)
    asked: list[int] = []
    real = fake.get_many

    def counted(refs):
        asked.append(len(refs))
        return real(refs)

    fake.get_many = counted  # type: ignore[method-assign]
    marker = KubeMarker("oc", fake)
    marker.read(names)
    marker.read(names[:10])
    assert asked == [120]
    assert marker._node("gpu-007") is not None and len(asked) == 1
