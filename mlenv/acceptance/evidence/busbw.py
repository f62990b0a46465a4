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
class Measured:
    """One variant (out-of-place or in-place) of one size: nccl-tests' four columns."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int


OUT_OF_PLACE = "out-of-place"
IN_PLACE = "in-place"


@dataclass(frozen=True)
class Row:
    """One line of the nccl-tests table.

    ``time_us`` … ``wrong`` are the headline variant (``variant``): out-of-place where
    torch.distributed has one, else in-place (all_reduce and broadcast are in-place
    only in torch). ``out_of_place`` / ``in_place`` hold each variant that was measured
    (None: torch has no such call, printed ``N/A``); a row built without them stands
    for its headline variant only.
    """

    size: int  # bytes
    count: int  # elements
    dtype: str  # nccl-tests type name: float, half, bfloat16, ...
    redop: str  # sum | none
    root: int  # -1 when the op has no root
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int
    variant: str = OUT_OF_PLACE
    out_of_place: Measured | None = None
    in_place: Measured | None = None

    @classmethod
    def of(
        cls,
        size: int,
        count: int,
        dtype: str,
        redop: str,
        root: int,
        out_of_place: Measured | None,
        in_place: Measured | None,
    ) -> Row:
        """A row from its measured variants; the headline is out-of-place when there is one."""
        head, variant = (
            (out_of_place, OUT_OF_PLACE) if out_of_place is not None else (in_place, IN_PLACE)
        )
        if head is None:
            raise ValueError("a row needs at least one measured variant")
        return cls(
            size,
            count,
            dtype,
            redop,
            root,
            head.time_us,
            head.algbw_gbps,
            head.busbw_gbps,
            head.wrong,
            variant,
            out_of_place,
            in_place,
        )

    def variants(self) -> tuple[Measured | None, Measured | None]:
        """(out-of-place, in-place) as the full table prints them."""
        if self.out_of_place is None and self.in_place is None:
            head = Measured(self.time_us, self.algbw_gbps, self.busbw_gbps, self.wrong)
            return (head, None) if self.variant == OUT_OF_PLACE else (None, head)
        return self.out_of_place, self.in_place

    @property
    def total_wrong(self) -> int:
        """Wrong elements over every measured variant."""
        return sum(m.wrong for m in self.variants() if m is not None)


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
    """The headline variant of each row in nccl-tests' column layout, header first (``title``
    as a comment line): ``details.table``. The printed form is :func:`format_nccl_tests`."""
    lines = [f"# {title}"] if title else []
    lines.append(_HEAD)
    for r in rows:
        lines.append(
            f"{r.size:>12} {r.count:>13} {r.dtype:>9} {r.redop:>7} {r.root:>7} "
            f"{r.time_us:>9.2f} {r.algbw_gbps:>7.2f} {r.busbw_gbps:>7.2f} {r.wrong:>7}"
        )
    return "\n".join(lines)


_NA = "N/A"
_FULL_HEAD = (
    f"#{'':>51} {'out-of-place':^31} {'in-place':^31}".rstrip() + "\n"
    f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>7} {'root':>7} "
    f"{'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6} {'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6}\n"
    f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>7} {'':>7} "
    f"{'(us)':>8} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6} {'(us)':>8} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}"
)


def _cols(m: Measured | None) -> str:
    if m is None:
        return f"{_NA:>8} {_NA:>7} {_NA:>7} {_NA:>6}"
    return f"{m.time_us:>8.2f} {m.algbw_gbps:>7.2f} {m.busbw_gbps:>7.2f} {m.wrong:>6}"


def avg_busbw(rows: Sequence[Row]) -> float:
    """nccl-tests' ``# Avg bus bandwidth``: the mean busbw over every size and measured variant.

    Raises ValueError on an empty sweep.
    """
    vals = [m.busbw_gbps for r in rows for m in r.variants() if m is not None]
    if not vals:
        raise ValueError("no sizes were measured")
    return sum(vals) / len(vals)


def footer(rows: Sequence[Row]) -> str:
    """nccl-tests' closing lines: out-of-bounds (wrong) values and the average bus bandwidth."""
    wrong = sum(r.total_wrong for r in rows)
    return (
        f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}\n"
        f"# Avg bus bandwidth    : {avg_busbw(rows):g}"
    )


def format_nccl_tests(rows: Sequence[Row], title: str = "") -> str:
    """The table as nccl-tests prints it: out-of-place and in-place columns (``N/A`` where
    torch.distributed has no such call), then the ``# Out of bounds values`` and
    ``# Avg bus bandwidth`` footer, so scripts written for nccl-tests' output read it."""
    lines = [f"# {title}"] if title else []
    lines.append(_FULL_HEAD)
    for r in rows:
        oop, ip = r.variants()
        lines.append(
            f"{r.size:>12} {r.count:>13} {r.dtype:>9} {r.redop:>7} {r.root:>7} {_cols(oop)} {_cols(ip)}"
        )
    if rows:
        lines.append(footer(rows))
    return "\n".join(lines)


def summarize(rows: Sequence[Row]) -> dict[str, float]:
    """The per-op metrics: busbw/algbw maximum and busbw at the largest size (headline
    variant), nccl-tests' average busbw (every size and variant), wrong elements of the
    headline variant and, where a second (in-place) variant was measured, of that one.

    Raises ValueError on an empty sweep (a check that measured nothing must not pass).
    """
    if not rows:
        raise ValueError("no sizes were measured")
    largest = max(rows, key=lambda r: r.size)
    out = {
        "busbw_gbps_max": max(r.busbw_gbps for r in rows),
        "algbw_gbps_max": max(r.algbw_gbps for r in rows),
        "busbw_gbps_large": largest.busbw_gbps,
        "busbw_gbps_avg": avg_busbw(rows),
        "wrong_elements": float(sum(r.wrong for r in rows)),
    }
    second = [r.in_place for r in rows if r.out_of_place is not None and r.in_place is not None]
    if second:  # both variants measured: the in-place column's wrong elements on their own
        out["wrong_elements_in_place"] = float(sum(m.wrong for m in second))
    return out


# A sweep that reached this size measured "large messages": the baselines' busbw bars per
# fabric hold from here (``when: {large_messages: true}``); a shorter sweep is reported only.
# NCCL: 64 MiB, where busbw has reached its plateau on NVLink and InfiniBand (the GPU
# default sweep ends at 256 MiB); gloo: the CPU default sweep's last size (4 MiB).
LARGE_BYTES = 64 * 2**20
LARGE_BYTES_GLOO = 4 * 2**20


def large_messages(backend: str, largest: int) -> bool:
    """Whether a sweep whose largest measured size is ``largest`` bytes reached large messages."""
    return largest >= (LARGE_BYTES if backend == "nccl" else LARGE_BYTES_GLOO)
