"""``mlenv history CLUSTER --fetch``: the runs in pod-0's results folder (the
scheduled re-checks') join the control host's history, one record per run id; against
the fake, whose exec runs the real in-pod scripts over the pod's volume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from _fakeenv import ROOT, fake_state, run
from typer.testing import CliRunner

from mlenv.acceptance.records.history import make_record
from mlenv.cli.app import app
from mlenv.testing.fakecluster import FakeCluster

NS = "ml-dev-env"  # barcelona's namespace
POD0 = "ml-dev-env-0"


def _doc(rid: str, verdict: str = "PASS") -> dict:
    return {
        "run_id": rid,
        "started": f"{rid[:4]}-{rid[4:6]}-{rid[6:8]}T03:00:00+00:00",
        "finished": f"{rid[:4]}-{rid[4:6]}-{rid[6:8]}T03:05:00+00:00",
        "verdict": verdict,
        "profile": "quick",
        "checks": [],
        "world": {"nodes": 2, "ranks": 8, "backend": "nccl", "device": "cuda"},
    }


def _put(
    fake: FakeCluster,
    rid: str,
    *,
    record: bool = True,
    results: bool = True,
    cluster: str = "barcelona",
    verdict: str = "PASS",
) -> None:
    base = f"/workspace/results/{rid}"
    doc = _doc(rid, verdict)
    if results:
        fake.write_pod_file(POD0, NS, f"{base}/results.json", json.dumps(doc).encode())
    fake.write_pod_file(POD0, NS, f"{base}/summary.md", f"# run {rid}\n".encode())
    fake.write_pod_file(POD0, NS, f"{base}/logs/rank0.log", b"rank 0 done\n")
    if record:
        rec = make_record(doc, [], cluster, Path(base), origin="cluster")
        fake.write_pod_file(POD0, NS, f"{base}/record.json", json.dumps(rec).encode())


def _deployed(tmp_path, monkeypatch):
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    monkeypatch.setenv("MLENV_HISTORY_DIR", str(tmp_path / "reports"))
    return state, FakeCluster.load(str(state))


def test_fetch_copies_each_finished_run_once(tmp_path, monkeypatch) -> None:
    state, fake = _deployed(tmp_path, monkeypatch)
    _put(fake, "20261122-030000-aaaaaa")  # a scheduled run, recorded in the pod
    _put(
        fake, "20261129-030000-bbbbbb", record=False, verdict="FAIL"
    )  # its history line was not written
    _put(fake, "20261206-030000-cccccc", record=False, results=False)  # still running
    fake.save(str(state))

    r = run(["history", "barcelona", "--fetch"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    fetched = [ln for ln in r.stdout.splitlines() if ln.startswith("fetched run ")]
    assert [ln.split()[2].rstrip(":") for ln in fetched] == [
        "20261122-030000-aaaaaa",
        "20261129-030000-bbbbbb",
    ]
    assert "run 20261206-030000-cccccc in ml-dev-env-0 has no results yet" in r.stderr
    reports = tmp_path / "reports" / "barcelona"
    for rid in ("20261122-030000-aaaaaa", "20261129-030000-bbbbbb"):
        assert (reports / rid / "logs" / "rank0.log").read_bytes() == b"rank 0 done\n"
        assert json.loads((reports / rid / "record.json").read_text())["report_dir"] == str(
            (reports / rid).resolve()
        )
    # and the listing shows them like any other run
    assert "20261122-030000-aaaaaa" in r.stdout and "FAIL" in r.stdout

    again = run(["history", "barcelona", "--fetch", "-o", "json"], state, monkeypatch)
    assert again.exit_code == 0, again.output
    assert "fetched run" not in again.output and "nothing new" in again.stderr
    recs = json.loads(again.stdout)  # stdout stays one JSON document
    assert sorted(x["run_id"] for x in recs) == ["20261122-030000-aaaaaa", "20261129-030000-bbbbbb"]
    assert {x["verdict"] for x in recs} == {"PASS", "FAIL"} and {x["origin"] for x in recs} == {
        "cluster"
    }
    lines = (reports / "history.jsonl").read_text().splitlines()
    assert len(lines) == 2


def test_a_folder_whose_record_names_another_cluster_or_run_is_not_fetched(
    tmp_path, monkeypatch
) -> None:
    state, fake = _deployed(tmp_path, monkeypatch)
    _put(fake, "20261122-030000-aaaaaa", cluster="someone-else")
    base = "/workspace/results/20261129-030000-bbbbbb"
    rec = make_record(
        _doc("20261101-000000-ffffff"), [], "barcelona", Path(base)
    )  # another run's line
    fake.write_pod_file(POD0, NS, f"{base}/record.json", json.dumps(rec).encode())
    fake.write_pod_file(POD0, NS, "/workspace/results/not-a-run/record.json", b"{}")
    fake.save(str(state))
    r = run(["history", "barcelona", "--fetch"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "fetched run" not in r.stdout
    assert r.stderr.count("its record does not name this run") == 2
    assert not (tmp_path / "reports" / "barcelona" / "history.jsonl").exists()


def test_an_unreachable_cluster_is_exit_3_and_no_such_cluster_exit_2(tmp_path, monkeypatch) -> None:
    state, fake = _deployed(tmp_path, monkeypatch)
    fake.reachable = False
    fake.save(str(state))
    r = run(["history", "barcelona", "--fetch"], state, monkeypatch)
    assert r.exit_code == 3, r.output
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("error")]) == 1
    r = run(["history", "nowhere", "--fetch"], state, monkeypatch)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output


def test_hosts_have_nothing_to_fetch_and_say_so(tmp_path) -> None:
    """A hosts run is recorded here when it ends: --fetch says so, exit 0, no history file made."""
    (tmp_path / "clusters").mkdir()
    shutil.copy(
        ROOT / "tests" / "data" / "platforms" / "site-baremetal-lab.yaml",
        tmp_path / "clusters" / "site-lab.yaml",
    )
    r = CliRunner().invoke(
        app,
        ["history", "site-lab", "--fetch"],
        env={"MLENV_ROOT": str(tmp_path), "MLENV_HISTORY_DIR": str(tmp_path / "reports")},
    )
    assert "fetch: nothing to fetch: hosts runs are recorded in" in r.output, r.output
    assert not (tmp_path / "reports" / "site-lab" / "history.jsonl").exists()


def test_slurm_fetch_imports_the_shared_folders_runs_once(tmp_path) -> None:
    """Slurm: the runs under shared_dir/results that the history lacks, through the CLI
    (slurmfetch.fetch_runs; the real-Slurm tier runs a scheduled job and fetches it)."""
    (tmp_path / "clusters").mkdir()
    shared = tmp_path / "shared"
    cfg = (ROOT / "tests" / "data" / "platforms" / "cpu-slurm.yaml").read_text()
    (tmp_path / "clusters" / "cpu-slurm.yaml").write_text(cfg.replace("/shared/mlenv", str(shared)))
    rid = "20261122-030000-aaaaaa"
    (shared / "results" / rid).mkdir(parents=True)
    (shared / "results" / rid / "results.json").write_text(json.dumps(_doc(rid)))
    env = {"MLENV_ROOT": str(tmp_path), "MLENV_HISTORY_DIR": str(tmp_path / "reports")}
    r = CliRunner().invoke(app, ["history", "cpu-slurm", "--fetch", "-o", "json"], env=env)
    assert r.exit_code == 0, r.output
    assert (
        f"fetch: run {rid}: PASS, copied to {tmp_path / 'reports' / 'cpu-slurm' / rid}" in r.stderr
    )
    assert [x["run_id"] for x in json.loads(r.stdout)] == [rid]
    assert (tmp_path / "reports" / "cpu-slurm" / rid / "results.json").is_file()
    again = CliRunner().invoke(app, ["history", "cpu-slurm", "--fetch", "-o", "json"], env=env)
    assert (
        again.exit_code == 0
        and "fetch: no new runs" in again.stderr
        and len(json.loads(again.stdout)) == 1
    )
