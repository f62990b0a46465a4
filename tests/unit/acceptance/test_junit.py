"""JUnit wall time, the verdict as a testcase, timestamp and hostname."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.reports import RunMeta, finalize
from mlenv.acceptance.reports.junit import to_junit

# A 32 s run: training reports three results that each carry the check's full duration.
TRAINING = [
    CheckResult(name="training.deepspeed", status=Status.PASS, scope="world", duration_s=30.8),
    CheckResult(
        name="training.step_time",
        status=Status.PASS,
        scope="rank",
        node="vm",
        rank=0,
        duration_s=30.8,
    ),
    CheckResult(
        name="training.step_time",
        status=Status.PASS,
        scope="rank",
        node="vm",
        rank=1,
        duration_s=30.8,
    ),
]


def _suite(xml: str) -> ET.Element:
    s = ET.fromstring(xml).find("testsuite")
    assert s is not None
    return s


def test_junit_suite_time_is_wall_time_not_the_sum_of_durations() -> None:
    s = _suite(to_junit(TRAINING, "PASS", [], wall_s=32.0))
    assert s.get("time") == "32.000"
    # without a wall time the longest result stands in: never 92.4 s for a 32 s run
    assert _suite(to_junit(TRAINING, "PASS", [])).get("time") == "30.800"


def test_junit_verdict_and_reasons_are_a_testcase() -> None:
    reasons = ["FAIL: compute.matmul rank 0 (vm): tflops_bf16 = 340.6, expected >= 700", "WARN: x"]
    s = _suite(to_junit(TRAINING, "FAIL", reasons, wall_s=32.0))
    case = s.findall("testcase")[-1]
    assert (case.get("classname"), case.get("name")) == ("acceptance", "verdict")
    fail = case.find("failure")
    assert fail is not None and fail.get("message") == "verdict FAIL: " + reasons[0].removeprefix(
        "FAIL: "
    )
    assert (fail.text or "").splitlines() == reasons
    assert s.get("failures") == "1" and s.get("tests") == "4"
    err = (
        _suite(to_junit(TRAINING, "ERROR", ["ERROR: rank 1 died"]))
        .findall("testcase")[-1]
        .find("error")
    )
    assert err is not None and err.get("message") == "verdict ERROR: rank 1 died"
    ok = _suite(to_junit(TRAINING, "PASS", ["note: no baseline"])).findall("testcase")[-1]
    assert ok.find("failure") is None and ok.find("error") is None
    assert "note: no baseline" in (ok.findtext("system-out") or "")


def test_junit_finalize_writes_wall_time_timestamp_and_hostname(tmp_path: Path) -> None:
    meta = RunMeta(
        run_id="r",
        started="2026-01-01T00:00:00+00:00",
        profile="quick",
        checks=["training"],
        world={
            "nodes": 1,
            "ranks": 2,
            "backend": "gloo",
            "device": "cpu",
            "hosts": ["pod-0", "pod-0"],
        },
    )
    finalize(tmp_path, meta, TRAINING, plots=False)
    s = _suite((tmp_path / "junit.xml").read_text(encoding="utf-8"))
    assert s.get("timestamp") == "2026-01-01T00:00:00+00:00" and s.get("hostname") == "pod-0"
    # started long ago: the wall time runs from start to the report, not the summed 92.4 s
    assert float(s.get("time") or 0) > 92.4 * 1000
