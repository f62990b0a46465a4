"""At the CLI: a run never reuses a folder, and compare/bundle/history never take
one run for another (exit 2, one line, before anything runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.acceptance.records import history, rundir
from mlenv.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
A, B = "20260101-000000-aaaaaa", "20260101-000500-bbbbbb"


def _acceptance(report_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MLENV_ROOT", str(ROOT))
    return CliRunner().invoke(
        app, ["acceptance", "--local", "--checks", "environment", "--report-dir", str(report_dir)]
    )


def test_a_folder_holding_another_runs_results_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "results.json").write_text('{"run_id": "x", "verdict": "FAIL"}')
    r = _acceptance(tmp_path, monkeypatch)
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [
        f"error: --report-dir {tmp_path}: already holds another run's results "
        f"(results.json); choose a new folder (or leave --report-dir out: each run "
        f"then gets acceptance-report/<run-id>/)"
    ]
    assert "launching" not in r.output
    assert (tmp_path / "results.json").read_text() == '{"run_id": "x", "verdict": "FAIL"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "results.json"
    ]  # not suffixed, nothing added


def test_a_folder_in_use_by_a_live_run_is_refused(tmp_path: Path, monkeypatch) -> None:
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / rundir.LOCK_FILE).write_text(f"{live.pid} {A}\n")
        r = _acceptance(tmp_path, monkeypatch)
    finally:
        live.kill()
        live.wait()
    assert r.exit_code == 2, r.output
    assert f"in use by a live run (pid {live.pid}); choose a new folder" in r.stderr
    assert len(r.stderr.splitlines()) == 1 and "launching" not in r.output


def _run_folder(d: Path, run_id: str, verdict: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema_version": 1,
        "run_id": run_id,
        "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T00:01:00+00:00",
        "verdict": verdict,
        "reasons": [],
        "profile": "quick",
        "world": {"nodes": 1, "ranks": 1, "device": "cpu", "hosts": ["h"]},
        "checks": [
            {
                "name": "compute.matmul",
                "status": "PASS",
                "scope": "rank",
                "node": "h",
                "rank": 0,
                "metrics": {"tflops_fp32": 1.0},
            }
        ],
    }
    (d / "results.json").write_text(json.dumps(doc))


def _history(root: Path, *recs: dict[str, object]) -> None:
    for rec in recs:
        history.append(root / "local" / history.HISTORY_FILE, rec)


def _rec(run_id: str, folder: Path, verdict: str) -> dict[str, object]:
    return {
        "schema_version": 1,
        "run_id": run_id,
        "cluster": "local",
        "started": "2026-01-01T00:00:00+00:00",
        "verdict": verdict,
        "report_dir": str(folder),
    }


def test_compare_refuses_a_history_folder_now_holding_another_run(
    tmp_path: Path, monkeypatch
) -> None:
    """The old shared folder: run B overwrote run A, A's line still points there."""
    shared = tmp_path / "acceptance-report"
    _run_folder(shared, B, "PASS")
    _history(tmp_path / "h", _rec(A, shared, "FAIL"), _rec(B, shared, "PASS"))
    monkeypatch.setenv("MLENV_HISTORY_DIR", str(tmp_path / "h"))
    r = CliRunner().invoke(app, ["compare", A, B])
    assert r.exit_code == 2, r.output
    assert f"{shared}: holds run {B}, not run {A}" in r.stderr and "no regression" not in r.output
    r = CliRunner().invoke(app, ["bundle", A])
    assert r.exit_code == 2, r.output
    assert f"holds run {B}, not run {A}" in r.stderr


def test_compare_and_bundle_refuse_a_run_folder_named_for_another_run(
    tmp_path: Path, monkeypatch
) -> None:
    d = tmp_path / A
    _run_folder(d, B, "PASS")
    _run_folder(tmp_path / "b", B, "PASS")
    monkeypatch.setenv("MLENV_ROOT", str(ROOT))
    for argv in (
        ["compare", str(d), str(tmp_path / "b")],
        ["bundle", str(d), "--out", str(tmp_path / "x.tar.gz")],
    ):
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2, r.output
        assert f"named for run {A} but holds run {B}" in r.stderr
    assert not (tmp_path / "x.tar.gz").exists()


def test_history_shows_a_run_recorded_twice_once_and_refuses_two_different_records(
    tmp_path: Path,
) -> None:
    root = tmp_path / "h"
    _history(
        root,
        _rec(A, tmp_path / A, "PASS"),
        _rec(A, tmp_path / A, "PASS"),
        _rec(B, tmp_path / B, "FAIL"),
    )
    r = CliRunner().invoke(app, ["history", "local", "--history-dir", str(root)])
    assert r.exit_code == 0, r.output
    assert sum(line.startswith(A) for line in r.stdout.splitlines()) == 1
    _history(root, _rec(B, tmp_path / B, "PASS"))
    r = CliRunner().invoke(app, ["history", "local", "--history-dir", str(root)])
    assert r.exit_code == 2, r.output
    assert f"run {B} is recorded twice with different content" in r.stderr
    assert "local: FAIL" in r.stderr and "local: PASS" in r.stderr


