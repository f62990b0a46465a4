"""JUnit XML: one testcase per check and scope, so any CI shows the run check by check.

The verdict itself is a testcase too (``acceptance`` / ``verdict``, failing or erroring
with its reasons): CI pages show testcases and hide ``<properties>``. The suite's
``time`` is the run's wall time (checks overlap across ranks and the training check
has several results, so summing durations over-counts), with ``timestamp`` and
``hostname`` as the JUnit schema has them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.contract import shown


def testcase_name(r: CheckResult) -> str:
    """``scope`` plus where: ``rank 3 @ host``, ``node host``, ``world``, ``intra …``."""
    if r.scope == "rank":
        return f"rank {r.rank} @ {r.node}" if r.node else f"rank {r.rank}"
    if r.scope == "node":
        return f"node {r.node}"
    # the world group is labelled "world": "world", not "world world"
    return f"{r.scope} {r.group}" if r.group and r.group != r.scope else r.scope


def _metrics_text(r: CheckResult) -> str:
    return "\n".join(f"{k} = {v:g}" for k, v in sorted(r.metrics.items()))


def evidence_lines(r: CheckResult) -> list[str]:
    """``details.evidence`` (a list of lines) of a result, or []."""
    ev = r.details.get("evidence") if isinstance(r.details, dict) else None
    return [str(x) for x in ev] if isinstance(ev, list) else []


VERDICT_CLASS = "acceptance"
VERDICT_NAME = "verdict"


def to_junit(
    results: list[CheckResult],
    verdict: str,
    reasons: list[str],
    suite: str = "mlenv-acceptance",
    wall_s: float | None = None,
    timestamp: str | None = None,
    hostname: str | None = None,
    nodes: dict[str, Any] | None = None,
) -> str:
    """The JUnit XML document (a ``testsuites`` root with one ``testsuite``).

    ``wall_s`` is the run's wall time (start to report); without it the longest
    check duration stands in, never the sum. ``nodes`` (results.json's ``node_verdicts``)
    adds one testcase per node (classname ``node``): FAIL fails, UNKNOWN is skipped
    (nothing measured it), WARN passes with its findings in ``system-out``.
    """
    node_list = [n for n in (nodes or {}).get("nodes", []) if isinstance(n, dict)]
    counts = {s: sum(1 for r in results if r.status == s) for s in Status}
    failures = (
        counts[Status.FAIL]
        + (verdict == "FAIL")
        + sum(1 for n in node_list if n.get("status") == "FAIL")
    )
    errors = counts[Status.ERROR] + (verdict not in ("PASS", "FAIL"))
    skipped = counts[Status.SKIP] + sum(1 for n in node_list if n.get("status") == "UNKNOWN")
    total_time = wall_s if wall_s is not None else max((r.duration_s for r in results), default=0.0)
    tests = str(len(results) + len(node_list) + 1)
    common = {
        "tests": tests,
        "failures": str(failures),
        "errors": str(errors),
        "skipped": str(skipped),
        "time": f"{total_time:.3f}",
    }
    root = ET.Element("testsuites", {"name": suite, **common})
    suite_attrs = {"name": suite, **common}
    if timestamp:
        suite_attrs["timestamp"] = timestamp
    if hostname:
        suite_attrs["hostname"] = hostname
    ts = ET.SubElement(root, "testsuite", suite_attrs)
    props = ET.SubElement(ts, "properties")
    ET.SubElement(props, "property", name="verdict", value=verdict)
    for i, reason in enumerate(reasons):
        ET.SubElement(props, "property", name=f"reason.{i}", value=reason)
    for r in results:
        attrs: dict[str, Any] = {
            "classname": r.name,
            "name": testcase_name(r),
            "time": f"{r.duration_s:.3f}",
        }
        tc = ET.SubElement(ts, "testcase", **attrs)
        msg = "; ".join(r.reasons)
        if r.status == Status.FAIL:
            ET.SubElement(
                tc, "failure", message=msg or "below the bar", type="FAIL"
            ).text = _metrics_text(r)
        elif r.status == Status.ERROR:
            el = ET.SubElement(tc, "error", message=msg or "check could not finish", type="ERROR")
            el.text = str(r.details.get("traceback", "")) if isinstance(r.details, dict) else ""
        elif r.status == Status.SKIP:
            ET.SubElement(tc, "skipped", message=msg or "skipped")
        out = _metrics_text(r)
        if r.status == Status.WARN:
            out = "WARN: " + msg + ("\n" + out if out else "")
        evidence = evidence_lines(r)
        if evidence:  # the lines a tool printed that the status rests on (fabric.transport: NCCL's)
            head = msg if r.status == Status.PASS and msg else ""
            out = "\n".join(x for x in (head, out, "evidence:", *evidence) if x)
        if out:
            ET.SubElement(tc, "system-out").text = out
    for n in node_list:
        _node_case(ts, n)
    _verdict_case(ts, verdict, reasons, total_time)
    ET.indent(root)
    # ElementTree writes control characters as they are, and most are not allowed in XML
    # at all: the one rule for every output (mlenv.contract.shown) makes each visible as
    # its escape (\x1b), which also keeps the file valid XML for every CI reader
    xml = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + shown(xml, keep="\n\t") + "\n"


NODE_CLASS = "node"


def node_case_name(n: dict[str, Any]) -> str:
    """``worker-3 (ml-dev-env-1)``: the node, with its pods/hosts when they differ."""
    node = str(n.get("node"))
    others = [str(h) for h in n.get("hosts", []) if str(h) != node]
    return f"{node} ({', '.join(others)})" if others else node


def _node_case(ts: ET.Element, n: dict[str, Any]) -> None:
    tc = ET.SubElement(ts, "testcase", classname=NODE_CLASS, name=node_case_name(n), time="0.000")
    act = n.get("action") or {}
    figures = [
        f"{f.get('status')}: {f.get('check')}: {f.get('figure')}"
        for f in n.get("findings", [])
        if isinstance(f, dict)
    ]
    head = f"{n.get('status')} ({n.get('severity')}): {act.get('id')}: {act.get('text')}"
    if n.get("status") == "FAIL":
        ET.SubElement(tc, "failure", message=head, type="FAIL").text = "\n".join(figures)
    elif n.get("status") == "UNKNOWN":
        ET.SubElement(tc, "skipped", message=head)
    ET.SubElement(tc, "system-out").text = "\n".join([head, *figures])


def _verdict_case(ts: ET.Element, verdict: str, reasons: list[str], wall_s: float) -> None:
    """The verdict as the suite's last testcase, failing (FAIL) or erroring (ERROR) with its reasons."""
    tc = ET.SubElement(
        ts, "testcase", classname=VERDICT_CLASS, name=VERDICT_NAME, time=f"{wall_s:.3f}"
    )
    text = "\n".join(reasons)
    first = (reasons[0] if reasons else "").removeprefix(
        f"{verdict}: "
    )  # "verdict FAIL: …", not "FAIL: FAIL: …"
    if verdict == "FAIL":
        ET.SubElement(
            tc,
            "failure",
            message=f"verdict FAIL: {first}" if first else "verdict FAIL",
            type="FAIL",
        ).text = text
    elif verdict != "PASS":
        ET.SubElement(
            tc,
            "error",
            message=f"verdict {verdict}: {first}" if first else f"verdict {verdict}",
            type=verdict,
        ).text = text
    ET.SubElement(tc, "system-out").text = f"verdict: {verdict}" + (f"\n{text}" if text else "")
