"""How the Slurm and hosts drivers take a run's verdict from its report folder."""

from __future__ import annotations

import json
from pathlib import Path

from mlenv.platforms.slurm import judge_report

WHY = "the job ended before rank 0 wrote results.json"


def test_rank_0s_results_json_is_the_verdict(tmp_path: Path) -> None:
    doc = {"run_id": "r1", "verdict": "FAIL", "reasons": ["x"], "checks": []}
    (tmp_path / "results.json").write_text(json.dumps(doc))
    assert judge_report(tmp_path, "r1", forced_error=None, fallback_why=WHY) == doc


def test_a_corrupt_results_json_is_an_error_from_results_jsonl_not_a_traceback(
    tmp_path: Path,
) -> None:
    (tmp_path / "results.json").write_text('{"verdict": "PA')  # rank 0 died while writing
    doc = judge_report(tmp_path, "r1", forced_error=None, fallback_why=WHY)
    assert doc["verdict"] == "ERROR"
    assert any(WHY in r and "0 result(s) kept from results.jsonl" in r for r in doc["reasons"]), (
        doc["reasons"]
    )


def test_a_run_ended_from_outside_overrides_what_rank_0_wrote(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(
        json.dumps({"run_id": "r1", "verdict": "PASS", "checks": []})
    )
    doc = judge_report(tmp_path, "r1", forced_error="node n2 failed (NODE_FAIL)", fallback_why=WHY)
    assert doc["verdict"] == "ERROR"
    assert any(r.startswith("node n2 failed (NODE_FAIL)") for r in doc["reasons"]), doc["reasons"]
