"""``summary.md``: the verdict, its reasons, where it ran, and a row per check and scope."""

from __future__ import annotations

import re
from typing import Any

from mlenv.acceptance.reports.junit import evidence_lines, testcase_name
from mlenv.acceptance.result import CheckResult, Status

EVIDENCE_BLOCKS = 8  # results whose evidence lines summary.md shows (the rest: results.json)


def _fmt_metrics(m: dict[str, float], limit: int = 6) -> str:
    items = sorted(m.items())
    text = ", ".join(f"{k}={v:.4g}" for k, v in items[:limit])
    return text + (f", … (+{len(items) - limit})" if len(items) > limit else "")


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: dict[str, Any], results: list[CheckResult], plots: list[str]) -> str:
    """Render the summary; ``plots`` are file names relative to the report directory."""
    world = doc.get("world", {})
    env = doc.get("env", {})
    lines = [
        f"# Acceptance: {doc['verdict']}",
        "",
        f"Run `{doc.get('run_id', '')}`, {doc.get('started', '')} → {doc.get('finished', '')}, "
        f"profile `{doc.get('profile', '')}`, baseline `{doc.get('baseline') or 'none (outliers only)'}`.",
        "",
        f"World: {world.get('nodes')} node(s), {world.get('ranks')} rank(s), backend "
        f"{world.get('backend')}, device {world.get('device')}; hosts: {', '.join(world.get('hosts', []))}.",
        "",
        f"Environment: torch {env.get('torch')}, CUDA {env.get('cuda')}, NCCL {env.get('nccl')}, "
        f"DeepSpeed {env.get('deepspeed')}, GPUs: {', '.join(env.get('gpus', [])) or 'none'}.",
        "",
    ]
    if doc.get("reasons"):
        lines += ["## Reasons", ""] + [f"- {_cell(r)}" for r in doc["reasons"]] + [""]
    lines += ["## Checks", "", "| check | scope | status | metrics | reasons | time (s) |",
              "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.name} | {_cell(testcase_name(r))} | {r.status.value} | "
                     f"{_cell(_fmt_metrics(r.metrics))} | {_cell('; '.join(r.reasons))} | {r.duration_s:.2f} |")
    lines.append("")
    lines += _evidence(results)
    expected = doc.get("expected") or []
    if expected:
        lines += ["## Against the baseline", "", "| check | metric | measured (median) | expected | % | source |",
                  "|---|---|---|---|---|---|"]
        for e in expected:
            pct = f"{100 * e['measured'] / e['expected']:.0f}%" if e.get("measured") is not None and e["expected"] else "—"
            meas = f"{e['measured']:.4g}" if e.get("measured") is not None else "missing"
            lines.append(f"| {e['check']} | {e['metric']} | {meas} | {e['expected']:g} | {pct} | {_cell(e['source'])} |")
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def _evidence(results: list[CheckResult]) -> list[str]:
    """``## Evidence``: the lines a result rests on (``details.evidence``), worst results first."""
    with_ev = [r for r in results if evidence_lines(r)]
    if not with_ev:
        return []
    order = {Status.ERROR: 0, Status.FAIL: 1, Status.WARN: 2}
    with_ev.sort(key=lambda r: order.get(r.status, 3))
    out = ["## Evidence", ""]
    for r in with_ev[:EVIDENCE_BLOCKS]:
        ev = evidence_lines(r)
        fence = "`" * max(3, 1 + max((len(run) for x in ev for run in re.findall(r"`+", x)), default=0))
        out += [f"**{r.name}** {_cell(testcase_name(r))}: {r.status.value}", "", f"{fence}text", *ev, fence, ""]
    if len(with_ev) > EVIDENCE_BLOCKS:
        out += [f"(+{len(with_ev) - EVIDENCE_BLOCKS} more result(s) with evidence in results.json)", ""]
    return out
