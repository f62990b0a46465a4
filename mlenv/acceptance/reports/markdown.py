"""``summary.md``: the verdict, its reasons, where it ran, and a row per check and scope."""

from __future__ import annotations

import re
import statistics
from typing import TYPE_CHECKING, Any

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.reports.junit import evidence_lines, testcase_name
from mlenv.acceptance.reports.units import hosts_text, human_bytes
from mlenv.contract import shown

if TYPE_CHECKING:
    from mlenv.acceptance.judging.baselines import Baseline

EVIDENCE_BLOCKS = 8  # results whose evidence lines summary.md shows (the rest: results.json)


def _fmt_metrics(m: dict[str, float], limit: int = 6) -> str:
    items = sorted(m.items())
    text = ", ".join(f"{k}={v:.4g}" for k, v in items[:limit])
    return text + (f", … (+{len(items) - limit})" if len(items) > limit else "")


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _accelerator(env: dict[str, Any], world: dict[str, Any]) -> str:
    """``CUDA 12.4, NCCL 2.21.5`` on GPUs; ``CPU run, gloo`` where there is no CUDA (not
    "CUDA None, NCCL None", which reads like a broken GPU stack)."""
    if not env.get("cuda") and world.get("device") != "cuda":
        return f"CPU run, {world.get('backend') or 'gloo'}"
    return f"CUDA {env.get('cuda')}, NCCL {env.get('nccl')}"


def to_markdown(
    doc: dict[str, Any],
    results: list[CheckResult],
    plots: list[str],
    baseline: Baseline | None = None,
) -> str:
    """Render the summary; ``plots`` are file names relative to the report directory;
    ``baseline`` (the one the verdict used) names the busbw bar under each collectives table."""
    world = doc.get("world", {})
    env = doc.get("env", {})
    lines = [
        f"# Acceptance: {doc['verdict']}",
        "",
        f"Run `{doc.get('run_id', '')}`, {doc.get('started', '')} → {doc.get('finished', '')}, "
        f"profile `{doc.get('profile', '')}`, baseline `{doc.get('baseline') or 'none (outliers only)'}`.",
        "",
        f"World: {world.get('nodes')} node(s), {world.get('ranks')} rank(s), backend "
        f"{world.get('backend')}, device {world.get('device')}; hosts: {hosts_text(world.get('hosts') or [])}.",
        "",
        f"Environment: torch {env.get('torch')}, {_accelerator(env, world)}, "
        f"DeepSpeed {env.get('deepspeed')}, GPUs: {', '.join(env.get('gpus', [])) or 'none'}.",
        "",
    ]
    lines += nodes_section(doc.get("node_verdicts"))
    if doc.get("reasons"):
        lines += ["## Reasons", ""] + [f"- {_cell(r)}" for r in doc["reasons"]] + [""]
    lines += [
        "## Checks",
        "",
        "| check | scope | status | metrics | reasons | time (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {_cell(testcase_name(r))} | {r.status.value} | "
            f"{_cell(_fmt_metrics(r.metrics))} | {_cell('; '.join(r.reasons))} | {r.duration_s:.2f} |"
        )
    lines.append("")
    lines += collectives_section(results, baseline)
    lines += _evidence(results)
    expected = doc.get("expected") or []
    if expected:
        lines += [
            "## Against the baseline",
            "",
            "| check | metric | measured (median) | expected | % | source |",
            "|---|---|---|---|---|---|",
        ]
        for e in expected:
            pct = (
                f"{100 * e['measured'] / e['expected']:.0f}%"
                if e.get("measured") is not None and e["expected"]
                else "—"
            )
            meas = f"{e['measured']:.4g}" if e.get("measured") is not None else "missing"
            lines.append(
                f"| {e['check']} | {e['metric']} | {meas} | {e['expected']:g} | {pct} | {_cell(e['source'])} |"
            )
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    # one rule for every output (mlenv.contract.shown): a check's reason or a host name
    # may hold ESC or bidi overrides, which a terminal showing the file would act on
    return shown("\n".join(lines), keep="\n")


def nodes_section(section: Any) -> list[str]:
    """``## Nodes``: the first table, one row per node (worst first), then slow racks and links."""
    if not isinstance(section, dict) or not section.get("nodes"):
        return []
    order = {"FAIL": 0, "WARN": 1, "UNKNOWN": 2, "PASS": 3}
    nodes = sorted(
        (n for n in section["nodes"] if isinstance(n, dict)),
        key=lambda n: order.get(str(n.get("status")), 4),
    )
    out = [
        "## Nodes",
        "",
        "| node | pods/hosts | status | severity | action | checks and figures |",
        "|---|---|---|---|---|---|",
    ]
    for n in nodes:
        act = n.get("action") or {}
        figs = "; ".join(
            f"{f.get('check')} {f.get('status')}: {f.get('figure')}"
            for f in n.get("findings", [])
            if isinstance(f, dict)
        )
        hosts = ", ".join(str(h) for h in n.get("hosts", []))
        out.append(
            f"| {_cell(str(n.get('node')))} | {_cell(hosts)} | {n.get('status')} | {n.get('severity')} | "
            f"`{act.get('id')}`: {_cell(str(act.get('text')))} | "
            f"{_cell(figs or ', '.join(n.get('checks', [])) or 'nothing measured it')} |"
        )
    for key in ("racks", "links"):  # a rack's leaf switch before single links
        rows = [x for x in section.get(key, []) if isinstance(x, dict)]
        if rows:
            out += ["", f"| {key[:-1]} | status | action | figure |", "|---|---|---|---|"]
        for x in rows:
            act = x.get("action") or {}
            out.append(
                f"| {_cell(str(x.get(key[:-1])))} | {x.get('status')} | `{act.get('id')}`: "
                f"{_cell(str(act.get('text')))} | {_cell(str(x.get('figure')))} |"
            )
    return [*out, ""]


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
        fence = "`" * max(
            3, 1 + max((len(run) for x in ev for run in re.findall(r"`+", x)), default=0)
        )
        out += [
            f"**{r.name}** {_cell(testcase_name(r))}: {r.status.value}",
            "",
            f"{fence}text",
            *ev,
            fence,
            "",
        ]
    if len(with_ev) > EVIDENCE_BLOCKS:
        out += [
            f"(+{len(with_ev) - EVIDENCE_BLOCKS} more result(s) with evidence in results.json)",
            "",
        ]
    return out