def test_history_of_an_unknown_cluster_is_exit_2_with_a_did_you_mean(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("MLENV_ROOT", str(ROOT))
    r = CliRunner().invoke(app, ["history", "locl", "--history-dir", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "did you mean local?" in r.stderr and len(r.stderr.splitlines()) == 1


def _killed_run(d: Path) -> None:
    """What a SIGKILLed run leaves: run.json and results.jsonl, no results.json."""
    d.mkdir(parents=True)
    (d / "run.json").write_text(
        json.dumps(
            {
                "run_id": A,
                "started": "2026-01-01T00:00:00+00:00",
                "profile": "quick",
                "checks": ["compute.matmul", "memory.copy"],
                "world": {
                    "nodes": 1,
                    "ranks": 1,
                    "backend": "gloo",
                    "device": "cpu",
                    "hosts": ["h"],
                },
            }
        )
    )
    (d / "results.jsonl").write_text(
        json.dumps(
            {
                "name": "compute.matmul",
                "status": "PASS",
                "scope": "rank",
                "node": "h",
                "rank": 0,
                "metrics": {"tflops_fp32": 1.0},
            }
        )
        + "\n"
    )


def test_a_killed_run_is_named_by_bundle_and_history_and_finalize_finalises_it(
    tmp_path: Path, monkeypatch
) -> None:
    root = tmp_path / "checkout"
    (root / "clusters").mkdir(parents=True)
    run = root / "acceptance-report" / A
    _killed_run(run)
    monkeypatch.setenv("MLENV_ROOT", str(root))
    monkeypatch.setenv("MLENV_HISTORY_DIR", str(tmp_path / "h"))
    monkeypatch.delenv("MLENV_CLUSTER", raising=False)
    r = CliRunner().invoke(app, ["bundle", str(run)])
    assert r.exit_code == 2 and f"run `mlenv finalize {run}` first" in r.stderr, r.output
    r = CliRunner().invoke(app, ["history", "local"])
    assert (
        f"note: {run}: a run that was never finalised (killed?): mlenv finalize {run}" in r.stderr
    ), r.output
    r = CliRunner().invoke(app, ["finalize", str(run)])
    assert r.exit_code == 0, r.output
    doc = json.loads((run / "results.json").read_text())
    assert doc["run_id"] == A and doc["verdict"] == "ERROR"
    assert (
        "not finalised (its processes were killed)" in doc["reasons"][0]
        and "not measured: memory.copy" in doc["reasons"][0]
    )
    assert [c["name"] for c in doc["checks"]] == ["compute.matmul"]
    assert (run / "junit.xml").is_file() and (run / "summary.md").is_file()
    line = json.loads((tmp_path / "h" / "local" / "history.jsonl").read_text())
    assert line["run_id"] == A and line["verdict"] == "ERROR"
    r = CliRunner().invoke(app, ["finalize", str(run)])
    assert r.exit_code == 2 and "already finalised" in r.stderr


def test_compare_refuses_an_interrupted_run_unless_asked(tmp_path: Path) -> None:
    """someone stopped the run, so its figures may be cut short."""
    _run_folder(tmp_path / "a", A, "PASS")
    _run_folder(tmp_path / "b", B, "INTERRUPTED")
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert r.exit_code == 2, r.output
    assert (
        f"run {B} was INTERRUPTED (someone stopped it)" in r.stderr
        and "--include-interrupted" in r.stderr
    )
    assert "regression" not in r.stdout
    r = CliRunner().invoke(
        app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--include-interrupted"]
    )
    assert r.exit_code == 0, r.output


def test_history_names_a_killed_run_under_the_folder_it_was_started_in(
    tmp_path: Path, monkeypatch
) -> None:
    """acceptance --local puts acceptance-report/<run-id>/ under the current folder, which
    need not be the checkout's root: history local looks there too."""
    root = tmp_path / "checkout"
    (root / "clusters").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    _killed_run(elsewhere / "acceptance-report" / A)
    monkeypatch.setenv("MLENV_ROOT", str(root))
    monkeypatch.chdir(elsewhere)
    r = CliRunner().invoke(app, ["history", "local", "--history-dir", str(tmp_path / "h")])
    assert r.exit_code == 0, r.output
    run = Path("acceptance-report") / A
    assert r.stderr.count("never finalised") == 1, r.stderr
    assert (
        f"note: {run}: a run that was never finalised (killed?): mlenv finalize {run}" in r.stderr
    )
