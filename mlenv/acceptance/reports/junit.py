"""JUnit XML: one testcase per check and scope, so any CI shows the run check by check."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from mlenv.acceptance.result import CheckResult, Status


def testcase_name(r: CheckResult) -> str:
    """``scope`` plus where: ``rank 3 @ host``, ``node host``, ``world``, ``intra …``."""
    if r.scope == "rank":
        return f"rank {r.rank} @ {r.node}" if r.node else f"rank {r.rank}"
    if r.scope == "node":
        return f"node {r.node}"
    return f"{r.scope} {r.group}" if r.group else r.scope


def _metrics_text(r: CheckResult) -> str:
    return "\n".join(f"{k} = {v:g}" for k, v in sorted(r.metrics.items()))


def to_junit(results: list[CheckResult], verdict: str, reasons: list[str], suite: str = "mlenv-acceptance") -> str:
    """The JUnit XML document (a ``testsuites`` root with one ``testsuite``)."""
    counts = {s: sum(1 for r in results if r.status == s) for s in Status}
    total_time = sum(r.duration_s for r in results)
    root = ET.Element("testsuites", name=suite, tests=str(len(results)),
                      failures=str(counts[Status.FAIL]), errors=str(counts[Status.ERROR]),
                      skipped=str(counts[Status.SKIP]), time=f"{total_time:.3f}")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(results)),
                       failures=str(counts[Status.FAIL]), errors=str(counts[Status.ERROR]),
                       skipped=str(counts[Status.SKIP]), time=f"{total_time:.3f}")
    props = ET.SubElement(ts, "properties")
    ET.SubElement(props, "property", name="verdict", value=verdict)
    for i, reason in enumerate(reasons):
        ET.SubElement(props, "property", name=f"reason.{i}", value=reason)
    for r in results:
        attrs: dict[str, Any] = {"classname": r.name, "name": testcase_name(r), "time": f"{r.duration_s:.3f}"}
        tc = ET.SubElement(ts, "testcase", **attrs)
        msg = "; ".join(r.reasons)
        if r.status == Status.FAIL:
            ET.SubElement(tc, "failure", message=msg or "below the bar", type="FAIL").text = _metrics_text(r)
        elif r.status == Status.ERROR:
            el = ET.SubElement(tc, "error", message=msg or "check could not finish", type="ERROR")
            el.text = str(r.details.get("traceback", "")) if isinstance(r.details, dict) else ""
        elif r.status == Status.SKIP:
            ET.SubElement(tc, "skipped", message=msg or "skipped")
        out = _metrics_text(r)
        if r.status == Status.WARN:
            out = "WARN: " + msg + ("\n" + out if out else "")
        if out:
            ET.SubElement(tc, "system-out").text = out
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
