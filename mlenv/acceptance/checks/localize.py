"""fabric.localize: name the slow node, or the slow link between two nodes, pair by pair.

Runs when a multi-node collective was below its bar or a node/rail was an outlier
earlier in the run (``mode: auto``, the default), always with ``mode: always``
(``mlenv acceptance --localize`` / ``python -m mlenv.acceptance --localize``), never
with ``mode: off``. The plan and the judgement are :mod:`mlenv.acceptance.evidence.localize`;
this module measures.

A round: rank 0 decides the node pairs (disjoint), broadcasts them, and every pair
measures at once: the first rank of each node (its leader) runs a 2-rank ``all_reduce``
of ``bytes`` with the other node's leader in a process group of its own (``new_group``,
created by every rank in the same order, cached), ``warmup`` untimed calls then
``iters`` timed ones; the pair's figure is ``bytes / time`` in GB/s (for two ranks the
all_reduce bus bandwidth equals its algorithm bandwidth), the time being the slower
member's best call (a slow link is slow on every call; a rank that lost its core for a
moment only on some). The figures come back to rank 0 with ``all_gather_object``.

Auto trigger (rank 0): the results already written to ``results.jsonl`` are judged the
way the verdict judges them (same baseline, same peer comparison); a world or inter-node
collective that is FAIL/WARN on a bandwidth figure (or whose sweep stopped for time),
a node outlier on a collectives figure (a rank-scope collectives check, e.g. a plugin's),
or an inter-node (rail) outlier triggers localization. A slow node in compute, memory or
training is the node's own, not a link's, and does not (training runs later anyway). Rank 0 broadcasts the decision, so every rank agrees.

Deadline: rounds stop when the next would not fit in ``DEADLINE_SHARE`` of the check's
deadline (at the speed of the longest round so far); inside a round each pair cuts its
timed calls to what fits in the time rank 0 gave the round. Fault ``slow:node=N``
(``check=fabric.localize``) stretches node N's leader's timed calls: a genuinely slow
node for tests that cannot shape a real link.

Racks: when ``MLENV_TOPOLOGY`` holds the config's ``nodes.topology``
(JSON rack → nodes; the pods get it from the StatefulSet, Slurm and hosts jobs from their
launch environment), each node is looked up by its Kubernetes Node (``MLENV_NODE_NAME``),
its host name and the host's short form; the plan then pairs within and across racks first
and a slow leaf switch or uplink is one FAIL of scope ``rack``
(:mod:`mlenv.acceptance.evidence.topology`). A topology that cannot be read is said in
the result and the run localizes without it.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from mlenv import contract
from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.metrics import higher
from mlenv.acceptance.core.options import CheckOptions, at_least, option
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.core.timing import Stretch, measure, stretch_factor
from mlenv.acceptance.evidence import localize as plan
from mlenv.acceptance.evidence import slurmtopo
from mlenv.acceptance.evidence import topology as topo
from mlenv.acceptance.reports import console

NAME = "fabric.localize"
REQUESTED = "requested (--localize)"  # the trigger of a run that asked for localization
MODES = ("auto", "always", "off")
DEADLINE_SHARE = 0.8
_DONE = "done"


@dataclass(frozen=True)
class LocalizeOptions(CheckOptions):
    """Options of fabric.localize."""

    mode: str = option(
        "auto",
        help="auto: only after a multi-node collective below its bar or a node/rail "
        "outlier; always: every run (--localize); off: never",
    )
    bytes: int = option(2**20, cuda=64 * 2**20, help="bytes each pair all-reduces per call")
    iters: int = option(
        5, cuda=10, help="timed calls per pair (fewer when a slow pair would overrun the round)"
    )
    warmup: int = option(1, cuda=3, help="untimed calls per pair first")
    slow_frac: float = option(
        plan.DEFAULT_SLOW_FRAC,
        help="a pair is slow below (1 - slow_frac) of a healthy pair's figure",
    )
    expected_gbps: float = option(
        0.0,
        help="a healthy pair's GB/s to judge against (0: the upper quartile of round 1's pairs)",
    )

    def problems(self) -> list[tuple[str, str]]:
        """A known mode, at least one float32 and one timed call, slow_frac strictly between 0 and 1."""
        out = (
            at_least(self, 4, "bytes")
            + at_least(self, 1, "iters")
            + at_least(self, 0, "warmup", "expected_gbps")
        )
        if self.mode not in MODES:
            out.append(("mode", f"must be one of {', '.join(MODES)}, got {self.mode!r}"))
        if not 0.0 < self.slow_frac < 1.0:
            out.append(("slow_frac", f"must be between 0 and 1 (exclusive), got {self.slow_frac}"))
        return out


def _leaders(layout: list[tuple[int, int, str]]) -> list[tuple[int, str]]:
    """(rank, host) of each node's first rank, in node order."""
    seen: dict[int, tuple[int, str]] = {}
    for rank, (node, _, host) in enumerate(layout):
        seen.setdefault(node, (rank, host))
    return [seen[k] for k in sorted(seen)]


