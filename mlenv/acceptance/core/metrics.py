"""What a metric means, declared by the check that measures it (SuperBench's
``add_result(metric, value, reduce_type)`` is the model).

A check declares, beside its options, one :class:`Metric` per metric name (or ``fnmatch``
pattern: ``tflops_*``) it reports: the unit, which way is better, whether the values of
several ranks (or nodes, or links) are compared with each other for outliers, and whether
the run history keeps it as a trend. The judging code (peer outliers), the history's
headline figures and ``mlenv acceptance compare`` read these declarations; none of them
guesses from a name. A check reporting results under more than one name (training's
``training.deepspeed`` and ``training.step_time``) declares each name's metrics.

The declarations travel in results.json (``metric_meaning``), so a comparison of two runs
judges each figure as the run that measured it meant it. A document written before that
key existed, or a check written before declarations (a site's plugin), declares nothing:
for those alone :func:`by_name` applies the name rule the older versions used (``*tflops*``,
``*gbps*``, ``samples_per_s`` higher, median ``*_ms`` lower), so old runs compare and trend
as they always did.

Stdlib only: reports, verdicts and comparisons are computed without torch.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

HIGHER = 1
LOWER = -1
NEITHER = 0


@dataclass(frozen=True)
class Metric:
    """The meaning of one metric: ``unit``; ``direction`` +1 (higher is better), -1 (lower
    is better) or 0 (neither: a count, a loss, a setting; reported, never judged against
    peers or a previous run); ``peers``: compared across ranks, nodes or links for outliers;
    ``trend``: kept in the run history as a headline figure (median over ranks)."""

    unit: str
    direction: int = NEITHER
    peers: bool = False
    trend: bool = False

    def __post_init__(self) -> None:
        if self.direction not in (HIGHER, LOWER, NEITHER):
            raise ValueError(f"direction must be +1, -1 or 0, not {self.direction!r}")
        if (self.peers or self.trend) and self.direction == NEITHER:
            raise ValueError("a metric compared with peers or trended needs a direction")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form in results.json's ``metric_meaning``."""
        return {
            "unit": self.unit,
            "direction": self.direction,
            "peers": self.peers,
            "trend": self.trend,
        }

    @classmethod
    def from_dict(cls, d: object) -> Metric | None:
        """Inverse of :meth:`to_dict`; None for anything malformed (a document is input)."""
        if not isinstance(d, Mapping):
            return None
        try:
            return cls(
                unit=str(d.get("unit", "")),
                direction=int(d.get("direction", NEITHER)),
                peers=bool(d.get("peers", False)),
                trend=bool(d.get("trend", False)),
            )
        except (TypeError, ValueError):
            return None


def higher(unit: str, *, peers: bool = True, trend: bool = False) -> Metric:
    """A rate or throughput: higher is better, compared with peers unless told otherwise."""
    return Metric(unit, HIGHER, peers, trend)


def lower(unit: str, *, peers: bool = True, trend: bool = False) -> Metric:
    """A time: lower is better, compared with peers unless told otherwise."""
    return Metric(unit, LOWER, peers, trend)


def info(unit: str) -> Metric:
    """Reported only: a count, a setting, a loss, a tail percentile."""
    return Metric(unit)


# {metric name or fnmatch pattern: Metric}: one check name's declarations.
Declared = Mapping[str, Metric]
# {check name: Declared}: the declarations of every check of a run.
Table = Mapping[str, Declared]


def declared(decl: Declared, metric: str) -> Metric | None:
    """The declaration of ``metric``: its exact name first, then the first matching pattern."""
    if metric in decl:
        return decl[metric]
    for pattern, meaning in decl.items():
        if fnmatch.fnmatchcase(metric, pattern):
            return meaning
    return None


def meaning(table: Table, check: str, metric: str) -> Metric:
    """What ``check``'s ``metric`` means: its declaration when ``check`` declares any
    metric (an undeclared metric of such a check is reported only), else the name rule."""
    decl = table.get(check)
    if decl is None:
        return by_name(check, metric)
    return declared(decl, metric) or info("")


def table_to_json(table: Table) -> dict[str, dict[str, dict[str, Any]]]:
    """``metric_meaning`` as results.json holds it."""
    return {c: {m: x.to_dict() for m, x in d.items()} for c, d in sorted(table.items())}


def table_from_json(raw: object) -> dict[str, dict[str, Metric]]:
    """``metric_meaning`` read back from a document; a malformed entry is dropped (that
    check then falls back to the name rule), never an error: compare reads old documents."""
    out: dict[str, dict[str, Metric]] = {}
    if not isinstance(raw, Mapping):
        return out
    for check, decl in raw.items():
        if not isinstance(decl, Mapping):
            continue
        got = {str(m): x for m, d in decl.items() if (x := Metric.from_dict(d)) is not None}
        out[str(check)] = got
    return out


def merged(tables: Iterable[Table]) -> dict[str, Declared]:
    """Several runs' tables as one: a later table's declaration of a check wins."""
    out: dict[str, Declared] = {}
    for t in tables:
        out.update(t)
    return out


# -- the name rule: documents and checks that declare nothing -------------------------
# Before checks declared their metrics, meaning was read from names; it stays only for
# results.json documents without ``metric_meaning`` and checks that declare nothing, so
# that they compare and trend exactly as they did.

_HIGHER_WORDS = ("tflops", "gbps", "samples_per_s")
# A fast rank waits longer for its slow peer: its comm/wait time is high for the peer's fault.
_NOT_COMPARED_PREFIX = ("comm_", "wait_")
# The figure each shipped check was trended on (metric globs) when results did not say.
_HEADLINE_BY_NAME: dict[str, tuple[str, ...]] = {
    "compute.matmul": ("tflops_*",),
    "memory.copy": ("copy_gbps",),
    "collectives.*": ("busbw_gbps_large",),
    "training.deepspeed": ("samples_per_s",),
    "training.step_time": ("p50_ms",),
    "compute.quorum": (),
    "environment": (),
}


def direction_by_name(metric: str) -> int:
    """+1 if the name says higher is better, -1 lower, 0 neither (the old rule)."""
    if metric.endswith("_ms"):
        if metric.startswith(_NOT_COMPARED_PREFIX) or metric.endswith(("p90_ms", "p99_ms")):
            return NEITHER
        return LOWER
    if any(metric.startswith(p) or metric.endswith(p) or f"_{p}" in metric for p in _HIGHER_WORDS):
        return HIGHER
    return NEITHER


def by_name(check: str, metric: str) -> Metric:
    """The meaning the old name rule gave ``check``'s ``metric``."""
    d = direction_by_name(metric)
    if d == NEITHER:
        return info("")
    for pattern, metrics in _HEADLINE_BY_NAME.items():
        if fnmatch.fnmatchcase(check, pattern):
            trend = any(fnmatch.fnmatchcase(metric, m) for m in metrics)
            break
    else:
        trend = not metric.endswith("_max")
    return Metric("", d, peers=True, trend=trend)
