"""A run in which no check measured anything is SKIPPED: never PASS, never signed off by default."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mlenv.acceptance.core.result import SCHEMA_VERSION, CheckResult, Status, Verdict
from mlenv.acceptance.judging.verdict import judge
from mlenv.cli.app import app
from mlenv.contract import exit_for_doc, exit_for_verdict

REPO = Path(__file__).resolve().parents[3]


def _skip(name: str, rank: int) -> CheckResult:
    return CheckResult(name, Status.SKIP, "rank", f"h{rank}", rank, reasons=["no DCGM here"])


def test_every_check_skipped_is_skipped_not_pass() -> None:
    j = judge([_skip("gpu.dcgm", 0), _skip("gpu.dcgm", 1)])
    assert j.verdict == Verdict.SKIPPED
    assert j.reasons == ["SKIPPED: every check skipped (2 result(s)), nothing was measured"]
    assert exit_for_verdict("SKIPPED") == 1
    assert exit_for_doc({"verdict": "SKIPPED"}) == 1
    assert SCHEMA_VERSION == 3


def test_one_measured_check_among_skips_still_passes() -> None:
    measured = CheckResult("compute.matmul", Status.PASS, "rank", "h0", 0, {"tflops_fp32": 1.0})
    assert judge([_skip("gpu.dcgm", 0), measured]).verdict == Verdict.PASS


def test_an_interrupted_run_of_skips_stays_interrupted() -> None:
    assert judge([_skip("gpu.dcgm", 0)], interrupted="SIGTERM").verdict == Verdict.INTERRUPTED


def _skipped_report(tmp_path: Path) -> Path:
    report = tmp_path / "report"
    report.mkdir()
    doc = {
        "schema_version": 3,
        "run_id": "20260101-000000-abc123",
        "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T00:01:00+00:00",
        "verdict": "SKIPPED",
        "reasons": ["SKIPPED: every check skipped (1 result(s)), nothing was measured"],
        "profile": "quick",
        "world": {"nodes": 1, "ranks": 1, "backend": "gloo", "device": "cpu", "hosts": ["h0"]},
        "checks": [_skip("gpu.dcgm", 0).to_dict()],
    }
    (report / "results.json").write_text(json.dumps(doc))
    return report


def test_a_skipped_run_gets_no_bundle_without_allow_skipped(tmp_path: Path) -> None:
    report = _skipped_report(tmp_path)
    out = tmp_path / "b.tar.gz"
    r = CliRunner().invoke(
        app, ["bundle", str(report), "--out", str(out)], env={"MLENV_ROOT": str(REPO)}
    )
    assert r.exit_code == 2, r.output
    assert "is SKIPPED (no check measured anything)" in r.stderr
    assert "--allow-skipped" in r.stderr
    assert not out.exists()
    r = CliRunner().invoke(
        app,
        ["bundle", str(report), "--out", str(out), "--allow-skipped"],
        env={"MLENV_ROOT": str(REPO)},
    )
    assert r.exit_code == 0, r.output
    assert "(SKIPPED, run 20260101-000000-abc123" in r.stdout
    assert out.is_file()