SCONTROL_TOPOLOGY = ["scontrol", "show", "topology"]  # fixed words: nothing of ours reaches it


def scontrol_topology(env: Any, timeout_s: float = 15.0) -> tuple[str, str]:
    """(stdout of ``scontrol show topology``, a note when it could not run or failed).
    Without the topology plugin scontrol prints nothing and exits 0: ("", "")."""
    try:
        r = subprocess.run(
            SCONTROL_TOPOLOGY,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return "", f"scontrol show topology: {e}"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return "", f"scontrol show topology: {last}"
    return r.stdout, ""


def slurm_topology(env: Any, names: list[str]) -> tuple[str, str]:
    """on Slurm without ``MLENV_TOPOLOGY``, the racks of ``topology/tree``'s leaf
    switches among ``names`` (the job's nodes) as ``MLENV_TOPOLOGY``'s JSON, with a note
    saying where they came from; ("", "") when Slurm has no topology."""
    out, why = scontrol_topology(env)
    if why or not out.strip():
        return "", why and f"no racks from Slurm ({why})"
    racks, notes = slurmtopo.leaf_racks(out, set(names))
    if not racks:
        return "", "; ".join(
            [
                "no racks from Slurm: no leaf switch of scontrol show topology lists the job's nodes",
                *notes,
            ]
        )
    return contract.topology_json(racks), "; ".join(
        [f"racks from Slurm's topology/tree (scontrol show topology): {', '.join(racks)}", *notes]
    )


def racks_of(
    layout: list[tuple[int, int, str, str]], env: Any = None
) -> tuple[list[str | None] | None, str]:
    """(each node's rack, a note): from ``MLENV_TOPOLOGY`` in ``env`` (default: this process's),
    else on Slurm from its topology/tree plugin (:func:`slurm_topology`); (None, "") without
    one, (None, why) when it cannot be read. ``layout`` is (node, local rank, host,
    Kubernetes Node or "") per rank."""
    env = os.environ if env is None else env
    seen: dict[int, list[str]] = {}
    for node, _, host, k8s in layout:
        seen.setdefault(node, [x for x in dict.fromkeys((k8s, host, host.split(".")[0])) if x])
    text, source = env.get(topo.ENV, "").strip(), ""
    if not text and env.get("MLENV_PLATFORM") == "slurm":
        text, source = slurm_topology(env, [x for names in seen.values() for x in names])
    if not text:
        return None, source
    try:
        topology = topo.parse(text)
    except ValueError as e:
        return None, f"topology not used: {e}"
    racks = topo.rack_of_nodes(topology, [seen[k] for k in sorted(seen)])
    missing = [seen[k][0] for k, r in zip(sorted(seen), racks, strict=True) if r is None]
    return racks, "; ".join(
        x for x in (source, f"not in {topo.ENV}: {', '.join(missing)}" if missing else "") if x
    )


def triggers(results: list[CheckResult], baseline: Any = None, nodes: int = 2) -> list[str]:
    """Why localization should run, from results judged as the verdict judges them ([] = no need).

    Bandwidth-related only: a collective that delivered wrong data is a correctness
    finding, not a slow link.
    """
    from mlenv.acceptance.judging.verdict import judge, reason_line

    if nodes < 2:
        return []
    j = judge(results, baseline)
    out: list[str] = []
    for r in j.results:
        if not r.name.startswith("collectives.") or r.status not in (Status.FAIL, Status.WARN):
            continue
        spans = r.scope == "inter" or (
            r.scope == "world" and int(r.details.get("nodes", nodes) or 0) > 1
        )
        text = " ".join(r.reasons)
        if spans and ("gbps" in text or "sweep stopped" in text):
            out.append(reason_line(r))
    # A rail (inter group) outlier is already on its result's status and reasons above;
    # a node outlier is a run-level finding only.
    out += [
        f"{f.severity.value}: {f.reason()}"
        for f in j.findings
        if f.level == "node" and f.check.startswith("collectives.")
    ]
    return list(dict.fromkeys(out))


def earlier_triggers(ctx: RunContext) -> list[str]:
    """Rank 0: :func:`triggers` over this run's ``results.jsonl`` so far, with the run's baseline."""
    from mlenv.acceptance.judging import baselines
    from mlenv.acceptance.reports.document import RunMeta, device_names
    from mlenv.acceptance.reports.jsonl import read_partial
    from mlenv.contract import RESULTS_JSONL

    results, _ = read_partial(ctx.report_dir / RESULTS_JSONL)
    meta = RunMeta.read(ctx.report_dir)
    baseline = None
    if meta is not None:
        try:
            baseline = baselines.resolve(meta.baseline_spec, device_names(meta, results))
        except Exception:  # validated at start-up; without it the peers still judge
            baseline = None
    return triggers(results, baseline, ctx.nnodes)


def _pair_group(ranks: tuple[int, int]) -> Any:
    """The process group of two leaders (collective over the default group: every rank calls it)."""
    from mlenv.acceptance.checks.collectives import _new_group

    return _new_group(ranks)


def _measure_pair(
    ctx: RunContext,
    group: Any,
    nbytes: int,
    iters: int,
    warmup: int,
    budget_s: float,
    stretch: float,
) -> float:
    """This leader's share of one pair: the pair's GB/s (both members return the same figure)."""
    import torch
    import torch.distributed as dist

    dev = torch.device(ctx.device)
    buf = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=dev)

    def once() -> None:
        dist.all_reduce(buf, group=group)

    # One call, timed, agreed between the two: how many timed calls fit in the budget.
    # One Stretch for both measures: the probe call's time is the padding's base.
    pad = Stretch(stretch)
    first = measure(once, device=ctx.device, iters=1, warmup=0, stretch=pad).mean_s
    agreed = torch.tensor([first], dtype=torch.float64, device=dev)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
    per_call = max(float(agreed.item()), 1e-9)
    fit = int(budget_s / per_call) - 1
    n_iter = max(1, min(iters, fit))
    n_warm = max(0, min(warmup - 1, fit - n_iter))
    t = measure(once, device=ctx.device, iters=n_iter, warmup=n_warm, stretch=pad)
    # The best sample: a link that is slow is slow on every call, while a rank that lost
    # its core for a moment (a busy host) is slow on some; the slower member's best counts.
    sec = torch.tensor([t.best_s], dtype=torch.float64, device=dev)
    dist.all_reduce(sec, op=dist.ReduceOp.MAX, group=group)
    return nbytes / max(float(sec.item()), 1e-12) / 1e9


