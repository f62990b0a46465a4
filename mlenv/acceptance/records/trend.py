"""Trend PNGs: one headline metric over a cluster's run history, linked from summary.md.

One file per headline metric (``trend-<check>-<metric>.png``): the median over ranks of
each run, in start order, the point's colour its verdict, this run's point ringed. A
metric with one run so far gets no plot: one point is not a trend, and drawing the
suite's dozen or so of them cost rank 0 about 1.3 s before it could exit (the 2-core
sandbox, docs/benchmarks.md), on every first run of a cluster and every test run.
matplotlib (Agg backend) is imported only inside :func:`plot_trends`, and only when
there is something to draw.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

TREND_PREFIX = "trend-"
TRENDS_HEADING = "\n## Trends on cluster "
MAX_RUNS = 50  # the newest runs a plot shows; older ones stay in history.jsonl
MIN_RUNS = 2  # a metric is plotted once this many runs hold it
_COLOURS = {"PASS": "tab:green", "FAIL": "tab:red", "ERROR": "tab:orange"}


def trend_file(check: str, metric: str) -> str:
    """``trend-compute.matmul-tflops_fp32.png`` (anything odd in a name becomes ``_``)."""
    return TREND_PREFIX + re.sub(r"[^A-Za-z0-9._-]+", "_", f"{check}-{metric}") + ".png"


def series(
    records: list[dict[str, Any]],
    check: str,
    metric: str,
    include_interrupted: bool = False,
    gpu: str | None = None,
) -> list[tuple[str, str, float, str]]:
    """(run id, started, value, verdict) of every record holding ``check``/``metric``, oldest first.

    INTERRUPTED runs are left out unless ``include_interrupted``: someone stopped them, so
    their figures may be cut short and say nothing about the cluster's trend. ``gpu``: that
    GPU's own figure (the line's ``gpus``, keyed by UUID) instead of the run's median."""
    pts: list[tuple[str, str, float, str]] = []
    for rec in sorted(records, key=lambda r: str(r.get("started") or "")):
        if rec.get("verdict") == "INTERRUPTED" and not include_interrupted:
            continue
        m = rec.get("metrics")
        if gpu is not None:
            g = rec.get("gpus")
            one = g.get(gpu) if isinstance(g, dict) else None
            m = one.get("metrics") if isinstance(one, dict) else None
        v = (
            m.get(check, {}).get(metric)
            if isinstance(m, dict) and isinstance(m.get(check), dict)
            else None
        )
        if isinstance(v, int | float) and not isinstance(v, bool):
            pts.append(
                (
                    str(rec.get("run_id")),
                    str(rec.get("started") or ""),
                    float(v),
                    str(rec.get("verdict")),
                )
            )
    return pts[-MAX_RUNS:]


def plot_trends(
    records: list[dict[str, Any]], current: dict[str, Any], out_dir: Path, cluster: str
) -> list[str]:
    """Draw a trend PNG per headline metric of ``current`` (a history line) that at least
    ``MIN_RUNS`` runs hold; returns the file names."""
    metrics = current.get("metrics") if isinstance(current.get("metrics"), dict) else {}
    todo = [
        (check, metric, pts)
        for check, ms in sorted((metrics or {}).items())
        if isinstance(ms, dict)
        for metric in sorted(ms)
        if len(pts := series(records, check, metric)) >= MIN_RUNS
    ]
    gpus = current.get("gpus") if isinstance(current.get("gpus"), dict) else {}
    per_gpu: list[tuple[str, str, dict[str, list[tuple[str, str, float, str]]]]] = []
    for check, metric, _ in todo:
        lines = {u: series(records, check, metric, gpu=u) for u in sorted(gpus or {})}
        lines = {u: pts for u, pts in lines.items() if len(pts) >= MIN_RUNS}
        if lines:
            per_gpu.append((check, metric, lines))
    if not todo:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[str] = []
    for check, metric, pts in todo:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        xs = list(range(1, len(pts) + 1))
        ax.plot(xs, [p[2] for p in pts], color="0.6", linewidth=1, zorder=1)
        ax.scatter(
            xs, [p[2] for p in pts], c=[_COLOURS.get(p[3], "tab:gray") for p in pts], zorder=2
        )
        for x, p in zip(xs, pts, strict=True):
            if p[0] == current.get("run_id"):
                ax.scatter([x], [p[2]], s=160, facecolors="none", edgecolors="black", zorder=3)
        ax.set_xticks(xs)
        ax.set_xticklabels([p[1][5:16].replace("T", "\n") for p in pts], fontsize=7)
        ax.set_ylabel(metric)
        ax.set_title(
            f"{check} {metric} on {cluster} (median over ranks; green PASS, red FAIL)", fontsize=9
        )
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        name = trend_file(check, metric)
        fig.savefig(out_dir / name, dpi=90)
        plt.close(fig)
        made.append(name)
    for check, metric, lines in per_gpu:
        # one line per GPU, keyed by UUID: a GPU that moved to another index or node is
        # still one line, and the one that lost ground is named in the legend
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for u, pts in lines.items():
            ax.plot([p[1][:16] for p in pts], [p[2] for p in pts], marker="o", label=u[:12])
        ax.set_ylabel(metric)
        ax.set_title(f"{check} {metric} on {cluster}, per GPU (by UUID)", fontsize=9)
        ax.tick_params(axis="x", labelsize=7, rotation=30)
        if len(lines) <= 16:
            ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        name = trend_file(f"gpus-{check}", metric)
        fig.savefig(out_dir / name, dpi=90)
        plt.close(fig)
        made.append(name)
    return made


def summary_section(cluster: str, history_file: Path, files: list[str], runs: int) -> str:
    """The Markdown appended to summary.md: where the history is, and each trend PNG."""
    lines = [
        f"{TRENDS_HEADING}`{cluster}`",
        "",
        f"{runs} run(s) in `{history_file}`; `mlenv history {cluster}` lists them, "
        "`mlenv compare RUN_A RUN_B` compares two.",
        "",
    ]
    if not files:  # plot_trends draws a metric from its MIN_RUNS-th run on
        lines.append("No trend plot yet: a metric is plotted from its second run on.")
    lines += [f"![{f}]({f})" for f in files]
    return "\n".join(lines) + "\n"
