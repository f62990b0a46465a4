"""PNG plots for the Markdown summary: busbw vs message size per op, TFLOPS per rank.

What is drawn is decided by pure functions (:func:`busbw_plot`, :func:`tflops_plot`,
unit-tested); the ``plot_*`` functions only hand that to matplotlib (Agg backend,
imported inside them). Made to stay readable at 512 ranks:

- busbw: one panel per op (small multiples), sizes in KiB/MiB/GiB; the world group is
  one line; intra-node and inter-node groups are one line each while there are few of
  them, else their median with a min–max band; the baseline's bar for each fabric is a
  dashed line; legends sit beside the panel, never over the data;
- TFLOPS: one bar per rank up to :data:`BARS_UP_TO` ranks, beyond that one point per
  rank (sorted by rank, hosts on a sparse axis), with the baseline's bar.

Titles name the cluster, the run and the world.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlenv.acceptance.core.result import CheckResult
from mlenv.acceptance.reports.units import human_bytes

if TYPE_CHECKING:
    from mlenv.acceptance.judging.baselines import Baseline

_SIZE_KEYS = ("size", "size_bytes", "bytes")
_BUSBW_KEYS = ("busbw_gbps", "busbw", "oop_busbw", "busbw_oop")
GROUP_LINES_UP_TO = 4  # more intra/inter groups than this: median line + min–max band
BARS_UP_TO = 32  # more ranks than this: points instead of bars
MAX_SIZE_TICKS = 10
BAR_METRIC = "busbw_gbps_large"


def _pick(row: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for k in keys:
        if k in row:
            try:
                return float(row[k])
            except (TypeError, ValueError):
                return None
    return None


def busbw_series(r: CheckResult) -> list[tuple[float, float]]:
    """(bytes, busbw GB/s) points from a collectives result's table rows.

    ``details.rows`` (dicts, as the collectives check writes them) is preferred; a list
    in ``details.table`` (dicts, or lists with ``details.columns``) also works.
    """
    if not isinstance(r.details, dict):
        return []
    table = r.details.get("rows")
    if not isinstance(table, list):
        table = r.details.get("table")
    if not isinstance(table, list):
        return []
    cols = r.details.get("columns")
    pts: list[tuple[float, float]] = []
    for row in table:
        if isinstance(row, list) and isinstance(cols, list):
            row = dict(zip(cols, row, strict=False))
        if not isinstance(row, dict):
            continue
        size, bw = _pick(row, _SIZE_KEYS), _pick(row, _BUSBW_KEYS)
        if size is not None and bw is not None and size > 0:
            pts.append((size, bw))
    return sorted(pts)


# ----------------------------------------------------------------------------- what to draw


@dataclass(frozen=True)
class Line:
    """One line of a panel; ``low``/``high`` make a band (an aggregate of several groups)."""

    label: str
    xs: list[float]
    ys: list[float]
    low: list[float] | None = None
    high: list[float] | None = None


@dataclass(frozen=True)
class Bar:
    """A baseline floor drawn as a dashed horizontal line, over ``x0``..``x1`` when given
    (the busbw bars hold for large messages only: from there to the largest size)."""

    value: float
    label: str
    x0: float | None = None
    x1: float | None = None


@dataclass
class Panel:
    """One op's axes."""

    title: str
    lines: list[Line] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)


@dataclass
class Plot:
    """Everything a figure shows, decided before matplotlib is imported."""

    title: str
    panels: list[Panel]
    xlabel: str
    ylabel: str
    xticks: list[float] = field(default_factory=list)
    xticklabels: list[str] = field(default_factory=list)
    yscale: str = (
        "linear"  # "log" where the values span orders of magnitude (busbw: B to GiB messages)
    )


def run_title(what: str, meta: dict[str, Any] | None) -> str:
    """``<what> — cluster c, run r, world: 16 ranks on 2 nodes (nccl/cuda)`` (parts that are known)."""
    meta = meta or {}
    world = meta.get("world") or {}
    parts = []
    if meta.get("cluster"):
        parts.append(f"cluster {meta['cluster']}")
    if meta.get("run_id"):
        parts.append(f"run {meta['run_id']}")
    if world.get("ranks"):
        w = f"world: {world['ranks']} ranks"
        if world.get("nodes"):
            w += f" on {world['nodes']} node(s)"
        if world.get("backend") or world.get("device"):
            w += f" ({world.get('backend') or '?'}/{world.get('device') or '?'})"
        parts.append(w)
    return f"{what}\n{', '.join(parts)}" if parts else what


