"""runs Slurm started on its own (the scheduled re-check) into this machine's history,
one record per run id (``mlenv.platforms.slurmfetch.fetch_runs``).

The shared folder is laid out as the batch script leaves it: ``results/<run-id>/`` with rank
0's ``run.json``, ``results.json`` and ``record.json``, and the job's output
``results/<job-name>-<job-id>.out``. Slurm's answer about a job is injected.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlenv.acceptance.records import history
from mlenv.config import load
from mlenv.config.model import Cluster
from mlenv.platforms.slurmfetch import fetch_runs

CPU = Path(__file__).resolve().parents[2] / "data" / "platforms" / "cpu-slurm.yaml"
CLUSTER = "cpu-slurm"


def _cluster(tmp_path: Path) -> Cluster:
    f = tmp_path / "cpu-slurm.yaml"
    f.write_text(CPU.read_text().replace("/shared/mlenv", str(tmp_path / "shared")))
    return load(f)


def _run(
    shared: Path, rid: str, job: str, *, verdict: str | None = "PASS", cluster: str = CLUSTER
) -> Path:
    d = shared / "results" / rid
    d.mkdir(parents=True)
    meta = {
        "run_id": rid,
        "started": "2026-11-27T03:00:01+00:00",
        "profile": "quick",
        "checks": ["compute.matmul"],
        "world": {"nodes": 2, "ranks": 4, "hosts": ["n1", "n2"]},
        "job": {"scheduler": "slurm", "id": job},
    }
    (d / "run.json").write_text(json.dumps(meta))
    if verdict is not None:
        doc = {
            "run_id": rid,
            "verdict": verdict,
            "started": meta["started"],
            "finished": "2026-11-27T03:01:00+00:00",
            "profile": "quick",
            "world": {"nodes": 2, "ranks": 4},
            "job": meta["job"],
            "checks": [],
        }
        (d / "results.json").write_text(json.dumps(doc))
        (d / "record.json").write_text(json.dumps({"run_id": rid, "cluster": cluster}))
    (shared / "results" / f"mlenv-recheck-{cluster}-{job}.out").write_text(f"job {job} output\n")
    return d


def test_new_runs_are_imported_once_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLENV_HISTORY_DIR", raising=False)
    cfg = _cluster(tmp_path)
    shared, root = tmp_path / "shared", tmp_path / "repo"
    _run(shared, "20261120-030001-000029", "41")
    _run(shared, "20261127-030001-00002a", "42")
    _run(shared, "20261127-030002-00002b", "43", cluster="other")  # shares the folder: not ours
    _run(shared, "20261127-040000-00002c", "44", verdict=None)  # its job still runs
    _run(shared, "20261127-040001-00002d", "45", verdict=None)  # its job ended without a report
    _run(shared, "20261127-040002-00002e", "46")  # reported; rank 0 still finishing
    (shared / "results" / "notes").mkdir()  # not a run folder
    states: dict[str, str | None] = {
        "41": "COMPLETED",
        "42": "COMPLETED",
        "44": "RUNNING",
        "45": None,
        "46": "COMPLETING",
    }
    said: list[str] = []
    got = fetch_runs(cfg, root / "reports", said.append, job_state=states.__getitem__)
    assert got == ["20261120-030001-000029", "20261127-030001-00002a", "20261127-040001-00002d"]
    hist = history.history_path(root / "reports", CLUSTER)
    recs = history.read(hist)[0]
    assert [r["run_id"] for r in recs] == got
    assert [r["verdict"] for r in recs] == ["PASS", "PASS", "ERROR"]
    assert all(
        r["origin"] == "cluster" and r["cluster"] == CLUSTER and r["job"]["scheduler"] == "slurm"
        for r in recs
    )
    for r in recs:  # the copy is the run's folder here, with the job's output beside its report
        dest = root / "reports" / CLUSTER / r["run_id"]
        assert r["report_dir"] == str(dest.resolve())
        assert json.loads((dest / "record.json").read_text()) == r
        assert (dest / "job.out").read_text() == f"job {r['job']['id']} output\n"
    doc = json.loads(
        (root / "reports" / CLUSTER / "20261127-040001-00002d" / "results.json").read_text()
    )
    assert "job 45 ended and is gone from Slurm before rank 0 wrote results.json" in " ".join(
        doc["reasons"]
    )
    assert any("20261127-030002-00002b is cluster other's" in s for s in said)
    assert any("20261127-040000-00002c (job 44) is running: not yet" in s for s in said)
    assert any("20261127-040002-00002e (job 46) is completing: not yet" in s for s in said)

    # again: nothing new; the active jobs' runs come once Slurm has ended them
    assert fetch_runs(cfg, root / "reports", said.append, job_state=states.__getitem__) == []
    states.update({"44": "TIMEOUT", "46": None})
    assert fetch_runs(cfg, root / "reports", said.append, job_state=states.__getitem__) == [
        "20261127-040000-00002c",
        "20261127-040002-00002e",
    ]
    assert fetch_runs(cfg, root / "reports", said.append, job_state=states.__getitem__) == []
    assert len(history.read(hist)[0]) == 5


def test_a_run_mlenv_already_recorded_is_not_imported_again(tmp_path: Path) -> None:
    """``mlenv acceptance --cluster`` recorded its run as it ended: fetch leaves it be."""
    cfg = _cluster(tmp_path)
    _run(tmp_path / "shared", "20261127-030001-00002a", "42")
    hist = history.history_path(tmp_path / "hist", CLUSTER)
    history.append(
        hist, {"run_id": "20261127-030001-00002a", "cluster": CLUSTER, "verdict": "PASS"}
    )
    said: list[str] = []
    assert fetch_runs(cfg, tmp_path / "hist", said.append, job_state=lambda job: None) == []
    assert (
        len(history.read(hist)[0]) == 1
        and not (tmp_path / "hist" / CLUSTER / "20261127-030001-00002a").exists()
    )
    assert said[-1].startswith("fetch: no new runs in ")


def test_no_results_folder_yet(tmp_path: Path) -> None:
    said: list[str] = []
    assert (
        fetch_runs(
            _cluster(tmp_path),
            tmp_path / "repo" / "reports",
            said.append,
            job_state=lambda job: None,
        )
        == []
    )
    assert said == [f"fetch: no runs yet: {tmp_path / 'shared' / 'results'} does not exist"]
