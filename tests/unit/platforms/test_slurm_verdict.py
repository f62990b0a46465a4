"""a job Slurm ends is ERROR naming the node, never PASS, whatever rank 0 wrote;
the results measured before are kept. (The report functions are the real ones; only the
job's end is given here: tests/integration/test_slurm.py kills a real slurmd.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.reports.jsonl import JsonlWriter
from mlenv.config import load
from mlenv.platforms.slurm import KILLED, Outcome, Submission, judge

REPO = Path(__file__).resolve().parents[3]
CPU = REPO / "tests" / "data" / "platforms" / "cpu-slurm.yaml"


def _sub(tmp: Path) -> Submission:
    return Submission(
        "cpu-slurm", "41", "run-1", str(tmp / "results" / "run-1"), str(tmp / "a.sbatch"), 0.0
    )


def _measured(report: Path) -> None:
    report.mkdir(parents=True)
    w = JsonlWriter(report / "results.jsonl")
    w.append(
        CheckResult(
            name="compute.matmul",
            status=Status.PASS,
            node="n1",
            rank=0,
            metrics={"tflops_fp32": 1.0},
        )
    )
    w.close()


@pytest.mark.parametrize("state", sorted(KILLED))
def test_a_job_slurm_ended_is_error_even_if_rank_0_wrote_pass(state: str, tmp_path: Path) -> None:
    sub = _sub(tmp_path)
    report = Path(sub.report_dir)
    _measured(report)
    (report / "results.json").write_text(
        json.dumps({"verdict": "PASS", "reasons": [], "checks": []})
    )
    doc = judge(
        load(CPU),
        sub,
        Outcome(state, {"NodeList": "n[1-2]", "Reason": "NodeDown"}, ["n2 (down)"], 1.0),
    )
    assert doc["verdict"] == "ERROR"
    assert doc["reasons"][0].startswith(f"Slurm ended job 41 ({state}: NodeDown) on node n2 (down)")
    assert [c["name"] for c in doc["checks"]] == ["compute.matmul"]  # what was measured is kept
    assert json.loads((report / "results.json").read_text())["verdict"] == "ERROR"


def test_completed_job_keeps_rank_0s_verdict(tmp_path: Path) -> None:
    sub = _sub(tmp_path)
    report = Path(sub.report_dir)
    report.mkdir(parents=True)
    (report / "results.json").write_text(
        json.dumps({"verdict": "FAIL", "reasons": ["x"], "checks": []})
    )
    assert judge(load(CPU), sub, Outcome("COMPLETED", {}, [], 1.0))["verdict"] == "FAIL"


def test_failed_job_without_results_json_is_error_from_what_was_measured(tmp_path: Path) -> None:
    sub = _sub(tmp_path)
    _measured(Path(sub.report_dir))
    doc = judge(load(CPU), sub, Outcome("FAILED", {"ExitCode": "1:0"}, [], 1.0))
    assert doc["verdict"] == "ERROR"
    assert doc["reasons"][0].startswith(
        "job 41 ended FAILED (exit 1:0) before rank 0 wrote results.json"
    )


def test_a_users_scancel_is_interrupted_and_timeout_node_fail_preemption_stay_error(
    tmp_path: Path,
) -> None:
    """a CANCELLED job on healthy nodes is someone's scancel: INTERRUPTED
    (exit 143), what was measured kept; Slurm's own endings stay ERROR."""
    from mlenv.contract import exit_for_doc

    sub = _sub(tmp_path)
    report = Path(sub.report_dir)
    _measured(report)
    doc = judge(load(CPU), sub, Outcome("CANCELLED", {"NodeList": "n[1-2]"}, [], 1.0))
    assert doc["verdict"] == "INTERRUPTED" and doc["interrupted"] == {"signal": "scancel"}
    assert doc["reasons"][0].startswith(
        "INTERRUPTED: the run was stopped by scancel; 1 result(s) kept"
    )
    assert [c["name"] for c in doc["checks"]] == ["compute.matmul"]
    assert exit_for_doc(doc) == 143
    for state in ("TIMEOUT", "NODE_FAIL", "PREEMPTED"):
        (report / "results.json").unlink()
        doc = judge(load(CPU), sub, Outcome(state, {"NodeList": "n[1-2]"}, [], 1.0))
        assert doc["verdict"] == "ERROR" and "interrupted" not in doc, state
        assert exit_for_doc(doc) == 3


def test_the_run_is_in_the_control_hosts_history_with_its_job_id_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run id: rank 0 recorded the run under slurm.shared_dir, so `mlenv
    history CLUSTER` here said "no runs recorded"; the job id was in neither results.json
    nor record.json. The judged document is recorded here (origin cluster, the local copy
    as report_dir, the job id), once."""
    from mlenv.acceptance.records import history
    from mlenv.platforms.slurm import record_here

    monkeypatch.delenv("MLENV_HISTORY_DIR", raising=False)
    monkeypatch.delenv("MLENV_CLUSTER", raising=False)
    sub = _sub(tmp_path / "shared")
    _measured(Path(sub.report_dir))  # no run.json: the job never reached rank 0's start
    doc = judge(load(CPU), sub, Outcome("NODE_FAIL", {"NodeList": "n[1-2]"}, ["n2 (down)"], 1.0))
    job = {"scheduler": "slurm", "id": "41", "control_host": socket.gethostname()}
    assert doc["job"] == job and doc["run_id"] == sub.run_id
    root, dest = tmp_path / "repo", tmp_path / "repo" / "reports" / "cpu-slurm" / sub.run_id
    dest.mkdir(parents=True)
    said: list[str] = []
    for _ in range(2):
        record_here(root, load(CPU), dest, doc, said.append)
    lines, _ = history.read(history.history_path(root / "reports", "cpu-slurm"))
    assert len(lines) == 1, said
    (line,) = lines
    assert (
        line["run_id"] == sub.run_id and line["verdict"] == "ERROR" and line["origin"] == "cluster"
    )
    assert line["job"] == job and line["report_dir"] == str(dest.resolve())
    assert json.loads((dest / "record.json").read_text()) == line
    assert said[1].endswith("(the job wrote it)"), said


def test_the_suite_in_a_slurm_job_puts_the_job_id_in_results_json(tmp_path: Path) -> None:
    from mlenv.acceptance.reports import RunMeta, finalize
    from mlenv.acceptance.reports.document import batch_job

    job = batch_job({"SLURM_JOB_ID": "4242"})
    assert job == {"scheduler": "slurm", "id": "4242"} and batch_job({}) is None
    meta = RunMeta(
        run_id="20261127-000000-abcdef",
        started="2026-11-27T00:00:00+00:00",
        profile="quick",
        checks=[],
        world={"nodes": 1, "ranks": 1, "hosts": ["n1"]},
        job=job,
    )
    doc = finalize(tmp_path, meta, [], plots=False)
    assert doc["job"] == job and json.loads((tmp_path / "results.json").read_text())["job"] == job
