"""Every stop is recorded: a run killed before rank 0 wrote run.json is finalised and
recorded, and finalize is idempotent by run id (a copy of a run's folder finalised again
adds no second record, after which history would refuse the cluster for ever)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from mlenv.acceptance.records import history, rundir
from mlenv.cli.app import app

A = "20260101-000000-aaaaaa"


def _killed_before_run_json(d: Path) -> None:
    """What SIGKILL leaves in the first seconds: the claim's lock (a dead pid) and the log."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    d.mkdir(parents=True)
    (d / rundir.LOCK_FILE).write_text(f"{dead.pid} {A}\n")
    (d / "launcher.log").write_text("00:00:00 launcher: deepspeed ...\n")


def test_a_run_killed_before_run_json_is_finalised_and_recorded_once(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("MLENV_CLUSTER", raising=False)
    run = tmp_path / "r"  # not named for the run: the lock names it
    _killed_before_run_json(run)
    copy = tmp_path / "copy-of-r"
    shutil.copytree(run, copy)
    h = tmp_path / "h"
    r = CliRunner().invoke(app, ["finalize", str(run), "--history-dir", str(h)])
    assert r.exit_code == 0, r.output
    doc = json.loads((run / "results.json").read_text())
    assert doc["run_id"] == A and doc["verdict"] == "ERROR"
    assert doc["reasons"][0].startswith("the run was not finalised (its processes were killed)")
    assert not (run / rundir.LOCK_FILE).exists()
    lines = (h / "local" / history.HISTORY_FILE).read_text().splitlines()
    assert [json.loads(x)["run_id"] for x in lines] == [A]
    # the copy is the same run: finalised, but not recorded a second time
    r = CliRunner().invoke(app, ["finalize", str(copy), "--history-dir", str(h)])
    assert r.exit_code == 0, r.output
    assert (
        f"history: run {A} is already in {h / 'local' / history.HISTORY_FILE}: not added twice"
        in r.stderr
    )
    assert (h / "local" / history.HISTORY_FILE).read_text().splitlines() == lines
    r = CliRunner().invoke(app, ["history", "local", "--history-dir", str(h)])
    assert r.exit_code == 0 and A in r.stdout, r.output


def test_a_run_stopped_before_run_json_is_finalised_as_interrupted(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("MLENV_CLUSTER", raising=False)
    run = tmp_path / A
    _killed_before_run_json(run)
    rundir.mark_interrupted(run, "SIGTERM")  # the CLI had been asked to stop, then was killed
    r = CliRunner().invoke(app, ["finalize", str(run), "--history-dir", str(tmp_path / "h")])
    assert r.exit_code == 0, r.output
    doc = json.loads((run / "results.json").read_text())
    assert doc["verdict"] == "INTERRUPTED" and doc["interrupted"] == {"signal": "SIGTERM"}


def test_a_folder_with_nothing_of_a_run_is_still_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    r = CliRunner().invoke(app, ["finalize", str(tmp_path), "--history-dir", str(tmp_path / "h")])
    assert r.exit_code == 2
    assert (
        "not a run's report folder (no run.json, results.jsonl, .mlenv-run.lock or launcher.log)"
        in r.stderr
    )
