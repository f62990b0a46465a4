"""Outliers relative to peers: robust median/MAD over ranks and over nodes.

Independent of any baseline, so a slow GPU or a bad node shows even on an unknown GPU
model. Each rank's value is compared with the median of its *peers* (leave-one-out,
so two ranks are compared with each other); it is flagged when it is worse by more
than ``warn_frac`` (WARN) or ``fail_frac`` (FAIL) in the metric's bad direction and,
with enough peers to estimate the spread (≥ 3), also more than ``min_z`` robust
z-scores away. Node aggregates are the median of each node's ranks.

Links are compared the same way: each node's intra-node collective groups against the
other nodes' (NVLink/PCIe inside a node), and each inter-node group (one per local
rank: a rail) against the other rails, on the bus bandwidth at the largest size.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from mlenv.acceptance.core import metrics, registry
from mlenv.acceptance.core.result import CheckResult, Status

DEFAULTS: dict[str, float] = {"warn_frac": 0.2, "fail_frac": 0.5, "min_z": 3.5}

# Which metrics are compared, and which way is worse, is what each check declares
# (mlenv.acceptance.core.metrics: ``peers`` and ``direction``), never read from a name.
# The link figure groups are compared on: bandwidth at the largest message, where the
# fabric rather than latency decides (the sweep's peak would repeat the same finding).
LINK_METRIC = "busbw_gbps_large"
LINK_SCOPES = ("intra", "inter")


@dataclass(frozen=True)
class Finding:
    """One value that is worse than its peers."""

    check: str
    metric: str
    level: str  # "rank" | "node" | "intra" | "inter" (a collective group of that scope)
    rank: int | None
    node: str | None  # the host, or the group's label for "intra" / "inter"
    value: float
    reference: float  # the peers' median
    frac: float  # how much worse, as a fraction of the reference
    severity: Status  # WARN | FAIL

    def who(self) -> str:
        """``rank 1 (host)``, ``node host`` or ``intra-node group node 1 (host)``."""
        if self.level == "rank":
            return f"rank {self.rank} ({self.node})" if self.node else f"rank {self.rank}"
        if self.level in LINK_SCOPES:
            return f"{self.level}-node group {self.node}"
        return f"node {self.node}"

    def short_reason(self) -> str:
        """The value and by how much, for a result that already names its check and where."""
        word = "below" if self.value < self.reference else "above"
        return (
            f"is an outlier: {self.metric} = {self.value:.4g}, "
            f"{100 * self.frac:.0f}% {word} its peers' median {self.reference:.4g}"
        )

    def reason(self) -> str:
        """A sentence naming the check, who, the value and by how much (run-level lines)."""
        return f"{self.check}: {self.who()} {self.short_reason()}"


def _mad(xs: list[float]) -> float:
    m = statistics.median(xs)
    return statistics.median(abs(x - m) for x in xs)


def _flag(
    values: list[tuple[int | None, str | None, float]],
    check: str,
    metric: str,
    level: str,
    cfg: dict[str, float],
    sign: int,
) -> list[Finding]:
    out: list[Finding] = []
    if sign == 0 or len(values) < 2:
        return out
    for i, (rank, node, x) in enumerate(values):
        peers = [v for j, (_, _, v) in enumerate(values) if j != i]
        ref = statistics.median(peers)
        if ref == 0:
            continue
        worse = (ref - x) / abs(ref) if sign > 0 else (x - ref) / abs(ref)
        if worse <= cfg["warn_frac"]:
            continue
        if len(peers) >= 3:
            mad = _mad(peers)
            # 0.6745 makes MAD comparable to a standard deviation for normal data.
            if mad > 0 and 0.6745 * abs(x - ref) / mad < cfg["min_z"]:
                continue
        sev = Status.FAIL if worse > cfg["fail_frac"] else Status.WARN
        out.append(Finding(check, metric, level, rank, node, x, ref, worse, sev))
    return out


def _link_findings(
    results: list[CheckResult], cfg: dict[str, float], table: metrics.Table
) -> list[Finding]:
    by_check: dict[tuple[str, str], list[CheckResult]] = {}
    for r in results:
        if (
            r.scope in LINK_SCOPES
            and r.status not in (Status.ERROR, Status.SKIP)
            and LINK_METRIC in r.metrics
        ):
            by_check.setdefault((r.scope, r.name), []).append(r)
    out: list[Finding] = []
    for (scope, check), rs in sorted(by_check.items()):
        m = metrics.meaning(table, check, LINK_METRIC)
        if m.peers:
            vals: list[tuple[int | None, str | None, float]] = [
                (None, r.group, r.metrics[LINK_METRIC]) for r in rs
            ]
            out += _flag(vals, check, LINK_METRIC, scope, cfg, m.direction)
    return out


def find(
    results: list[CheckResult],
    config: dict[str, float] | None = None,
    table: metrics.Table | None = None,
) -> list[Finding]:
    """Outliers among rank-scope results (per rank, and per node when there are ≥ 2 nodes),
    and among the intra-node and inter-node collective groups (links), on the metrics
    their checks declare ``peers`` (``table``; None: the registered checks' declarations)."""
    cfg = {**DEFAULTS, **(config or {})}
    table = registry.metric_table() if table is None else table
    by_metric: dict[tuple[str, str], list[CheckResult]] = {}
    for r in results:
        if r.scope != "rank" or r.status in (Status.ERROR, Status.SKIP):
            continue
        for m in r.metrics:
            by_metric.setdefault((r.name, m), []).append(r)
    findings: list[Finding] = []
    for (check, metric), rs in sorted(by_metric.items()):
        meant = metrics.meaning(table, check, metric)
        if not meant.peers:
            continue
        vals = [(r.rank, r.node, r.metrics[metric]) for r in rs]
        findings += _flag(vals, check, metric, "rank", cfg, meant.direction)
        per_node: dict[str, list[float]] = {}
        for r in rs:
            if r.node is not None:
                per_node.setdefault(r.node, []).append(r.metrics[metric])
        if len(per_node) >= 2:
            agg: list[tuple[int | None, str | None, float]] = [
                (None, n, statistics.median(v)) for n, v in sorted(per_node.items())
            ]
            findings += _flag(agg, check, metric, "node", cfg, meant.direction)
    return findings + _link_findings(results, cfg, table)