def _round(
    ctx: RunContext,
    leaders: list[tuple[int, str]],
    pairs: list[tuple[int, int]],
    nbytes: int,
    iters: int,
    warmup: int,
    budget_s: float,
) -> dict[tuple[int, int], float]:
    """Every rank: measure one round (pairs of node indices); the figures, on every rank."""
    import torch.distributed as dist

    groups = [_pair_group(tuple(sorted((leaders[a][0], leaders[b][0])))) for a, b in pairs]  # type: ignore[arg-type]
    mine: tuple[tuple[int, int], float] | None = None
    for (a, b), g in zip(pairs, groups, strict=True):
        if ctx.rank in (leaders[a][0], leaders[b][0]):
            node = a if ctx.rank == leaders[a][0] else b
            stretch = _stretch(ctx, node)
            mine = ((a, b), _measure_pair(ctx, g, nbytes, iters, warmup, budget_s, stretch))
    got: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(got, mine)
    return {tuple(p): float(v) for p, v in (x for x in got if x is not None)}


def _stretch(ctx: RunContext, node: int) -> float:
    """The ``slow`` fault's factor for this leader (node index ``node``), only when aimed at this check."""
    from mlenv.acceptance.core import faults

    fault = faults.active("slow", rank=ctx.rank, node_rank=node, check=NAME)
    return (
        stretch_factor(fault)
        if fault is not None and fault.get("check", "").startswith("fabric")
        else 1.0
    )