def _row_dicts(r: CheckResult) -> list[dict[str, Any]]:
    rows = r.details.get("rows") if isinstance(r.details, dict) else None
    return (
        [x for x in rows if isinstance(x, dict) and "size" in x] if isinstance(rows, list) else []
    )


def _variant_cells(m: Any) -> list[str]:
    if not isinstance(m, dict):
        return ["N/A"] * 4
    return [
        f"{m.get('time_us', 0):.1f}",
        f"{m.get('algbw_gbps', 0):.3g}",
        f"{m.get('busbw_gbps', 0):.3g}",
        str(m.get("wrong", 0)),
    ]


def size_table(r: CheckResult) -> list[str]:
    """The per-size table of one collectives result, nccl-tests' columns, sizes in KiB/MiB."""
    rows = _row_dicts(r)
    if not rows:
        return []
    out = [
        "| size | count | out-of-place time (us) | algbw (GB/s) | busbw (GB/s) | #wrong "
        "| in-place time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in rows:
        oop, ip = x.get("out_of_place"), x.get("in_place")
        if oop is None and ip is None:  # a row with its headline variant only
            head = {k: x.get(k) for k in ("time_us", "algbw_gbps", "busbw_gbps", "wrong")}
            oop, ip = (None, head) if x.get("variant") == "in-place" else (head, None)
        out.append(
            f"| {human_bytes(float(x['size']))} | {x.get('count', '')} | "
            + " | ".join(_variant_cells(oop) + _variant_cells(ip))
            + " |"
        )
    return out


def collectives_section(results: list[CheckResult], baseline: Baseline | None = None) -> list[str]:
    """``## Collectives``: per op, the world group's per-size table with nccl-tests' footer
    figures and the bar it is held to; intra/inter groups as one line each of min/median/max
    busbw over the groups (64 nodes make 64 intra groups per op: no table each)."""
    from mlenv.acceptance.judging.baselines import bar_for

    coll = [r for r in results if r.name.startswith("collectives.") and _row_dicts(r)]
    if not coll:
        return []
    out = ["## Collectives", ""]
    for name in sorted({r.name for r in coll}):
        mine = [r for r in coll if r.name == name]
        for r in (x for x in mine if x.scope == "world"):
            d = r.details
            fabric = f", fabric {d['fabric']}" if d.get("fabric") else ""
            out += [
                f"### {name} (world, {len(d.get('ranks') or [])} ranks{fabric}): {r.status.value}",
                "",
            ]
            out += size_table(r)
            foot = []
            if "busbw_gbps_avg" in r.metrics:
                foot.append(f"Avg bus bandwidth: {r.metrics['busbw_gbps_avg']:.4g} GB/s")
            if "wrong_elements" in r.metrics:
                wrong = r.metrics["wrong_elements"] + r.metrics.get("wrong_elements_in_place", 0.0)
                foot.append(f"out of bounds values: {wrong:g} {'OK' if wrong == 0 else 'FAILED'}")
            bar = bar_for(baseline, r, "busbw_gbps_large")
            if bar is not None:
                src = bar.source if len(bar.source) <= 100 else bar.source[:99] + "…"
                foot.append(
                    f"bar: busbw_gbps_large {bar.op} {bar.value:g} GB/s at the largest size ({_cell(src)})"
                )
            elif d.get("fabric"):
                foot.append("no busbw bar for this fabric and sweep (reported only)")
            out += ["", "; ".join(foot) + ".", ""] if foot else [""]
        for scope in ("intra", "inter"):
            groups = [r for r in mine if r.scope == scope and "busbw_gbps_large" in r.metrics]
            if not groups:
                continue
            vals = sorted(r.metrics["busbw_gbps_large"] for r in groups)
            worst = min(groups, key=lambda r: r.metrics["busbw_gbps_large"])
            bar = bar_for(baseline, worst, "busbw_gbps_large")
            below = [
                r
                for r in groups
                if bar is not None and not bar.holds(r.metrics["busbw_gbps_large"])
            ]
            text = (
                f"- {name} {scope}: {len(groups)} group(s), busbw at the largest size min "
                f"{vals[0]:.4g} / median {statistics.median(vals):.4g} / max {vals[-1]:.4g} GB/s; "
                f"lowest: {_cell(worst.group or '?')}"
            )
            if bar is not None:
                text += f"; bar {bar.op} {bar.value:g}: {len(below)} below"
            out.append(text)
        if any(r.scope in ("intra", "inter") for r in mine):
            out.append("")
    return out
