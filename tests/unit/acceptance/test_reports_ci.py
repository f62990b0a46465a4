"""Reports CI pages show: summary.md's collectives tables, host lists, JUnit names,
the console's list of report files."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence.busbw import Measured, Row, format_nccl_tests, summarize
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.reports import RunMeta, console, finalize
from mlenv.acceptance.reports.junit import testcase_name as case_name
from mlenv.acceptance.reports.junit import to_junit
from mlenv.acceptance.reports.markdown import collectives_section, to_markdown
from mlenv.acceptance.reports.units import hosts_text


def _ag(
    scope: str = "world", group: str = "world", peak: float = 0.5, fabric: str = "gloo"
) -> CheckResult:
    rows = [
        Row.of(
            s,
            s // 4,
            "float",
            "none",
            -1,
            Measured(s / peak / 1e3, peak, peak / 2, 0),
            Measured(s / peak / 1e3, peak, peak / 2, 0),
        )
        for s in (1024, 4 * 2**20)
    ]
    return CheckResult(
        name="collectives.all_gather",
        status=Status.PASS,
        scope=scope,
        metrics=summarize(rows),
        details={
            "group": group,
            "ranks": [0, 1],
            "rows": [asdict(r) for r in rows],
            "nccl_tests": format_nccl_tests(rows),
            "fabric": fabric,
            "large_messages": True,
        },
    )


def _ar_headline_only() -> CheckResult:
    """An all_reduce result as an older run wrote it: headline fields only, no variants."""
    return CheckResult(
        name="collectives.all_reduce",
        status=Status.PASS,
        scope="world",
        metrics={"busbw_gbps_large": 1.0, "wrong_elements": 0.0},
        details={
            "group": "world",
            "ranks": [0, 1],
            "rows": [
                {
                    "size": 65536,
                    "count": 16384,
                    "time_us": 65.5,
                    "algbw_gbps": 1.0,
                    "busbw_gbps": 1.0,
                    "wrong": 0,
                }
            ],
        },
    )


def test_summary_has_the_per_size_table_with_both_variants_footer_and_bar() -> None:
    md = "\n".join(
        collectives_section([_ag(), _ar_headline_only()], baselines.find_for_device(["cpu"]))
    )
    assert "## Collectives" in md
    assert "### collectives.all_gather (world, 2 ranks, fabric gloo): PASS" in md
    assert (
        "| size | count | out-of-place time (us) | algbw (GB/s) | busbw (GB/s) | #wrong "
        "| in-place time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |"
    ) in md
    assert "| 1 KiB | 256 | 2.0 | 0.5 | 0.25 | 0 | 2.0 | 0.5 | 0.25 | 0 |" in md
    assert "| 4 MiB | 1048576 |" in md
    assert (
        "Avg bus bandwidth: 0.25 GB/s; out of bounds values: 0 OK; bar: busbw_gbps_large >= 0.01 GB/s at the largest size"
        in md
    )
    # a headline-only row fills the out-of-place columns and says N/A for the other
    assert "| 64 KiB | 16384 | 65.5 | 1 | 1 | 0 | N/A | N/A | N/A | N/A |" in md
    assert (
        collectives_section([CheckResult(name="compute.matmul", status=Status.PASS, scope="rank")])
        == []
    )


def test_summary_aggregates_many_groups_into_one_line_with_the_lowest_named() -> None:
    groups = [_ag("intra", f"node {i} (h{i})", 0.04 if i == 5 else 0.5) for i in range(64)]
    md = "\n".join(collectives_section([_ag(), *groups], baselines.find_for_device(["cpu"])))
    (line,) = [ln for ln in md.splitlines() if ln.startswith("- collectives.all_gather intra")]
    assert line == (
        "- collectives.all_gather intra: 64 group(s), busbw at the largest size min 0.02 / median 0.25 "
        "/ max 0.25 GB/s; lowest: node 5 (h5); bar >= 0.01: 0 below"
    )
    assert md.count("### ") == 1  # one table (the world), not 65


def test_hosts_are_counted_not_repeated() -> None:
    assert hosts_text(["vm", "vm"]) == "vm ×2"
    assert hosts_text(["a", "b", "a"]) == "a ×2, b"
    assert hosts_text([]) == "none"
    many = [f"h{i}" for i in range(64) for _ in range(8)]
    assert hosts_text(many) == ", ".join(f"h{i} ×8" for i in range(8)) + ", … (+56 more hosts)"
    doc = {
        "verdict": "PASS",
        "reasons": [],
        "env": {},
        "world": {
            "nodes": 1,
            "ranks": 2,
            "backend": "gloo",
            "device": "cpu",
            "hosts": ["vm", "vm"],
        },
    }
    assert "hosts: vm ×2." in to_markdown(doc, [], [])


def test_junit_names_a_world_result_once() -> None:
    assert case_name(_ag()) == "world"
    assert case_name(_ag("intra", "node 0 (h0)")) == "intra node 0 (h0)"
    root = ET.fromstring(to_junit([_ag()], "PASS", []))
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == ["world", "verdict"] and not any("world world" in (n or "") for n in names)
    line = console.check_line(_ag())
    assert "world (world)" not in line and " world " in line


def test_junit_suite_has_wall_time_timestamp_hostname_and_the_verdict_case() -> None:
    """The JUnit items, verified: wall time (not the sum), timestamp, hostname, verdict testcase."""
    rs = [_ag(), _ar_headline_only()]
    rs[0].duration_s, rs[1].duration_s = 20.0, 30.0
    root = ET.fromstring(
        to_junit(
            rs,
            "FAIL",
            ["FAIL: x"],
            wall_s=32.0,
            timestamp="2026-11-24T00:00:00+00:00",
            hostname="pod-0",
        )
    )
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("time"), suite.get("timestamp"), suite.get("hostname")) == (
        "32.000",
        "2026-11-24T00:00:00+00:00",
        "pod-0",
    )
    verdict = [c for c in suite.findall("testcase") if c.get("name") == "verdict"]
    assert len(verdict) == 1 and verdict[0].find("failure") is not None


def test_console_lists_the_report_files_that_exist_pngs_included(tmp_path: Path) -> None:
    meta = RunMeta(
        run_id="r",
        started="2026-11-24T00:00:00+00:00",
        profile="quick",
        checks=["collectives"],
        world={"nodes": 1, "ranks": 2, "backend": "gloo", "device": "cpu", "hosts": ["vm", "vm"]},
    )
    (tmp_path / "results.jsonl").write_text("", encoding="utf-8")
    doc = finalize(tmp_path, meta, [_ag()], baseline=baselines.find_for_device(["cpu"]))
    block = console.verdict_block(doc, str(tmp_path))
    lines = block.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("reports: "))
    assert all(len(ln) <= 100 for ln in lines)
    assert " ".join(ln.strip() for ln in lines[start:]) == (
        f"reports: {tmp_path}/ (results.json, results.jsonl, junit.xml, summary.md, busbw.png)"
    )
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert (
        "hosts: vm ×2." in summary
        and "![busbw.png](busbw.png)" in summary
        and "## Collectives" in summary
    )
    # a folder on another machine (a pod's): the fixed list
    assert console.report_files(str(tmp_path / "absent")) == [
        "results.json",
        "results.jsonl",
        "junit.xml",
        "summary.md",
    ]