def _bcast(obj: Any, ctx: RunContext) -> Any:
    import torch.distributed as dist

    box = [obj if ctx.rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@register
class LocalizeCheck(Check):
    """Pairwise bandwidth between nodes in rounds: the slow node or link, by name."""

    name = NAME
    description = (
        "pairwise all_reduce between disjoint node pairs, re-pairing suspects with good nodes"
    )
    Options = LocalizeOptions
    # Pairs are judged against the healthy reference here, not by peer outliers; the
    # run's reference and slowest pair are kept as trends.
    metrics = {
        "reference_gbps": higher("GB/s", peers=False, trend=True),
        "pair_gbps_min": higher("GB/s", peers=False, trend=True),
        "pair_gbps_max": higher("GB/s", peers=False),
        "pair_gbps": higher("GB/s", peers=False),
    }

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """Decide (rank 0, broadcast), then measure rounds until the plan is done."""
        import torch.distributed as dist

        t0 = time.monotonic()
        o = ctx.options_of(LocalizeOptions, NAME)
        mode = o.mode
        layout: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(
            layout,
            (
                ctx.node_rank,
                ctx.local_rank,
                ctx.host,
                os.environ.get("MLENV_NODE_NAME", "").strip(),
            ),
        )
        leaders = _leaders([(int(a), int(b), str(c)) for a, b, c, _ in layout])
        names = [h for _, h in leaders]
        n = len(leaders)
        if n < 2:
            return self._skip(ctx, "one node: no link between nodes to localize")
        if mode == "off":
            return self._skip(ctx, "mode off")
        why: list[str] = [REQUESTED] if mode == "always" else []
        if mode == "auto":
            decided: tuple[list[str], str] = ([], "")
            if ctx.rank == 0:
                try:
                    decided = (earlier_triggers(ctx), "")
                except Exception as e:  # never leave the other ranks waiting in the broadcast
                    decided = ([], f"{type(e).__name__}: {e}")
            why, problem = _bcast(decided, ctx)
            if problem:
                return self._skip(
                    ctx,
                    f"not run: the earlier results could not be judged ({problem}); "
                    "--localize measures anyway",
                )
            if not why:
                return self._skip(
                    ctx,
                    "not needed: no multi-node collective below its bar and no node or rail "
                    "outlier (run with --localize to measure anyway)",
                )
        nbytes, iters, warmup, slow_frac = o.bytes, o.iters, o.warmup, o.slow_frac
        expected = o.expected_gbps or None
        deadline = DEADLINE_SHARE * ctx.deadline_s - (time.monotonic() - t0)
        if ctx.rank != 0:
            while True:
                msg = _bcast(None, ctx)
                if msg == _DONE:
                    return []
                pairs, budget = msg
                _round(ctx, leaders, [tuple(p) for p in pairs], nbytes, iters, warmup, budget)
        rounds_t0 = time.monotonic()

        rounds_done = [0]

        def measure_round(pairs: Any) -> dict[tuple[int, int], float]:
            left = deadline - (time.monotonic() - rounds_t0)
            budget = max(0.5, left / 2)  # a round may use half of what is left
            _bcast((list(pairs), budget), ctx)
            got = _round(ctx, leaders, list(pairs), nbytes, iters, warmup, budget)
            rounds_done[0] += 1
            # Rank 0's console shows each round as it ends, as the collectives show their tables.
            console.print_note(
                f"{NAME} round {rounds_done[0]}: "
                + ", ".join(f"{names[a]}<->{names[b]} {got[(a, b)]:.4g}" for a, b in pairs)
                + " GB/s"
            )
            return got

        try:
            racks, rack_note = racks_of([(int(a), int(b), str(c), str(d)) for a, b, c, d in layout])
            loc = plan.localize(
                n,
                measure_round,
                slow_frac=slow_frac,
                expected_gbps=expected,
                deadline_s=deadline,
                racks=racks,
            )
        finally:
            _bcast(_DONE, ctx)
        if rack_note:
            loc.notes.append(rack_note)
        return results_of(
            loc,
            names,
            why,
            {
                "bytes": nbytes,
                "iters": iters,
                "warmup": warmup,
                "backend": ctx.backend,
                "slow_frac": slow_frac,
            },
            time.monotonic() - t0,
        )

    def _skip(self, ctx: RunContext, reason: str) -> list[CheckResult]:
        if ctx.rank != 0:
            return []
        return [CheckResult(name=NAME, status=Status.SKIP, scope="world", reasons=[reason])]


def evidence(loc: plan.Localization, names: list[str]) -> list[str]:
    """One line per round (every pair's GB/s, the slow ones marked, who is in doubt after it):
    ``details.evidence``, which summary.md's Evidence section and JUnit's system-out show."""
    out: list[str] = []
    for r in loc.rounds:
        pairs = ", ".join(
            f"{names[a]}<->{names[b]} {r.figures[(a, b)]:.4g} GB/s"
            f"{' SLOW' if (a, b) in r.slow_pairs else ''}"
            for a, b in r.pairs
        )
        bar = (
            ""
            if r.reference_gbps is None
            else f" (healthy {r.reference_gbps:.4g}, slow below {(loc.bar_gbps or 0.0):.4g})"
        )
        doubt = ", ".join(names[i] for i in r.suspects) or "none"
        out.append(f"round {r.index}: {pairs}{bar}; in doubt after it: {doubt}")
    return out


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


_RACK_WHAT = {
    topo.UPLINK: "check rack {0}'s leaf switch and its uplinks (its nodes are fast with each other)",
    topo.BETWEEN: "check the path between the leaf switches of racks {0} and {1} (their uplinks, the spine "
    "between them); each is fast with other racks",
    topo.SPINE: "check the path between the racks ({all}: the leaf uplinks or the spine); pairs inside "
    "racks are fast",
}


def rack_results(
    loc: plan.Localization, names: list[str], details: dict[str, Any], duration_s: float
) -> list[CheckResult]:
    """A FAIL of scope ``rack`` per rack finding: one line for what N slow links would say."""
    ref, bar = _fmt(loc.reference_gbps), _fmt(loc.bar_gbps)
    racks = loc.racks or []
    out: list[CheckResult] = []
    for f in loc.rack_findings:
        figs = [loc.figures[p] for p in f.pairs]
        others = sorted({racks[x] or names[x] for p in f.pairs for x in p} - set(f.racks))
        if f.kind == topo.UPLINK:
            head = (
                f"every pair crossing rack {f.racks[0]} is slow ({len(figs)} pair(s) with "
                f"{', '.join(others)}"
            )
            group = f.racks[0]
        elif f.kind == topo.BETWEEN:
            head = f"every pair between racks {f.racks[0]} and {f.racks[1]} is slow ({len(figs)} pair(s)"
            group = f"{f.racks[0]} <-> {f.racks[1]}"
        else:
            head = (
                f"every pair across racks is slow ({len(figs)} pair(s) between {', '.join(f.racks)}"
            )
            group = " <-> ".join(f.racks)
        todo = _RACK_WHAT[f.kind].format(*f.racks, all=", ".join(f.racks))
        members = {r: [names[i] for i, x in enumerate(racks) if x == r] for r in f.racks}
        out.append(
            CheckResult(
                name=NAME,
                status=Status.FAIL,
                scope="rack",
                node=None,
                metrics={"pair_gbps_max": max(figs), "reference_gbps": loc.reference_gbps or 0.0},
                reasons=[
                    f"{head}, {min(figs):.3g}-{max(figs):.3g} GB/s; bar {bar}, healthy pairs {ref} GB/s): {todo}"
                ],
                details={
                    **details,
                    "group": group,
                    "rack_kind": f.kind,
                    "rack_nodes": members,
                    "rack_pairs": [[names[a], names[b]] for a, b in f.pairs],
                },
                duration_s=duration_s,
            )
        )
    return out


def results_of(
    loc: plan.Localization,
    names: list[str],
    why: list[str],
    setup: dict[str, Any],
    duration_s: float,
) -> list[CheckResult]:
    """The check's results: a FAIL per rack finding (scope rack), per slow node (scope node)
    and per slow link (scope link), else one world result: PASS (nobody), WARN (ambiguous /
    inconclusive). Every result carries every round in its details."""
    details = {**loc.to_dict(names), "trigger": why, **setup, "evidence": evidence(loc, names)}
    # The nodes a fast pair proved healthy (neither end of it is slow): node verdicts count
    # them as measured by this check, whatever else it found.
    if loc.bar_gbps is not None:
        details["healthy_nodes"] = sorted(
            {names[x] for p, v in loc.figures.items() if v >= loc.bar_gbps for x in p}
        )
    ref, bar = _fmt(loc.reference_gbps), _fmt(loc.bar_gbps)
    out: list[CheckResult] = rack_results(loc, names, details, duration_s)
    for x in loc.slow_nodes:
        pairs = [(p, v) for p, v in loc.figures.items() if x in p]
        seen = ", ".join(f"{names[p[1] if p[0] == x else p[0]]} {v:.3g}" for p, v in sorted(pairs))
        out.append(
            CheckResult(
                name=NAME,
                status=Status.FAIL,
                scope="node",
                node=names[x],
                metrics={
                    "pair_gbps_min": min(v for _, v in pairs),
                    "reference_gbps": loc.reference_gbps or 0.0,
                },
                reasons=[
                    f"slow node: every pair with it is below {bar} GB/s (with {seen} GB/s; healthy pairs "
                    f"{ref} GB/s): check {names[x]}'s NIC, its link speed, port and cable"
                ],
                details=dict(details),
                duration_s=duration_s,
            )
        )
    for a, b in loc.slow_links:
        v = loc.figures[(a, b)]
        out.append(
            CheckResult(
                name=NAME,
                status=Status.FAIL,
                scope="link",
                node=None,
                metrics={"pair_gbps": v, "reference_gbps": loc.reference_gbps or 0.0},
                reasons=[
                    f"slow link: {v:.3g} GB/s between {names[a]} and {names[b]} (bar {bar}, healthy pairs "
                    f"{ref} GB/s) while each is fast with other nodes: check the cable/port/switch path "
                    f"between {names[a]} and {names[b]}"
                ],
                details={**details, "group": f"{names[a]} <-> {names[b]}"},
                duration_s=duration_s,
            )
        )
    if out:
        return out
    rounds = len(loc.rounds)
    metrics = {"reference_gbps": loc.reference_gbps} if loc.reference_gbps is not None else {}
    if loc.outcome == plan.NOBODY:
        low = min(loc.figures.values())
        found = (
            f"no slow node or link: all {len(loc.figures)} of {loc.n * (loc.n - 1) // 2} pair(s) "
            f"at or above {bar} GB/s (lowest {low:.3g}, healthy {ref}) in {rounds} round(s)"
        )
        # Run because a collective was below its bar (auto): every pair being fast does not
        # clear that collective, so the result cannot be PASS; it says where to look next.
        triggered = [w for w in why if w != REQUESTED]
        return [
            CheckResult(
                name=NAME,
                status=Status.WARN if triggered else Status.PASS,
                scope="world",
                metrics={**metrics, "pair_gbps_min": low},
                reasons=[
                    found
                    + (
                        f"; yet {'; '.join(triggered)}: the slowness is not one node or link "
                        "(it shows only at full scale: the collective's algorithm, the switch "
                        "fabric under all pairs at once, or the bar itself)"
                        if triggered
                        else ""
                    )
                ],
                details=details,
                duration_s=duration_s,
            )
        ]
    who = ", ".join(names[i] for i in loc.suspects) or "none"
    notes = "; ".join(loc.notes)
    head = "ambiguous" if loc.outcome == plan.AMBIGUOUS else "inconclusive"
    return [
        CheckResult(
            name=NAME,
            status=Status.WARN,
            scope="world",
            metrics=metrics,
            reasons=[
                f"{head} after {rounds} round(s): suspects {who}" + (f" ({notes})" if notes else "")
            ],
            details=details,
            duration_s=duration_s,
        )
    ]
