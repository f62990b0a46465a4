"""The verdict: baseline rules, missing metrics and peer outliers applied to the results.

Pure: results and a baseline in, updated results, verdict and reasons out. ERROR wins
over FAIL (the test could not finish, so the cluster was not judged) and is never PASS.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass, field
from typing import Any

from mlenv.acceptance.core.result import CheckResult, Status, Verdict
from mlenv.acceptance.evidence import outliers
from mlenv.acceptance.judging.baselines import Baseline, Rule

_RANK = {Status.PASS: 0, Status.SKIP: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 3}


@dataclass
class Judgement:
    """What :func:`judge` decided."""

    verdict: Verdict
    reasons: list[str]
    results: list[CheckResult]
    findings: list[outliers.Finding] = field(default_factory=list)
    expected: list[dict[str, Any]] = field(
        default_factory=list
    )  # measured vs expected, for reports


def where(r: CheckResult) -> str:
    """``rank 3 (host)``, ``node host``, ``world`` … for reasons."""
    if r.scope == "rank":
        return f"rank {r.rank} ({r.node})" if r.node else f"rank {r.rank}"
    if r.scope == "node":
        return f"node {r.node}"
    return (
        f"{r.scope} ({r.group})" if r.group and r.group != r.scope else r.scope
    )  # not "world (world)"


def _raise(r: CheckResult, status: Status, reason: str) -> None:
    if _RANK[status] > _RANK[r.status]:
        r.status = status
    if reason not in r.reasons:
        r.reasons.append(reason)


def _by_how_much(rule: Rule, x: float) -> str:
    if rule.value == 0:
        return f"off by {x - rule.value:.4g}"
    pct = 100 * abs(x - rule.value) / abs(rule.value)
    return f"{pct:.0f}% {'below' if x < rule.value else 'above'} the bar"


def apply_rules(results: list[CheckResult], baseline: Baseline) -> None:
    """Mark results FAIL where a rule does not hold or its metric is missing (in place).

    The reason says only what is wrong: the result already carries its check and
    where, and :func:`reason_line` puts them in front once.
    """
    for rule in baseline.rules:
        for r in results:
            if not rule.applies_to(r) or r.status in (Status.ERROR, Status.SKIP):
                continue
            if rule.metric in r.metrics and rule.origin:
                # Which table judged this figure (a baseline, or the per-SKU floors).
                judged = r.details.setdefault("judged_by", {})
                if isinstance(judged, dict):
                    judged.setdefault(rule.metric, []).append(
                        {"op": rule.op, "value": rule.value, "by": rule.origin}
                    )
            if rule.metric not in r.metrics:
                _raise(
                    r,
                    Status.FAIL,
                    f"metric {rule.metric} is missing "
                    f"(baseline {baseline.model} expects {rule.op} {rule.value:g})",
                )
                continue
            x = r.metrics[rule.metric]
            if not rule.holds(x):
                _raise(
                    r,
                    Status.FAIL,
                    f"{rule.metric} = {x:.4g}, expected {rule.op} "
                    f"{rule.value:g} ({_by_how_much(rule, x)}; {rule.source})",
                )


def bare_reason(r: CheckResult, reason: str) -> str:
    """``reason`` without a leading ``<check> <where>:`` / ``<check>:`` (older results carry one)."""
    for prefix in (f"{r.name} {where(r)}: ", f"{r.name}: "):
        if reason.startswith(prefix):
            return reason[len(prefix) :]
    return reason


def one_line(text: str) -> str:
    """The first line of ``text``: a multi-line exception message or stack stays in the details."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) <= 1:
        return text.strip()
    return f"{lines[0].strip()} (+{len(lines) - 1} more line(s) in results.json)"


def reason_text(r: CheckResult) -> str:
    """A result's reasons, each once, without prefixes, on one line (the console and the verdict)."""
    return "; ".join(one_line(bare_reason(r, x)) for x in r.reasons)


def reason_line(r: CheckResult) -> str:
    """``FAIL: compute.matmul rank 0 (vm): tflops_bf16 = 340.6, expected >= 700 …``: the prefix once.

    A reason that already names its check (``rank 1 (h) died during compute.matmul``,
    written by the runner) gets only the status in front.
    """
    why = reason_text(r) or "no reason given"
    if r.name in why:
        return f"{r.status.value}: {why}"
    return f"{r.status.value}: {r.name} {where(r)}: {why}"