def size_ticks(sizes: list[float], limit: int = MAX_SIZE_TICKS) -> tuple[list[float], list[str]]:
    """Tick positions (the measured sizes, thinned to at most ``limit``) and their KiB/MiB labels."""
    xs = sorted(set(sizes))
    if not xs:
        return [], []
    step = -(-len(xs) // limit)  # ceil
    picked = xs[::step]
    if picked[-1] != xs[-1] and len(picked) < limit:
        picked.append(xs[-1])
    return picked, [human_bytes(x) for x in picked]


def _bar_label(bar: Any, r: CheckResult) -> str:
    fabric = r.details.get("fabric") if isinstance(r.details, dict) else None
    where = ", ".join(x for x in (str(fabric) if fabric else "", r.scope) if x)
    return f"bar {bar.op} {bar.value:g} GB/s, large messages ({where})"


def _aggregate(label: str, series: list[list[tuple[float, float]]]) -> Line:
    sizes = sorted({x for s in series for x, _ in s})
    ys, lo, hi = [], [], []
    for x in sizes:
        vals = [y for s in series for sx, y in s if sx == x]
        ys.append(statistics.median(vals))
        lo.append(min(vals))
        hi.append(max(vals))
    return Line(f"{label}: median of {len(series)} groups (band: min–max)", sizes, ys, lo, hi)


def busbw_plot(
    results: list[CheckResult], baseline: Baseline | None = None, meta: dict[str, Any] | None = None
) -> Plot | None:
    """What the busbw figure shows (pure); None when no collectives result has rows."""
    from mlenv.acceptance.evidence.busbw import large_messages
    from mlenv.acceptance.judging.baselines import bar_for

    coll = [(r, busbw_series(r)) for r in results if r.name.startswith("collectives.")]
    coll = [(r, s) for r, s in coll if s]
    if not coll:
        return None
    panels: list[Panel] = []
    sizes: list[float] = []
    for name in sorted({r.name for r, _ in coll}):
        panel = Panel(name.split(".", 1)[1])
        mine = [(r, s) for r, s in coll if r.name == name]
        seen_bars: set[tuple[float, str]] = set()
        for scope in ("world", "intra", "inter"):
            group = [(r, s) for r, s in mine if r.scope == scope]
            if not group:
                continue
            if len(group) > GROUP_LINES_UP_TO:
                panel.lines.append(_aggregate(scope, [s for _, s in group]))
            else:
                for r, s in group:
                    label = (
                        scope
                        if r.group in (None, scope) or scope == "world"
                        else f"{scope}: {r.group}"
                    )
                    panel.lines.append(Line(label, [x for x, _ in s], [y for _, y in s]))
            for r, s in group:
                bar = bar_for(baseline, r, BAR_METRIC)
                if bar is not None and (bar.value, _bar_label(bar, r)) not in seen_bars:
                    seen_bars.add((bar.value, _bar_label(bar, r)))
                    backend = (
                        str(r.details.get("backend", "")) if isinstance(r.details, dict) else ""
                    )
                    large = [x for x, _ in s if large_messages(backend, int(x))] or [s[-1][0]]
                    panel.bars.append(Bar(bar.value, _bar_label(bar, r), large[0], large[-1]))
        sizes += [x for ln in panel.lines for x in ln.xs]
        panels.append(panel)
    ticks, labels = size_ticks(sizes)
    # busbw grows by about six orders of magnitude from 4 B to 1 GiB: on a linear axis every
    # small message sits on zero. Log when every value can be drawn there (all > 0).
    ys = [y for p in panels for ln in p.lines for y in ln.ys] + [
        b.value for p in panels for b in p.bars
    ]
    return Plot(
        run_title("Collectives: bus bandwidth vs message size", meta),
        panels,
        "message size",
        "busbw (GB/s)",
        ticks,
        labels,
        "log" if ys and min(ys) > 0 else "linear",
    )


@dataclass
class RankPlot:
    """What the TFLOPS figure shows: per metric, one value per rank, and the bars."""

    title: str
    ranks: list[int]
    hosts: list[str]
    values: dict[str, list[float]]
    bars: list[Bar]
    as_points: bool
    xticks: list[int]
    xticklabels: list[str]


def tflops_plot(
    results: list[CheckResult], baseline: Baseline | None = None, meta: dict[str, Any] | None = None
) -> RankPlot | None:
    """What the TFLOPS figure shows (pure); None when no matmul result has a rate."""
    from mlenv.acceptance.judging.baselines import bar_for

    rows = sorted(
        (r for r in results if r.name == "compute.matmul" and r.metrics and r.rank is not None),
        key=lambda r: r.rank or 0,
    )
    metrics = sorted({k for r in rows for k in r.metrics if k.startswith("tflops")})
    if not rows or not metrics:
        return None
    bars: list[Bar] = []
    for m in metrics:
        rule = bar_for(baseline, rows[0], m)
        if rule is not None and rule.value > 0:
            bars.append(Bar(rule.value, f"bar {m} {rule.op} {rule.value:g}"))
    ranks = [int(r.rank or 0) for r in rows]
    hosts = [r.node or "" for r in rows]
    as_points = len(rows) > BARS_UP_TO
    if as_points:  # a tick at each host's first rank, thinned to about 16
        firsts = [i for i, h in enumerate(hosts) if i == 0 or hosts[i - 1] != h]
        step = -(-len(firsts) // 16)
        idx = firsts[::step]
        xticks, xlabels = [ranks[i] for i in idx], [f"r{ranks[i]}\n{hosts[i]}" for i in idx]
    else:
        xticks, xlabels = ranks, [f"r{rk}\n{h}" for rk, h in zip(ranks, hosts, strict=True)]
    return RankPlot(
        run_title("Matmul throughput per rank", meta),
        ranks,
        hosts,
        {m: [r.metrics.get(m, 0.0) for r in rows] for m in metrics},
        bars,
        as_points,
        xticks,
        xlabels,
    )


# ----------------------------------------------------------------------------- drawing


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_BAR_STYLES = ("--", ":", "-.")


def plot_busbw(
    results: list[CheckResult],
    out: Path,
    baseline: Baseline | None = None,
    meta: dict[str, Any] | None = None,
) -> Path | None:
    """Busbw vs message size, one panel per collective; None when no data."""
    spec = busbw_plot(results, baseline, meta)
    if spec is None:
        return None
    plt = _plt()
    n = len(spec.panels)
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.6 * n + 1.0), squeeze=False)
    for ax, panel in zip(axes[:, 0], spec.panels, strict=True):
        for ln in panel.lines:
            (drawn,) = ax.plot(ln.xs, ln.ys, marker="o", markersize=3, label=ln.label)
            if ln.low is not None and ln.high is not None:
                ax.fill_between(ln.xs, ln.low, ln.high, alpha=0.2, color=drawn.get_color())
        for i, bar in enumerate(panel.bars):
            style = _BAR_STYLES[i % len(_BAR_STYLES)]
            if (
                bar.x0 is not None and bar.x1 is not None
            ):  # a little past the sizes it holds for (log axis)
                ax.hlines(
                    bar.value,
                    bar.x0 / 1.4,
                    bar.x1 * 1.4,
                    colors="black",
                    linestyles=style,
                    linewidth=1.5,
                    label=bar.label,
                )
            else:
                ax.axhline(bar.value, color="black", linestyle=style, linewidth=1, label=bar.label)
        ax.set_xscale("log", base=2)
        ax.set_yscale(spec.yscale)
        ax.set_xticks(spec.xticks)
        ax.set_xticklabels(spec.xticklabels, fontsize=8)
        ax.minorticks_off()
        ax.set_ylabel(spec.ylabel)
        ax.set_title(panel.title, fontsize=10, loc="left")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    axes[-1, 0].set_xlabel(spec.xlabel)
    fig.suptitle(spec.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return out


def plot_tflops(
    results: list[CheckResult],
    out: Path,
    baseline: Baseline | None = None,
    meta: dict[str, Any] | None = None,
) -> Path | None:
    """TFLOPS per rank (bars, or points beyond :data:`BARS_UP_TO` ranks); None when no data."""
    spec = tflops_plot(results, baseline, meta)
    if spec is None:
        return None
    plt = _plt()
    n = len(spec.ranks)
    fig, ax = plt.subplots(figsize=(min(16, max(6, n * 0.6 + 2)), 4.5))
    metrics = list(spec.values)
    if spec.as_points:
        for m in metrics:
            ax.plot(spec.ranks, spec.values[m], linestyle="none", marker=".", markersize=4, label=m)
    else:
        width = 0.8 / len(metrics)
        for j, m in enumerate(metrics):
            ax.bar(
                [rk + (j - (len(metrics) - 1) / 2) * width for rk in spec.ranks],
                spec.values[m],
                width=width,
                label=m,
            )
    for i, bar in enumerate(spec.bars):
        ax.axhline(
            bar.value,
            color="black",
            linestyle=_BAR_STYLES[i % len(_BAR_STYLES)],
            linewidth=1,
            label=bar.label,
        )
    ax.set_xticks(spec.xticks)
    ax.set_xticklabels(spec.xticklabels, fontsize=7)
    ax.set_ylabel("TFLOPS")
    ax.set_title(spec.title, fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    fig.tight_layout()
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return out
