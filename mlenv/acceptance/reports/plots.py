"""PNG plots for the Markdown summary: busbw vs message size per op, TFLOPS per rank.

matplotlib (Agg backend) is imported only here, inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlenv.acceptance.result import CheckResult

_SIZE_KEYS = ("size", "size_bytes", "bytes")
_BUSBW_KEYS = ("busbw_gbps", "busbw", "oop_busbw", "busbw_oop")


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


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_busbw(results: list[CheckResult], out: Path) -> Path | None:
    """Busbw vs message size, one line per collective and scope; None when no data."""
    series = [(r, busbw_series(r)) for r in results if r.name.startswith("collectives.")]
    series = [(r, s) for r, s in series if s]
    if not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    for r, pts in series:
        label = r.name.split(".", 1)[1] + ("" if r.scope == "world" else f" ({r.scope})")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("Collectives: busbw vs message size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_tflops(results: list[CheckResult], out: Path) -> Path | None:
    """Bar chart of matmul TFLOPS per rank (one bar group per dtype); None when no data."""
    rows = sorted((r for r in results if r.name == "compute.matmul" and r.metrics and r.rank is not None),
                  key=lambda r: r.rank or 0)
    metrics = sorted({k for r in rows for k in r.metrics if k.startswith("tflops")})
    if not rows or not metrics:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.6 + 2), 4.5))
    width = 0.8 / len(metrics)
    for j, m in enumerate(metrics):
        xs = [i + j * width for i in range(len(rows))]
        ax.bar(xs, [r.metrics.get(m, 0.0) for r in rows], width=width, label=m)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))])
    ax.set_xticklabels([f"r{r.rank}\n{r.node or ''}" for r in rows], fontsize=8)
    ax.set_ylabel("TFLOPS")
    ax.set_title("Matmul throughput per rank")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