def compare_expected(results: list[CheckResult], baseline: Baseline) -> list[dict[str, Any]]:
    """Median measured value next to each expected value (a report table, not a rule)."""
    rows: list[dict[str, Any]] = []
    for e in baseline.expected:
        vals = [r.metrics[e.metric] for r in results if e.applies_to(r) and e.metric in r.metrics]
        rows.append(
            {
                "check": e.check,
                "metric": e.metric,
                "expected": e.value,
                "source": e.source,
                "scope": e.scope,
                "when": dict(e.when),
                "measured": statistics.median(vals) if vals else None,
            }
        )
    return rows


def judge_in_place(
    rs: list[CheckResult], baseline: Baseline | None, outlier_config: dict[str, float] | None = None
) -> list[outliers.Finding]:
    """Apply rules and peer outliers to ``rs`` (in place); return every outlier finding.

    Both the live console line of one check and the final verdict come from this one
    function: rules and outliers only compare results of the same check, so judging one
    check's results as they arrive gives those results exactly the status the verdict
    over the whole run gives them.
    """
    if baseline is not None:
        apply_rules(rs, baseline)
    cfg = {**(baseline.outliers if baseline else {}), **(outlier_config or {})}
    findings = outliers.find(rs, cfg)
    for f in findings:
        if f.level == "rank":
            for r in rs:
                if r.name == f.check and r.scope == "rank" and r.rank == f.rank:
                    _raise(r, f.severity, f.short_reason())
        elif f.level in outliers.LINK_SCOPES:
            for r in rs:
                if r.name == f.check and r.scope == f.level and r.group == f.node:
                    _raise(r, f.severity, f.short_reason())
    return findings


def judge_check(
    results: list[CheckResult],
    baseline: Baseline | None = None,
    outlier_config: dict[str, float] | None = None,
) -> tuple[list[CheckResult], list[str]]:
    """One check's results as the verdict will judge them (copies), and run-level lines
    (node outliers) they add: what the live console prints."""
    rs = copy.deepcopy(results)
    findings = judge_in_place(rs, baseline, outlier_config)
    extra = [
        f"{f.severity.value}: {f.reason()}"
        for f in findings
        if f.level not in ("rank", *outliers.LINK_SCOPES)
    ]
    return rs, extra


def judge(
    results: list[CheckResult],
    baseline: Baseline | None = None,
    outlier_config: dict[str, float] | None = None,
    notes: list[str] | None = None,
    interrupted: str | None = None,
) -> Judgement:
    """Apply rules and outliers to a copy of ``results`` and decide the verdict.

    ``notes`` are run-level reasons (e.g. "rank 0 died before the end") that make the
    verdict ERROR by themselves. ``interrupted`` (a signal name, or ``scancel``): someone
    stopped the run; the verdict is INTERRUPTED whatever was measured, with what was
    found kept as reasons.
    """
    rs = copy.deepcopy(results)
    findings = judge_in_place(rs, baseline, outlier_config)
    reasons: list[str] = [one_line(n) for n in (notes or [])]
    for f in findings:
        if f.level not in ("rank", *outliers.LINK_SCOPES):
            reasons.append(f"{f.severity.value}: {f.reason()}")
    for r in rs:
        if r.status in (Status.FAIL, Status.ERROR, Status.WARN):
            reasons.append(reason_line(r))
    worst = max((_RANK[r.status] for r in rs), default=None)
    node_fail = any(f.level == "node" and f.severity == Status.FAIL for f in findings)
    if notes or worst == 3:
        verdict = Verdict.ERROR
    elif worst is None:
        verdict = Verdict.ERROR
        reasons.append("ERROR: no check produced a result")
    elif worst == 2 or node_fail:
        verdict = Verdict.FAIL
    elif all(r.status == Status.SKIP for r in rs):
        # a run that measured nothing vouches for nothing: never a PASS to sign off
        verdict = Verdict.SKIPPED
        reasons.append(f"SKIPPED: every check skipped ({len(rs)} result(s)), nothing was measured")
    else:
        verdict = Verdict.PASS
    if interrupted:
        verdict = Verdict.INTERRUPTED
        reasons.insert(
            0,
            f"INTERRUPTED: the run was stopped by {interrupted}; "
            f"{sum(1 for r in rs if r.status != Status.SKIP)} result(s) kept, not a verdict on the cluster",
        )
    # ERROR reasons first: they say why the rest may be missing.
    order = {"INTERRUPTED": -1, "ERROR": 0, "FAIL": 1, "WARN": 2, "SKIPPED": 3}
    reasons.sort(key=lambda s: order.get(s.split(":", 1)[0], -0.5))
    expected = compare_expected(rs, baseline) if baseline else []
    return Judgement(verdict, reasons, rs, findings, expected)
