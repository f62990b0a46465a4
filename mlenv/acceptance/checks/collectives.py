"""collectives.<op>: bandwidth sweeps with a data check, in the nccl-tests manner.

One check per op (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast), each
swept from ``min_bytes`` to ``max_bytes`` by ``factor`` (:class:`CollectiveOptions`).
Per size: fill the inputs with rank-dependent known values, run the op once and count
the output elements that differ from the exact expected values (small integers in
fp32, so the sums are exact on every backend), then ``warmup`` untimed and ``iters``
timed calls. The time of a size is the maximum over the group's ranks of each rank's
mean per-call time; algbw/busbw follow :mod:`mlenv.acceptance.evidence.busbw`.

Groups: the world; with more than one node also one group per node (scope ``intra``)
and one group per local rank across the nodes (scope ``inter``). Every rank creates
the same groups in the same order (``torch.distributed.new_group`` is collective over
the default group), derived from the node layout all ranks gathered. Each group's
lowest rank returns the group's result and prints its table.

Deadline: the runner creates the process group with ``timeout = ctx.deadline_s``, so a
gloo collective whose peer never arrives raises after the deadline. NCCL only raises
in the calling thread when ``TORCH_NCCL_BLOCKING_WAIT=1`` is set before
``init_process_group`` (otherwise its watchdog aborts the whole process, which the
runner would see as a dead rank): :func:`nccl_deadline_env` lists what to set. On top
of that, the sweep stops early (WARN, with the size it stopped at) when the next,
larger size would not finish within its phase's share of 80 % of the deadline at the
speed measured so far; every
rank of a group takes that decision from the same all-reduced figures, so no rank is
left waiting in a collective the others skipped.

Fault: ``corrupt`` with an explicit ``check=collectives…`` key adds 1 to the first
element this rank contributes, so the data check must count wrong elements. (A bare
``corrupt:rank=N`` is the quorum's fault and leaves collectives alone; broadcast
contributions come from rank 0 only, so there only a corrupt root shows.)
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.metrics import higher, info
from mlenv.acceptance.core.options import CheckOptions, at_least, option
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.core.timing import measure
from mlenv.acceptance.evidence.busbw import (
    Measured,
    Row,
    bandwidth,
    format_nccl_tests,
    format_table,
    large_messages,
    redop_of,
    size_sweep,
    summarize,
)

FAMILY = "collectives"
ELEM_SIZE = 4  # float32
DTYPE_NAME = "float"  # nccl-tests' name for float32
PATTERN = 7  # period of the position-dependent part of the test values
# Of the per-check deadline, the part sweeps may plan to use: the rest is margin for
# buffer set-up, the data checks and the runner's gather.
DEADLINE_SHARE = 0.8
_EXACT_LIMIT = 2**23  # keep every value an exactly representable fp32 integer

_UNSUPPORTED_HINTS = ("not supported", "unsupported", "does not support", "not implemented")


def nccl_deadline_env() -> dict[str, str]:
    """Environment to set (``setdefault``) before ``init_process_group`` with NCCL.

    ``TORCH_NCCL_BLOCKING_WAIT=1`` makes a collective that outlives the process group
    timeout raise in the calling thread (the check becomes ERROR, the runner keeps
    what was measured); ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` lets the watchdog tear
    the communicator down instead of leaving it hung.
    """
    return {"TORCH_NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def apply_nccl_deadline_env(environ: MutableMapping[str, str]) -> None:
    """``setdefault`` every variable of :func:`nccl_deadline_env` in ``environ``."""
    for k, v in nccl_deadline_env().items():
        environ.setdefault(k, v)


@dataclass(frozen=True)
class GroupSpec:
    """One communicator to sweep: its scope, member ranks (sorted) and a label."""

    scope: str  # world | intra | inter
    ranks: tuple[int, ...]
    label: str


def plan_groups(layout: Sequence[tuple[int, int, str]]) -> list[GroupSpec]:
    """The groups to measure, in the order every rank must create them.

    ``layout[r]`` is rank r's (node_rank, local_rank, host). Always the world; with
    more than one node also one ``intra`` group per node (ascending node rank) and one
    ``inter`` group per local rank (ascending), each only when it has two or more ranks.
    """
    world = GroupSpec("world", tuple(range(len(layout))), "world")
    nodes = sorted({n for n, _, _ in layout})
    if len(nodes) < 2:
        return [world]
    out = [world]
    for node in nodes:
        ranks = tuple(r for r, (n, _, _) in enumerate(layout) if n == node)
        if len(ranks) > 1:
            host = layout[ranks[0]][2]
            out.append(GroupSpec("intra", ranks, f"node {node} ({host})"))
    for local in sorted({lr for _, lr, _ in layout}):
        ranks = tuple(r for r, (_, lr, _) in enumerate(layout) if lr == local)
        if len(ranks) > 1:
            out.append(GroupSpec("inter", ranks, f"local rank {local} across nodes"))
    return out


# The default group a cached subgroup belongs to, and the subgroup; recreating groups
# for each of the five ops would build (and, on NCCL, initialise) them five times.
_GROUPS: dict[tuple[int, ...], tuple[Any, Any]] = {}


def _new_group(ranks: tuple[int, ...]) -> Any:
    import torch.distributed as dist

    world = dist.group.WORLD
    if len(ranks) == dist.get_world_size():
        return world
    hit = _GROUPS.get(ranks)
    if hit is not None and hit[0] is world:
        return hit[1]
    g = dist.new_group(list(ranks))
    _GROUPS[ranks] = (world, g)
    return g


def _pattern(k: int, dev: Any, offset: int = 0) -> Any:
    """fp32 ``[(offset + j) % PATTERN for j in range(k)]``, built without int64 indices.

    An ``arange(count)`` in int64 would need 8 bytes per element (16 GiB for an 8 GiB
    float32 sweep point): tiling a 7-element period keeps every temporary at fp32 size.
    """
    import torch

    period = torch.arange(PATTERN, dtype=torch.float32, device=dev)
    reps = (offset % PATTERN + k) // PATTERN + 1
    return period.repeat(reps)[offset % PATTERN : offset % PATTERN + k].contiguous()


# The variants torch.distributed has a call for, out-of-place first (nccl-tests' column
# order): all_reduce and broadcast only work in place, all_to_all_single only out of place;
# all_gather / reduce_scatter run in place when the input is the output's own chunk (or the
# output the input's), as nccl-tests' in-place columns do.
VARIANTS: dict[str, tuple[bool, ...]] = {
    "all_reduce": (True,),
    "broadcast": (True,),
    "all_to_all": (False,),
    "all_gather": (False, True),
    "reduce_scatter": (False, True),
}


def _buffers(
    op: str, count: int, grank: int, n: int, dev: Any, in_place: bool = False
) -> tuple[Any, Any, Any]:
    """(input, output, expected output) of ``op`` for ``count`` elements on group rank ``grank``.

    ``count`` is nccl-tests' count: the largest buffer's elements. In-place ops return
    the same tensor as input and output; ``in_place`` all_gather takes its input from
    the output's own chunk and in-place reduce_scatter writes into the input's own
    chunk (views of one buffer). Every value is a small integer, exact in fp32, so sums
    are exact in any reduction order.
    """
    import torch

    total = n * (n + 1) // 2  # sum over ranks of (grank + 1)
    if op == "all_reduce":
        buf = _pattern(count, dev).add_(grank + 1)
        expected = _pattern(count, dev).mul_(n).add_(total)
        return buf, buf, expected
    if op == "broadcast":
        expected = _pattern(count, dev).add_(1)
        buf = expected.clone() if grank == 0 else torch.full((count,), -1.0, device=dev)
        return buf, buf, expected
    chunk = count // n
    blocks = torch.arange(n, dtype=torch.float32, device=dev).view(n, 1)
    mine = slice(grank * chunk, (grank + 1) * chunk)
    if op == "all_gather":
        expected = _pattern(chunk, dev).repeat(n).view(n, chunk).add_(blocks * PATTERN).view(-1)
        if in_place:
            out = torch.empty(count, device=dev)
            out[mine] = _pattern(chunk, dev).add_(grank * PATTERN)
            return out[mine], out, expected
        inp = _pattern(chunk, dev).add_(grank * PATTERN)
        return inp, torch.empty(count, device=dev), expected
    if op == "reduce_scatter":
        inp = _pattern(count, dev).add_(grank + 1)
        expected = _pattern(chunk, dev, offset=grank * chunk).mul_(n).add_(total)
        return inp, inp[mine] if in_place else torch.empty(chunk, device=dev), expected
    if op == "all_to_all":
        # input chunk d goes to rank d; output chunk s came from rank s
        base_in = torch.tensor(
            [((grank * n + d) * PATTERN) % _EXACT_LIMIT for d in range(n)],
            dtype=torch.float32,
            device=dev,
        ).view(n, 1)
        base_out = torch.tensor(
            [((s * n + grank) * PATTERN) % _EXACT_LIMIT for s in range(n)],
            dtype=torch.float32,
            device=dev,
        ).view(n, 1)
        inp = _pattern(chunk, dev).repeat(n).view(n, chunk).add_(base_in).remainder_(_EXACT_LIMIT)
        expected = (
            _pattern(chunk, dev).repeat(n).view(n, chunk).add_(base_out).remainder_(_EXACT_LIMIT)
        )
        return inp.view(-1), torch.empty(count, device=dev), expected.view(-1)
    raise ValueError(f"unknown collective {op!r}")


def _call(op: str, inp: Any, out: Any, group: Any, root: int) -> None:
    import torch.distributed as dist

    if op == "all_reduce":
        dist.all_reduce(inp, group=group)
    elif op == "broadcast":
        dist.broadcast(inp, src=root, group=group)
    elif op == "all_gather":
        # torch 2.13 renamed the tensor variants (*_single); older releases lack them.
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        fn(out, inp, group=group)
    elif op == "reduce_scatter":
        fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        fn(out, inp, group=group)
    elif op == "all_to_all":
        dist.all_to_all_single(out, inp, group=group)
    else:
        raise ValueError(f"unknown collective {op!r}")


@dataclass
class _Sweep:
    rows: list[Row]
    wrong_sizes: list[int]
    stopped_before: int | None


def _variant(
    op: str,
    count: int,
    grank: int,
    n: int,
    dev: Any,
    in_place: bool,
    group: Any,
    root: int,
    *,
    corrupt: bool,
    device: str,
    iters: int,
    warmup: int,
) -> tuple[int, float]:
    """Data check then timing of one variant of one size: (wrong elements here, mean seconds)."""
    inp, res, expected = _buffers(op, count, grank, n, dev, in_place)
    if corrupt:
        inp.view(-1)[0] += 1.0
    _call(op, inp, res, group, root)
    wrong_local = int((res != expected).sum().item())
    # Free the reference before timing: the timed loop should touch the same memory
    # as a bare loop of the op (at 1–4 MiB an extra buffer competes for the cache).
    del expected

    def once(inp: Any = inp, res: Any = res) -> None:
        _call(op, inp, res, group, root)

    return wrong_local, measure(once, device=device, iters=iters, warmup=warmup).mean_s


def _sweep(
    op: str,
    spec: GroupSpec,
    group: Any,
    ctx: RunContext,
    sizes: list[int],
    *,
    iters: int,
    warmup: int,
    corrupt: bool,
    t0: float,
    budget_s: float,
) -> _Sweep:
    import torch
    import torch.distributed as dist

    n = len(spec.ranks)
    grank = spec.ranks.index(ctx.rank)
    dev = torch.device(ctx.device)
    # The root is group rank 0; broadcast's ``src`` is a global rank.
    root = spec.ranks[0]
    out = _Sweep([], [], None)
    for size in sizes:
        count = size // ELEM_SIZE
        measured: dict[bool, Measured] = {}
        spent = 0.0
        for in_place in VARIANTS[op]:
            wrong_local, mean_s = _variant(
                op,
                count,
                grank,
                n,
                dev,
                in_place,
                group,
                root,
                corrupt=corrupt,
                device=ctx.device,
                iters=iters,
                warmup=warmup,
            )
            # max over ranks of the mean time and of the elapsed check time; sum of wrong
            stats = torch.tensor(
                [mean_s, time.perf_counter() - t0], dtype=torch.float64, device=dev
            )
            dist.all_reduce(stats, op=dist.ReduceOp.MAX, group=group)
            wrong = torch.tensor([wrong_local], dtype=torch.int64, device=dev)
            dist.all_reduce(wrong, group=group)
            sec, elapsed, nwrong = float(stats[0].item()), float(stats[1].item()), int(wrong.item())
            bw = bandwidth(op, size, sec, n)
            measured[in_place] = Measured(sec * 1e6, bw.algbw_gbps, bw.busbw_gbps, nwrong)
            spent += sec
        row = Row.of(
            size,
            count,
            DTYPE_NAME,
            redop_of(op),
            0 if op == "broadcast" else -1,
            measured.get(False),
            measured.get(True),
        )
        out.rows.append(row)
        if row.total_wrong:
            out.wrong_sizes.append(size)
        nxt = [s for s in sizes if s > size]
        # Projected cost of the next size: bandwidth-bound, so time grows with size.
        if nxt and elapsed + spent * (nxt[0] / size) * (iters + warmup + 1) > budget_s:
            out.stopped_before = nxt[0]
            break
    return out


@dataclass(frozen=True)
class Fabric:
    """What a group's traffic crossed, for the baselines' bars (``details.fabric``).

    ``fabric``: ``nvlink`` / ``pcie`` (NCCL inside one node, by ``nvidia-smi topo -m``),
    ``rdma`` (NCCL across nodes, IB or RoCE), ``socket`` (NCCL across nodes over TCP),
    ``gloo`` (CPU ranks, TCP), or ``unknown`` (nothing tells: no topology inside a node;
    across nodes nothing configured and no NCCL log). Across nodes it
    is what the pod's config asks for, so a run that fell back to TCP is held to the
    RDMA bar; ``fallback`` says so outright when NCCL's own log shows sockets.
    """

    fabric: str
    why: str
    observed: str | None = None  # NCCL's "Using network X" (this rank's log), when captured
    fallback: str | None = None


_NV_CELL = re.compile(r"^NV\d+$")


def intra_link(topo: str | None) -> str:
    """``nvlink`` when ``nvidia-smi topo -m`` shows an NV# link between two GPUs, ``pcie``
    when it lists two or more GPUs and none, ``unknown`` without a readable matrix (pure)."""
    if not topo:
        return "unknown"
    # matrix rows start at the line's start ("GPU0\t X \tNV18…"); the header row is indented
    rows = [ln.split() for ln in topo.splitlines() if re.match(r"GPU\d+\s", ln)]
    if len(rows) < 2:
        return "unknown"
    return "nvlink" if any(_NV_CELL.match(c) for r in rows for c in r[1:]) else "pcie"


_TOPO: list[str | None] = []


def gpu_topology() -> str | None:
    """``nvidia-smi topo -m`` of this node (asked once per process; None when unavailable)."""
    if not _TOPO:
        from mlenv.acceptance.checks.environment import run_tool

        _TOPO.append(run_tool(["nvidia-smi", "topo", "-m"], []))
    return _TOPO[0]


def fabric_of(
    backend: str, nodes: int, env: Mapping[str, str], observed: str | None, topo: str | None = None
) -> Fabric:
    """The fabric of a group spanning ``nodes`` nodes (pure).

    ``env``: the pod's environment (``MLENV_NETWORK_MODE``, ``NCCL_IB_DISABLE``,
    ``NCCL_IB_HCA``, read as fabric.transport reads them); ``observed``: the network
    NCCL's log names for this process (None when not captured); ``topo``: ``nvidia-smi
    topo -m`` (inside one node: NVLink or PCIe).
    """
    if backend != "nccl":
        return Fabric("gloo", f"backend {backend}: TCP between the processes")
    if nodes <= 1:
        link = intra_link(topo)
        why = {
            "nvlink": "inside one node, GPUs joined by NVLink (nvidia-smi topo -m shows NV#)",
            "pcie": "inside one node, no NVLink between the GPUs (nvidia-smi topo -m shows none): PCIe",
            "unknown": "inside one node; nvidia-smi topo -m unavailable, so NVLink is not known",
        }[link]
        return Fabric(link, why, observed)
    from mlenv.acceptance.checks.fabric import expectation

    exp = expectation(env)
    used_rdma = observed is not None and observed.upper().startswith("IB")
    if exp.mode == "rdma":
        fallback = None
        if observed is not None and not used_rdma:
            fallback = (
                f"rdma mode ({exp.mode_from}) but NCCL used NET/{observed}: traffic fell back to TCP "
                f"sockets, so the busbw is not the fabric's (see fabric.transport)"
            )
        return Fabric("rdma", f"across nodes, {exp.mode_from}", observed, fallback)
    if exp.mode == "tcp":
        return Fabric("socket", f"across nodes, {exp.mode_from}", observed)
    if observed is not None:
        return Fabric(
            "rdma" if used_rdma else "socket",
            f"across nodes, no mode configured; NCCL used NET/{observed}",
            observed,
        )
    return Fabric("unknown", f"across nodes; {exp.mode_from} and no NCCL log captured")


def observed_network(backend: str) -> str | None:
    """The network this process's captured NCCL log names (None: gloo, or no log)."""
    if backend != "nccl":
        return None
    from mlenv.acceptance.checks.fabric import read_log
    from mlenv.acceptance.evidence import ncclcapture

    cap = ncclcapture.active()
    return read_log(cap.path).network if cap is not None else None


def _nodes_in(spec: GroupSpec, ctx: RunContext) -> int:
    """How many nodes a group spans: 1 inside a node, one per rank across nodes (a rail)."""
    return {"intra": 1, "world": ctx.nnodes}.get(spec.scope, len(spec.ranks))


@dataclass(frozen=True)
class CollectiveOptions(CheckOptions):
    """Options of every collectives.<op> sweep (set them for all with the ``collectives`` family)."""

    min_bytes: int = option(1024, help="smallest message of the sweep, in bytes (nccl-tests -b)")
    max_bytes: int = option(
        4 * 2**20, cuda=256 * 2**20, help="largest message of the sweep, in bytes (nccl-tests -e)"
    )
    factor: int = option(4, help="each size is the previous one times this (nccl-tests -f)")
    iters: int = option(5, cuda=10, help="timed calls per size (their mean counts; nccl-tests -n)")
    warmup: int = option(2, cuda=3, help="untimed calls per size first (nccl-tests -w)")

    def problems(self) -> list[tuple[str, str]]:
        """A sweep that goes up from a positive size."""
        out = (
            at_least(self, 1, "min_bytes", "iters")
            + at_least(self, 2, "factor")
            + at_least(self, 0, "warmup")
        )
        if self.max_bytes < self.min_bytes:
            out.append(
                ("max_bytes", f"must be >= min_bytes ({self.min_bytes}), got {self.max_bytes}")
            )
        return out


class CollectiveCheck(Check):
    """Shared sweep of one collective op; subclasses name the op."""

    op: str
    Options = CollectiveOptions
    run_order = 50
    # Groups (a node's ranks, a rail across nodes) are compared on the bus bandwidth at the
    # largest size, where the fabric rather than latency decides; the sweep's peak and
    # average would repeat the same finding.
    metrics = {
        "busbw_gbps_large": higher("GB/s", trend=True),
        "busbw_gbps_max": higher("GB/s", peers=False),
        "algbw_gbps_max": higher("GB/s", peers=False),
        "busbw_gbps_avg": higher("GB/s", peers=False),
        "wrong_elements*": info("elements"),
    }

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """Sweep the op on every planned group; group leaders return the results."""
        import torch
        import torch.distributed as dist

        t0 = time.perf_counter()
        o = ctx.options_of(CollectiveOptions, self.name)
        min_b, max_b, factor, iters, warmup = o.min_bytes, o.max_bytes, o.factor, o.iters, o.warmup
        fault = ctx.fault("corrupt", self.name)
        corrupt = fault is not None and fault.get("check", "").startswith(FAMILY)

        layout: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(layout, (ctx.node_rank, ctx.local_rank, ctx.host))
        plan = plan_groups([(int(a), int(b), str(c)) for a, b, c in layout])
        groups = [_new_group(spec.ranks) for spec in plan]  # all ranks, same order
        # Phases run one after the other (world, then intra, then inter groups), so each
        # may use its share of the deadline; the shares come from the plan every rank
        # shares, so the members of a group always agree on when to stop.
        phases = [sc for sc in ("world", "intra", "inter") if any(g.scope == sc for g in plan)]
        results: list[CheckResult] = []
        for spec, group in zip(plan, groups, strict=True):
            if ctx.rank not in spec.ranks:
                continue
            ts = time.perf_counter()
            if len(spec.ranks) < 2:
                # Only a world of one gets here (plan_groups drops 1-rank subgroups):
                # no byte crosses a link, and busbw would be 0 by the formula.
                if ctx.rank == spec.ranks[0]:
                    results.append(
                        CheckResult(
                            name=self.name,
                            status=Status.SKIP,
                            scope=spec.scope,
                            reasons=[f"{self.name}: one rank, no inter-rank traffic to measure"],
                            details={"group": spec.label, "ranks": list(spec.ranks)},
                        )
                    )
                continue
            sizes = size_sweep(
                min_b, max_b, factor, elem_size=ELEM_SIZE, nranks=len(spec.ranks), op=self.op
            )
            try:
                budget = (
                    DEADLINE_SHARE * ctx.deadline_s * ((phases.index(spec.scope) + 1) / len(phases))
                )
                sw = _sweep(
                    self.op,
                    spec,
                    group,
                    ctx,
                    sizes,
                    iters=iters,
                    warmup=warmup,
                    corrupt=corrupt,
                    t0=t0,
                    budget_s=budget,
                )
            except (RuntimeError, NotImplementedError) as e:
                # Every member of the group gets the same refusal from the same backend.
                if not any(h in str(e).lower() for h in _UNSUPPORTED_HINTS):
                    raise
                if ctx.rank == spec.ranks[0]:
                    results.append(
                        CheckResult(
                            name=self.name,
                            status=Status.SKIP,
                            scope=spec.scope,
                            node=ctx.host if spec.scope == "intra" else None,
                            reasons=[f"{self.op} is not supported by {ctx.backend}: {e}"],
                            details={"group": spec.label, "ranks": list(spec.ranks)},
                            duration_s=time.perf_counter() - ts,
                        )
                    )
                continue
            if ctx.rank == spec.ranks[0]:
                results.append(self._result(ctx, spec, sw, time.perf_counter() - ts, torch))
        return results

    def _result(
        self, ctx: RunContext, spec: GroupSpec, sw: _Sweep, dur: float, torch: Any
    ) -> CheckResult:
        title = (
            f"{self.name} {spec.scope}: {spec.label}, {len(spec.ranks)} ranks, "
            f"{ctx.backend}, torch {torch.__version__}"
        )
        table = format_table(sw.rows, title)
        printed = format_nccl_tests(sw.rows, title)
        print(printed, flush=True)  # rank 0 / group leader prints, as nccl-tests does
        metrics = summarize(sw.rows)
        reasons: list[str] = []
        for r in sw.rows:
            if r.wrong:
                reasons.append(
                    f"{self.name} ({spec.scope}, {spec.label}): {r.wrong} wrong elements at "
                    f"{r.size} bytes"
                )
            if r.out_of_place is not None and r.in_place is not None and r.in_place.wrong:
                reasons.append(
                    f"{self.name} ({spec.scope}, {spec.label}): {r.in_place.wrong} wrong elements at "
                    f"{r.size} bytes in place"
                )
        status = Status.FAIL if reasons else Status.PASS
        nodes = _nodes_in(spec, ctx)
        topo = gpu_topology() if ctx.backend == "nccl" and nodes <= 1 else None
        fab = fabric_of(ctx.backend, nodes, os.environ, observed_network(ctx.backend), topo)
        if fab.fallback:
            reasons.append(f"{self.name} ({spec.scope}, {spec.label}): {fab.fallback}")
            status = Status.FAIL
        if sw.stopped_before is not None:
            reasons.append(
                f"{self.name} ({spec.scope}): sweep stopped before {sw.stopped_before} bytes: "
                f"it would not finish within its share of the {ctx.deadline_s:g} s deadline"
            )
            if status is Status.PASS:
                status = Status.WARN
        return CheckResult(
            name=self.name,
            status=status,
            scope=spec.scope,
            node=ctx.host if spec.scope == "intra" else None,
            rank=None,
            metrics=metrics,
            reasons=reasons,
            details={
                "group": spec.label,
                "ranks": list(spec.ranks),
                "nodes": nodes,
                "table": table,
                "nccl_tests": printed,
                "rows": [asdict(r) for r in sw.rows],
                "dtype": DTYPE_NAME,
                "backend": ctx.backend,
                "wrong_sizes": sw.wrong_sizes,
                "fabric": fab.fabric,
                "fabric_from": fab.why,
                "nccl_network": fab.observed,
                "large_messages": bool(sw.rows) and large_messages(ctx.backend, sw.rows[-1].size),
                "time": "max over ranks of the mean per-call time",
            },
            duration_s=dur,
        )


@register
class AllReduceCheck(CollectiveCheck):
    """all_reduce bandwidth sweep (busbw factor 2(n−1)/n)."""

    name = "collectives.all_reduce"
    op = "all_reduce"


@register
class AllGatherCheck(CollectiveCheck):
    """all_gather (into one tensor) bandwidth sweep (busbw factor (n−1)/n)."""

    name = "collectives.all_gather"
    op = "all_gather"


@register
class ReduceScatterCheck(CollectiveCheck):
    """reduce_scatter (tensor variant) bandwidth sweep (busbw factor (n−1)/n)."""

    name = "collectives.reduce_scatter"
    op = "reduce_scatter"


@register
class AllToAllCheck(CollectiveCheck):
    """all_to_all_single bandwidth sweep (busbw factor (n−1)/n)."""

    name = "collectives.all_to_all"
    op = "all_to_all"


@register
class BroadcastCheck(CollectiveCheck):
    """broadcast from the group's first rank (busbw factor 1)."""

    name = "collectives.broadcast"
    op = "broadcast"
