"""Reports: JUnit structure, Markdown summary, results.jsonl partial recovery."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from mlenv.acceptance.core.result import SCHEMA_VERSION, CheckResult, Status
from mlenv.acceptance.reports import RunMeta, finalize
from mlenv.acceptance.reports.jsonl import JsonlWriter, read_partial
from mlenv.acceptance.reports.junit import to_junit
from mlenv.acceptance.reports.markdown import to_markdown

RESULTS = [
    CheckResult(
        name="compute.matmul",
        status=Status.PASS,
        scope="rank",
        node="h0",
        rank=0,
        metrics={"tflops_fp32": 0.5},
        duration_s=1.0,
    ),
    CheckResult(
        name="compute.matmul",
        status=Status.FAIL,
        scope="rank",
        node="h1",
        rank=1,
        metrics={"tflops_fp32": 0.1},
        reasons=["80% below peers"],
    ),
    CheckResult(
        name="collectives.all_reduce",
        status=Status.ERROR,
        scope="world",
        reasons=["rank 1 (h1) died"],
        details={"traceback": "Traceback ..."},
    ),
    CheckResult(
        name="collectives.all_reduce",
        status=Status.PASS,
        scope="intra",
        node="h0",
        details={
            "group": "node h0",
            "rows": [{"size": 1024, "busbw_gbps": 1.0}, {"size": 4096, "busbw_gbps": 2.0}],
        },
    ),
    CheckResult(
        name="training.deepspeed", status=Status.SKIP, scope="world", reasons=["not run: aborted"]
    ),
]


def _meta() -> RunMeta:
    return RunMeta(
        run_id="r1",
        started="2025-01-01T00:00:00+00:00",
        profile="quick",
        checks=["compute.matmul", "collectives.all_reduce", "training.deepspeed", "memory.copy"],
        world={"nodes": 2, "ranks": 2, "backend": "gloo", "device": "cpu", "hosts": ["h0", "h1"]},
    )


def test_junit_one_testcase_per_check_and_scope_with_failure_and_error() -> None:
    root = ET.fromstring(to_junit(RESULTS, "ERROR", ["ERROR: x"]))
    suite = root.find("testsuite")
    assert suite is not None
    # five results and the verdict's own testcase (an ERROR verdict counts as an error)
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("6", "1", "2", "1")
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("compute.matmul", "rank 0 @ h0"),
        ("compute.matmul", "rank 1 @ h1"),
        ("collectives.all_reduce", "world"),
        ("collectives.all_reduce", "intra node h0"),
        ("training.deepspeed", "world"),
        ("acceptance", "verdict"),
    ]
    fail = cases[1].find("failure")
    assert (
        fail is not None
        and fail.get("message") == "80% below peers"
        and "tflops_fp32 = 0.1" in (fail.text or "")
    )
    error = cases[2].find("error")
    assert (
        error is not None
        and error.get("message") == "rank 1 (h1) died"
        and error.text == "Traceback ..."
    )
    assert cases[4].find("skipped") is not None
    assert cases[0].find("failure") is None and cases[0].find("error") is None
    verdict = suite.find("properties/property[@name='verdict']")
    assert verdict is not None and verdict.get("value") == "ERROR"


def test_markdown_lists_verdict_reasons_and_every_result() -> None:
    doc = {
        "verdict": "FAIL",
        "reasons": ["FAIL: compute.matmul rank 1 (h1): 80% below peers"],
        "world": _meta().world,
        "env": {"torch": "2.13.0"},
        "run_id": "r1",
        "expected": [
            {
                "check": "memory.copy",
                "metric": "copy_gbps",
                "measured": 5.0,
                "expected": 10.0,
                "source": "spec | x",
            }
        ],
    }
    md = to_markdown(doc, RESULTS, ["busbw.png"])
    assert md.startswith("# Acceptance: FAIL\n")
    assert "- FAIL: compute.matmul rank 1 (h1): 80% below peers" in md
    assert md.count("\n| compute.matmul |") == 2
    assert "| collectives.all_reduce | intra node h0 | PASS |" in md
    assert "| memory.copy | copy_gbps | 5 | 10 | 50% | spec \\| x |" in md
    assert "![busbw.png](busbw.png)" in md


def test_jsonl_partial_recovery_keeps_results_and_is_error(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path / "results.jsonl")
    for r in RESULTS[:2]:
        w.append(r)
    w.close()
    with (tmp_path / "results.jsonl").open("a") as f:
        f.write('{"name": "collectives.all_re')  # the crash cut the last line short
    got, notes = read_partial(tmp_path / "results.jsonl")
    assert [(r.name, r.rank, r.status) for r in got] == [
        (r.name, r.rank, r.status) for r in RESULTS[:2]
    ]
    assert notes == ["results.jsonl:3: unreadable entry skipped (JSONDecodeError)"]
    doc = finalize(tmp_path, _meta(), got, notes=["rank 0 died before results.json"], plots=False)
    assert doc["verdict"] == "ERROR"
    assert doc["reasons"][0] == "rank 0 died before results.json"
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["schema_version"] == SCHEMA_VERSION and len(on_disk["checks"]) == 2
    assert (tmp_path / "junit.xml").exists() and (tmp_path / "summary.md").exists()


def test_finalize_draws_plots(tmp_path: Path) -> None:
    doc = finalize(tmp_path, _meta(), RESULTS)
    assert doc["verdict"] == "ERROR"
    for name in ("busbw.png", "tflops.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![busbw.png](busbw.png)" in (tmp_path / "summary.md").read_text()
