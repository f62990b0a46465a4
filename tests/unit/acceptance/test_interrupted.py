"""INTERRUPTED is a verdict of its own; times, summary and plots say
what happened."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mlenv.acceptance.core.result import SCHEMA_VERSION, CheckResult, Status
from mlenv.acceptance.judging.verdict import judge
from mlenv.acceptance.records.trend import series
from mlenv.acceptance.reports import RunMeta, finalize
from mlenv.acceptance.reports.document import now_iso
from mlenv.acceptance.reports.plots import busbw_plot
from mlenv.contract import exit_for_doc, exit_for_verdict

CPU_WORLD = {"nodes": 1, "ranks": 2, "backend": "gloo", "device": "cpu", "hosts": ["h", "h"]}


def _meta(started: str | None = None) -> RunMeta:
    return RunMeta(
        run_id="20260101-000000-aaaaaa",
        started=started or now_iso(),
        profile="quick",
        checks=["compute.matmul"],
        world=CPU_WORLD,
        env={"torch": "2.13", "cuda": None, "nccl": None},
    )


def test_an_interrupted_run_is_interrupted_not_error_and_keeps_what_was_measured() -> None:
    rs = [
        CheckResult("compute.matmul", Status.PASS, "rank", "h", 0, {"tflops_fp32": 1.0}),
        CheckResult("memory.copy", Status.SKIP, "world", reasons=["not run: interrupted"]),
    ]
    j = judge(rs, None, notes=[], interrupted="SIGTERM")
    assert j.verdict.value == "INTERRUPTED"
    assert j.reasons[0] == (
        "INTERRUPTED: the run was stopped by SIGTERM; 1 result(s) kept, not a verdict on the "
        "cluster"
    )
    assert judge(rs, None).verdict.value == "PASS"


@pytest.mark.parametrize(
    ("signal_name", "code"), [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 143), ("scancel", 143)]
)
def test_interrupted_exits_130_for_sigint_and_143_for_the_others(
    tmp_path: Path, signal_name: str, code: int
) -> None:
    doc = finalize(tmp_path, _meta(), [], plots=False, interrupted=signal_name)
    assert doc["verdict"] == "INTERRUPTED" and doc["interrupted"] == {"signal": signal_name}
    assert doc["schema_version"] == SCHEMA_VERSION >= 2
    assert exit_for_doc(json.loads((tmp_path / "results.json").read_text())) == code
    assert (
        exit_for_verdict("ERROR") == 3
        and exit_for_verdict("FAIL") == 1
        and exit_for_verdict(None) == 3
    )


def test_a_version_1_document_still_reads() -> None:
    assert exit_for_doc({"schema_version": 1, "verdict": "PASS"}) == 0
    assert exit_for_doc({"schema_version": 1, "verdict": "ERROR"}) == 3


def test_trends_leave_interrupted_runs_out_unless_asked() -> None:
    recs = [
        {
            "run_id": str(i),
            "started": f"2026-01-0{i}",
            "verdict": v,
            "metrics": {"c": {"m": float(i)}},
        }
        for i, v in enumerate(("PASS", "INTERRUPTED", "FAIL"), 1)
    ]
    assert [p[0] for p in series(recs, "c", "m")] == ["1", "3"]
    assert [p[0] for p in series(recs, "c", "m", include_interrupted=True)] == ["1", "2", "3"]


def test_junit_suite_time_has_sub_second_precision_and_is_the_wall_time(tmp_path: Path) -> None:
    meta = _meta()
    time.sleep(0.3)
    finalize(
        tmp_path,
        meta,
        [CheckResult("compute.matmul", Status.PASS, "rank", "h", 0, {"tflops_fp32": 1.0})],
        plots=False,
    )
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert 0.3 <= float(suite.get("time", "0")) < 5.0, suite.get("time")


def test_summary_of_a_cpu_run_says_cpu_run_gloo(tmp_path: Path) -> None:
    finalize(tmp_path, _meta(), [], plots=False)
    text = (tmp_path / "summary.md").read_text()
    assert "CPU run, gloo" in text and "CUDA None" not in text and "NCCL None" not in text


def test_busbw_is_drawn_on_a_log_axis() -> None:
    rows = [{"size": 4 * 8**k, "busbw": 1e-4 * 10**k} for k in range(8)]
    r = CheckResult(
        "collectives.all_reduce",
        Status.PASS,
        "world",
        metrics={"busbw_gbps_large": 10.0},
        details={"group": "world", "rows": rows},
    )
    spec = busbw_plot([r])
    assert spec is not None and spec.panels
    assert spec.yscale == "log"
