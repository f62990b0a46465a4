"""Pure arithmetic of the collectives check: nccl-tests formulas, size sweep, table.

Conventions follow nccl-tests (``doc/PERFORMANCE.md`` there): ``size`` is the bytes of
the largest buffer of the operation (the gathered output of all_gather, the full input
of reduce_scatter, the whole per-rank buffer of all_reduce / all_to_all / broadcast);
``algbw = size / time``; ``busbw = algbw × factor`` where the factor makes the figure
comparable with the hardware's link bandwidth:

==============  ================
operation       factor
==============  ================
all_reduce      2 (n − 1) / n
all_gather      (n − 1) / n
reduce_scatter  (n − 1) / n
all_to_all      (n − 1) / n
broadcast       1
==============  ================

GB/s here is 10⁹ bytes per second, as in nccl-tests. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")

# Ops whose buffer is split into one chunk per rank: their element count must divide by n.
_CHUNKED = frozenset({"all_gather", "reduce_scatter", "all_to_all"})
# nccl-tests prints the reduction op for reducing collectives and "none" otherwise.
_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}


def bus_factor(op: str, nranks: int) -> float:
    """The nccl-tests bus-bandwidth factor of ``op`` on ``nranks`` ranks.

    Raises ValueError for an unknown op or fewer than one rank.
    """
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    n = float(nranks)
    if op == "all_reduce":
        return 2.0 * (n - 1.0) / n
    if op in _CHUNKED:
        return (n - 1.0) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r} (expected one of: {', '.join(OPS)})")


@dataclass(frozen=True)
class Bandwidth:
    """Algorithm and bus bandwidth of one measurement, in GB/s (10⁹ B/s)."""

    algbw_gbps: float
    busbw_gbps: float


def bandwidth(op: str, size_bytes: int, seconds: float, nranks: int) -> Bandwidth:
    """algbw and busbw of ``op`` moving ``size_bytes`` in ``seconds`` on ``nranks`` ranks.

    Raises ValueError when ``seconds`` is not positive (a timer that returned zero is a
    measuring bug, never infinite bandwidth).
    """
    if seconds <= 0.0:
        raise ValueError(f"time must be positive, got {seconds}")
    alg = size_bytes / seconds / 1e9
    return Bandwidth(alg, alg * bus_factor(op, nranks))


def size_sweep(
    min_bytes: int, max_bytes: int, factor: int, *, elem_size: int, nranks: int, op: str
) -> list[int]:
    """The message sizes (bytes) to measure: ``min_bytes`` × factor^k up to ``max_bytes``.

    Each size is rounded down to a whole number of elements and, for the chunked ops,
    to a multiple of ``nranks`` elements (at least one element per rank), exactly as
    nccl-tests aligns its counts; sizes that round to the same value appear once.
    Raises ValueError on a non-positive bound, ``min_bytes > max_bytes`` or a factor < 2.
    """
    if min_bytes < 1 or max_bytes < 1 or elem_size < 1 or nranks < 1:
        raise ValueError("min_bytes, max_bytes, elem_size and nranks must be >= 1")
    if min_bytes > max_bytes:
        raise ValueError(f"min_bytes ({min_bytes}) is larger than max_bytes ({max_bytes})")
    if factor < 2:
        raise ValueError(f"factor must be >= 2, got {factor}")
    align = nranks if op in _CHUNKED else 1
    out: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        count = max(size // elem_size // align, 1) * align
        b = count * elem_size
        if not out or b != out[-1]:
            out.append(b)
        size *= factor
    return out


@dataclass(frozen=True)
class Row:
    """One line of the nccl-tests table."""

    size: int  # bytes
    count: int  # elements
    dtype: str  # nccl-tests type name: float, half, bfloat16, ...
    redop: str  # sum | none
    root: int  # -1 when the op has no root
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int


def redop_of(op: str) -> str:
    """The redop column of ``op`` (``sum`` for reductions, else ``none``)."""
    return _REDOP.get(op, "none")


_HEAD = (
    f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>7} {'root':>7} "
    f"{'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>7}\n"
    f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>7} {'':>7} "
    f"{'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>7}"
)


def format_table(rows: Sequence[Row], title: str = "") -> str:
    """The rows in nccl-tests' column layout, header first (``title`` as a comment line)."""
    lines = [f"# {title}"] if title else []
    lines.append(_HEAD)
    for r in rows:
        lines.append(
            f"{r.size:>12} {r.count:>13} {r.dtype:>9} {r.redop:>7} {r.root:>7} "
            f"{r.time_us:>9.2f} {r.algbw_gbps:>7.2f} {r.busbw_gbps:>7.2f} {r.wrong:>7}"
        )
    return "\n".join(lines)


def summarize(rows: Sequence[Row]) -> dict[str, float]:
    """The per-op metrics: busbw/algbw maximum, busbw at the largest size, wrong elements.

    Raises ValueError on an empty sweep (a check that measured nothing must not pass).
    """
    if not rows:
        raise ValueError("no sizes were measured")
    largest = max(rows, key=lambda r: r.size)
    return {
        "busbw_gbps_max": max(r.busbw_gbps for r in rows),
        "algbw_gbps_max": max(r.algbw_gbps for r in rows),
        "busbw_gbps_large": largest.busbw_gbps,
        "wrong_elements": float(sum(r.wrong for r in rows)),
    }
