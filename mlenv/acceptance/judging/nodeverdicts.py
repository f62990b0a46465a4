"""Node verdicts: one status per node, GPU and link, with the action to take.

Pure and stdlib only: the judged results of a run (and the verdict's node-level outlier
findings) in, the ``node_verdicts`` section of ``results.json`` out (docs/contracts.md,
versioned by its own ``version``). Each verdict names the checks and figures behind it,
a severity, and one action from a small catalogue (:data:`ACTIONS`, docs/acceptance.md
"Node verdicts"), so an operator (or ``mlenv quarantine``) knows what to do with the node.

A node is the machine a rank ran on, as its platform names it: every rank reports it at
start-up, whatever checks run (``world.node_names``: the Kubernetes Node from the downward
API, ``MLENV_NODE_NAME`` = ``spec.nodeName``; the Slurm node from ``SLURMD_NODENAME``),
else the host (the plain host of the plan). Results written before that carry it in the
environment check's ``node_name``, still read. A node that no check measured is UNKNOWN,
never PASS: the environment check only records versions, so it counts only when it finds
the GPU busy.

A result of the whole world (or of a group of ranks) reaches the nodes two ways: a
result that every rank took part in and that passed measured every node; a result that
names ranks or nodes (``details.blame``: ``[{"rank" or "node", "action", "figure",
"status"?, "gpu"?, "uuid"?}]``, e.g. compute.quorum's disagreeing ranks, training's stragglers) is a finding
on each node it names, with the action its cause needs (silent data corruption: drain;
a slow GPU: reset it, or drain the node when all its GPUs are slow; a NIC: check-nic).
A rank or node result may name its action the same way (``details.action``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import outliers

VERSION = 1

PASS, WARN, FAIL, UNKNOWN = "PASS", "WARN", "FAIL", "UNKNOWN"
_STATUS_ORDER = {PASS: 0, UNKNOWN: 1, WARN: 2, FAIL: 3}

# Severity, mildest first, as NVIDIA Health Validation grades a node.
SEVERITIES = ("none", "info", "warning", "critical", "unknown")
_SEVERITY_ORDER = {"none": 0, "unknown": 1, "info": 2, "warning": 3, "critical": 4}


@dataclass(frozen=True)
class Action:
    """One entry of the catalogue: what to do, how bad it is, and whether quarantine applies."""

    id: str
    severity: str
    text: str  # a template: {node}, {gpu}, {a}, {b}, {check}, {rack}, {racks}
    quarantine: bool  # the node should leave the scheduler until it passes again


# The catalogue (docs/acceptance.md "Actions"): a small fixed set, so scripts can key on ids.
ACTIONS: dict[str, Action] = {
    a.id: a
    for a in (
        Action("none", "none", "nothing to do", False),
        Action(
            "recheck",
            "unknown",
            "nothing measured {node}: re-run the suite with its ranks (mlenv acceptance)",
            False,
        ),
        Action(
            "watch",
            "warning",
            "watch {node}: re-check it in the next run; quarantine it if it repeats",
            False,
        ),
        Action(
            "free-gpu",
            "info",
            "GPU {gpu} on {node} is held by another process: free it, then re-check",
            False,
        ),
        # DCGM's CONFIG severity (persistence mode off, a clock or ECC setting): a setting to
        # change, not a hardware ticket, and no reason to take the node out.
        Action(
            "configure-gpu",
            "warning",
            "fix the configuration DCGM named on {node} ({check}), e.g. enable persistence mode "
            "(nvidia-smi -pm 1 or the nvidia-persistenced service), then re-check",
            False,
        ),
        Action(
            "reset-gpu",
            "warning",
            "reset GPU {gpu} on {node} (nvidia-smi -r -i {gpu} with the node idle), "
            "then re-check; drain and open a hardware ticket if it fails again",
            True,
        ),
        Action(
            "check-nccl-net",
            "warning",
            "check NCCL_IB_HCA, the GID index and the RDMA device plugin on {node} "
            "(NCCL did not use the configured fabric)",
            True,
        ),
        Action(
            "check-nic",
            "critical",
            "check {node}'s NIC: link speed and state (ibstat, ethtool), its switch port and cable",
            True,
        ),
        Action(
            "replace-cable",
            "critical",
            "reseat or replace the cable between {a} and {b}, or check the switch "
            "path between them",
            False,
        ),
        # a rack's leaf switch or uplinks (fabric.localize with nodes.topology): its nodes
        # are fine with each other, so none of them is quarantined for it.
        Action(
            "check-rack-uplink",
            "critical",
            "check the leaf switch of rack {rack} and its uplinks (every pair "
            "crossing the rack is slow, pairs inside it are fast); its nodes need no quarantine",
            False,
        ),
        Action(
            "check-spine",
            "critical",
            "check the path between racks {racks} (the leaf uplinks and the spine "
            "between them); their nodes need no quarantine",
            False,
        ),
        Action("drain", "critical", "drain {node} and open a hardware ticket ({check})", True),
        Action(
            "check-nvswitch",
            "critical",
            "drain {node} and have its NvSwitch checked (fabric manager, nvidia-smi nvlink -s; {check})",
            True,
        ),
        Action(
            "check-cpu",
            "critical",
            "drain {node} and have its CPU checked ({check})",
            True,
        ),
    )
}


def action_text(action_id: str, **names: Any) -> str:
    """The catalogue text of ``action_id`` with its names filled in (a missing one reads ``?``)."""
    template = ACTIONS[action_id].text

    class _Default(dict[str, Any]):
        def __missing__(self, key: str) -> str:
            return "?"

    return template.format_map(_Default(names))


# Checks that record and do not measure: alone they leave a node UNKNOWN.
RECORD_ONLY = frozenset({"environment"})
_FABRIC_NET = "fabric.transport"
_LOCALIZE = "fabric.localize"
_PORTS = "fabric.ports"  # an RDMA port down, slow or flapping: the NIC, its cable or switch port


def _gpu_of(rank: int | None, hosts: list[str], cuda: bool) -> int | None:
    """A rank's GPU on its node: its index among that node's ranks (CUDA only)."""
    if not cuda or rank is None or not 0 <= rank < len(hosts):
        return None
    return sum(1 for h in hosts[:rank] if h == hosts[rank])


def _figure(r: CheckResult) -> str:
    """The first reason of a result, one line and short: the figure a drain reason quotes."""
    text = (r.reasons[0] if r.reasons else "").strip().splitlines()
    first = text[0] if text else ""
    return first if len(first) <= 120 else first[:119] + "…"


def _action_for(
    check: str,
    scope: str,
    status: str,
    *,
    busy: bool,
    gpu: int | None,
    whole_node: bool,
    named: str | None = None,
) -> str:
    if status == "ERROR":
        return "free-gpu" if busy else "recheck"
    if named is not None:  # the result knows its cause (DCGM's severity, quorum's SDC, ...)
        # A GPU to reset is the node's to drain once every GPU of it failed.
        return "drain" if named == "reset-gpu" and whole_node else named
    if status == WARN:
        return "watch"
    if check == _FABRIC_NET:
        return "check-nccl-net"
    if (check == _LOCALIZE and scope == "node") or check == _PORTS:
        return "check-nic"
    if gpu is not None and not whole_node:
        return "reset-gpu"  # one GPU of several (NVIDIA's ladder: reset first, drain if it fails again)
    return "drain"


@dataclass
class _Finding:
    check: str
    scope: str
    status: str  # FAIL | WARN | ERROR (what the result said)
    figure: str
    rank: int | None = None
    gpu: int | None = None
    metric: str | None = None
    value: float | None = None
    busy: bool = False
    action: str | None = None  # the action the result named for its cause
    uuid: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "check": self.check,
            "scope": self.scope,
            "status": self.status,
            "figure": self.figure,
        }
        for k in ("rank", "gpu", "uuid", "metric", "value", "action"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return d


def _worst_status(findings: list[_Finding], measured: bool) -> str:
    if any(f.status == FAIL for f in findings):
        return FAIL
    if not measured:
        return UNKNOWN
    return WARN if findings else PASS


def _pick(cands: list[tuple[str, _Finding | None]]) -> tuple[str, _Finding | None]:
    """The action of the gravest finding (FAIL before WARN, then severity)."""
    order = {FAIL: 2, "ERROR": 1, WARN: 0}
    return max(
        cands,
        key=lambda c: (
            order.get(c[1].status, -1) if c[1] else -1,
            _SEVERITY_ORDER[ACTIONS[c[0]].severity],
        ),
    )


# Where a node name came from, as world.node_sources records it per rank.
NODE_SOURCES = ("kubernetes", "slurm", "host")


def _platform_nodes(
    results: list[CheckResult], world: dict[str, Any]
) -> tuple[dict[str, str], dict[str, str]]:
    """Host (pod) → the node its platform named, and → where the name came from.

    Every rank reports its node at start-up (``world.node_names``/``node_sources``, one
    per rank, "" where the platform names none); runs recorded before that carry the
    Kubernetes Node in the environment check's ``node_name``.
    """
    names: dict[str, str] = {}
    sources: dict[str, str] = {}
    hosts, raw_names, raw_sources = (
        world.get("hosts"),
        world.get("node_names"),
        world.get("node_sources"),
    )
    if isinstance(hosts, list) and isinstance(raw_names, list):
        srcs = raw_sources if isinstance(raw_sources, list) else []
        for i, (h, n) in enumerate(zip(hosts, raw_names, strict=False)):
            src = str(srcs[i]) if i < len(srcs) else ""
            if isinstance(n, str) and n and src in NODE_SOURCES and str(h) not in names:
                names[str(h)], sources[str(h)] = n, src
    for r in results:
        name = (
            r.details.get("node_name")
            if r.name == "environment" and isinstance(r.details, dict)
            else None
        )
        if r.node and isinstance(name, str) and name and r.node not in names:
            names[r.node], sources[r.node] = name, "kubernetes"
    return names, sources


def _blamed(r: CheckResult) -> list[dict[str, Any]]:
    """The ranks or nodes a result names as the cause (``details.blame``), well-formed ones only."""
    raw = r.details.get("blame") if isinstance(r.details, dict) else None
    out = []
    for b in raw if isinstance(raw, list) else []:
        if not isinstance(b, dict) or b.get("action") not in ACTIONS:
            continue
        rank, node = b.get("rank"), b.get("node")
        if (isinstance(rank, int) and not isinstance(rank, bool)) or (
            isinstance(node, str) and node
        ):
            out.append(b)
    return out


@dataclass
class _Collector:
    """What the results say per node, GPU and link, gathered by :func:`build`."""

    hosts: list[str]
    cuda: bool
    k8s: dict[str, str]  # host → the node its platform named
    sources: dict[str, str] = field(default_factory=dict)  # host → kubernetes | slurm
    order: list[str] = field(default_factory=list)
    members: dict[str, list[str]] = field(default_factory=dict)
    per: dict[str, list[_Finding]] = field(default_factory=dict)
    measured: dict[str, set[str]] = field(default_factory=dict)
    gpu_findings: dict[tuple[str, int], list[_Finding]] = field(default_factory=dict)
    gpu_measured: set[tuple[str, int]] = field(default_factory=set)
    gpu_uuids: dict[tuple[str, int], str] = field(default_factory=dict)
    links: list[dict[str, Any]] = field(default_factory=list)
    racks: list[dict[str, Any]] = field(default_factory=list)

    def node_of(self, host: str) -> str:
        return self.k8s.get(host, host)

    def add_nodes(self, results: list[CheckResult]) -> None:
        """Every node in the order its hosts first appear, with the hosts (pods) on it."""
        for h in [
            *self.hosts,
            *(r.node for r in results if r.node and r.scope in ("rank", "node")),
        ]:
            if h and self.node_of(h) not in self.order:
                self.order.append(self.node_of(h))
        self.members = {n: [] for n in self.order}
        for h in dict.fromkeys([*self.hosts, *self.k8s]):
            if self.node_of(h) in self.members and h not in self.members[self.node_of(h)]:
                self.members[self.node_of(h)].append(h)
        self.per = {n: [] for n in self.order}
        self.measured = {n: set() for n in self.order}

    def hosts_of_ranks(self, r: CheckResult) -> list[str]:
        ranks = r.details.get("ranks") if isinstance(r.details, dict) else None
        out: list[str] = []
        for x in ranks if isinstance(ranks, list) else []:
            if isinstance(x, int) and 0 <= x < len(self.hosts) and self.hosts[x] not in out:
                out.append(self.hosts[x])
        return out

    def add_link(self, r: CheckResult) -> None:
        """A link or inter-node result that failed or warned: a link verdict."""
        if r.status not in (Status.FAIL, Status.WARN):
            return
        ends = (
            [s.strip() for s in (r.group or "").split("<->")]
            if r.scope == "link"
            else self.hosts_of_ranks(r)
        )
        nodes = [self.node_of(h) for h in ends if h]
        act = "replace-cable" if r.status == Status.FAIL and len(nodes) == 2 else "watch"
        names = {"a": nodes[0], "b": nodes[1]} if len(nodes) == 2 else {"node": ", ".join(nodes)}
        self.links.append(
            {
                "link": r.group or r.scope,
                "scope": r.scope,
                "nodes": nodes,
                "status": r.status.value,
                "checks": [r.name],
                "figure": _figure(r),
                "severity": ACTIONS[act].severity,
                "action": {"id": act, "text": action_text(act, **names)},
            }
        )

    def add_rack(self, r: CheckResult) -> None:
        """A rack result that failed or warned (fabric.localize with a topology): a rack verdict."""
        if r.status not in (Status.FAIL, Status.WARN):
            return
        raw = r.details.get("rack_nodes") if isinstance(r.details, dict) else None
        members = raw if isinstance(raw, dict) else {}
        racks = [str(k) for k in members]
        act = (
            "watch"
            if r.status == Status.WARN
            else ("check-rack-uplink" if r.details.get("rack_kind") == "uplink" else "check-spine")
        )
        nodes = [
            self.node_of(str(h)) for hs in members.values() if isinstance(hs, list) for h in hs
        ]
        names = {"rack": ", ".join(racks), "racks": " and ".join(racks), "node": ", ".join(nodes)}
        self.racks.append(
            {
                "rack": r.group or ", ".join(racks),
                "kind": r.details.get("rack_kind"),
                "racks": racks,
                "nodes": nodes,
                "status": r.status.value,
                "checks": [r.name],
                "figure": _figure(r),
                "severity": ACTIONS[act].severity,
                "action": {"id": act, "text": action_text(act, **names)},
            }
        )

    def add_blame(self, r: CheckResult, blamed: list[dict[str, Any]]) -> None:
        """A result naming ranks or nodes: a finding on each; a measurement of every other node
        of the ranks it covered (``details.ranks``, else the whole world)."""
        for b in blamed:
            rank = b.get("rank")
            if isinstance(rank, int) and 0 <= rank < len(self.hosts):
                host: str = self.hosts[rank]
            elif isinstance(b.get("node"), str):
                host = str(b["node"])
                rank = None
            else:
                continue
            node = self.node_of(host)
            if node not in self.per:
                continue
            gpu = b.get("gpu")
            if not isinstance(gpu, int) or isinstance(gpu, bool):
                gpu = _gpu_of(rank if isinstance(rank, int) else None, self.hosts, self.cuda)
            figure = str(b.get("figure") or "") or _figure(r)
            # An entry may grade itself below its result (a straggler WARNs in a FAILed run).
            status = FAIL if r.status == Status.FAIL else WARN
            if b.get("status") in (WARN, FAIL) and not (status == WARN and b["status"] == FAIL):
                status = str(b["status"])
            f = _Finding(
                r.name,
                r.scope,
                status,
                figure,
                rank=rank if isinstance(rank, int) else None,
                gpu=gpu,
                action=str(b["action"]),
                uuid=str(b["uuid"]) if isinstance(b.get("uuid"), str) else None,
            )
            self.per[node].append(f)
            self.measured[node].add(r.name)
            if gpu is not None:
                self.gpu_findings.setdefault((node, gpu), []).append(f)
        for node in self.covered(r):
            self.measured[node].add(r.name)

    def covered(self, r: CheckResult) -> list[str]:
        """The nodes a result's ranks ran on (``details.ranks`` when it lists them, else all),
        their GPUs counted as measured."""
        raw = r.details.get("ranks") if isinstance(r.details, dict) else None
        listed = [x for x in raw if isinstance(x, int)] if isinstance(raw, list) else []
        ranks = [k for k in listed if 0 <= k < len(self.hosts)] or range(len(self.hosts))
        nodes: list[str] = []
        for k in ranks:
            node = self.node_of(self.hosts[k])
            if node not in self.per:
                continue
            if node not in nodes:
                nodes.append(node)
            gpu = _gpu_of(k, self.hosts, self.cuda)
            if gpu is not None:
                self.gpu_measured.add((node, gpu))
        return nodes

    def add_result(self, r: CheckResult) -> None:
        """One judged result: what it measured on its node (and GPU), and its finding if any."""
        proved = r.details.get("healthy_nodes") if isinstance(r.details, dict) else None
        if isinstance(proved, list) and r.status in (Status.PASS, Status.WARN, Status.FAIL):
            # fabric.localize: the nodes a fast pair proved healthy were measured by it
            for h in proved:
                if isinstance(h, str) and self.node_of(h) in self.per:
                    self.measured[self.node_of(h)].add(r.name)
        blamed = _blamed(r) if r.scope not in ("rank", "node") else []
        if blamed and r.status in (Status.FAIL, Status.WARN):
            self.add_blame(r, blamed)
            if r.scope in ("link", "inter"):
                self.add_link(r)
            return
        if r.scope in ("world", "intra", "inter") and r.status == Status.PASS:
            # Every rank it covered took part and agreed: each of their nodes was measured.
            if r.name not in RECORD_ONLY:
                for node in self.covered(r):
                    self.measured[node].add(r.name)
            if r.scope == "intra":
                return
        if r.scope in ("link", "inter"):
            self.add_link(r)
            return
        if r.scope == "rack":
            self.add_rack(r)
            return
        where: list[str] = []
        if r.scope in ("rank", "node") and r.node:
            where = [r.node]
        elif r.scope == "intra":
            where = self.hosts_of_ranks(r)
        if len(where) != 1 or self.node_of(where[0]) not in self.per:
            return
        node = self.node_of(where[0])
        gpu = _gpu_of(r.rank, self.hosts, self.cuda) if r.scope == "rank" else None
        named = r.details.get("gpu") if isinstance(r.details, dict) else None
        if isinstance(named, int) and not isinstance(
            named, bool
        ):  # a check that names the GPU (gpu.dcgm)
            gpu = named
        uuid = r.details.get("uuid") if isinstance(r.details, dict) else None
        if gpu is not None and isinstance(uuid, str) and uuid:
            self.gpu_uuids[(node, gpu)] = uuid
        if r.status in (Status.PASS, Status.WARN, Status.FAIL) and r.name not in RECORD_ONLY:
            self.measured[node].add(r.name)
            if gpu is not None:
                self.gpu_measured.add((node, gpu))
        if r.status in (Status.WARN, Status.FAIL, Status.ERROR):
            busy = isinstance(r.details, dict) and isinstance(r.details.get("gpu_busy"), dict)
            said = r.details.get("action") if isinstance(r.details, dict) else None
            f = _Finding(
                r.name,
                r.scope,
                r.status.value,
                _figure(r),
                rank=r.rank,
                gpu=gpu,
                busy=busy,
                action=said if isinstance(said, str) and said in ACTIONS else None,
                uuid=uuid if isinstance(uuid, str) and uuid else None,
            )
            self.per[node].append(f)
            if gpu is not None:
                self.gpu_findings.setdefault((node, gpu), []).append(f)

    def add_outlier(self, fd: outliers.Finding) -> None:
        """A node-level outlier finding of the verdict becomes that node's finding."""
        if fd.level == "node" and fd.node and self.node_of(fd.node) in self.per:
            node = self.node_of(fd.node)
            self.per[node].append(
                _Finding(
                    fd.check,
                    "node",
                    fd.severity.value,
                    f"{fd.check}: {fd.short_reason()}",
                    metric=fd.metric,
                    value=fd.value,
                )
            )
            self.measured[node].add(fd.check)

    def entry(self, node: str) -> dict[str, Any]:
        """One node's verdict: status, severity, action, checks, findings and its GPUs'."""
        fs = self.per[node]
        status = _worst_status(fs, bool(self.measured[node]))
        gpus_of_node = sorted(
            {g for (n, g) in self.gpu_measured | set(self.gpu_findings) if n == node}
        )
        failing_gpus = {
            g
            for (n, g), gf in self.gpu_findings.items()
            if n == node and any(f.status == FAIL for f in gf)
        }
        # One GPU of several failing is that GPU's (reset it); all of them, the node's (drain it).
        whole = len(gpus_of_node) <= 1 or failing_gpus >= set(gpus_of_node)
        if status == PASS:
            act, why = "none", None
        elif status == UNKNOWN and not fs:
            act, why = "recheck", None
        else:
            act, why = _pick(
                [
                    (
                        _action_for(
                            f.check,
                            f.scope,
                            f.status,
                            busy=f.busy,
                            gpu=f.gpu,
                            whole_node=whole,
                            named=f.action,
                        ),
                        f,
                    )
                    for f in fs
                ]
            )
        gpu_name: Any = None
        if why is not None and why.gpu is not None:
            # The UUID where known: a pod's index is not the host's, the UUID is the GPU.
            gpu_name = why.uuid or self.gpu_uuids.get((node, why.gpu)) or why.gpu
        names = {"node": node, "gpu": gpu_name, "check": why.check if why else None}
        out: dict[str, Any] = {
            "node": node,
            "hosts": self.members[node] or [node],
            "node_from": next(
                (self.sources[h] for h in self.members[node] if h in self.sources), "host"
            ),
            "status": status,
            "severity": ACTIONS[act].severity,
            "action": {
                "id": act,
                "text": action_text(act, **names),
                "quarantine": ACTIONS[act].quarantine,
            },
            "checks": sorted(self.measured[node] | {f.check for f in fs}),
            "findings": [f.to_dict() for f in fs],
        }
        if gpus_of_node:
            out["gpus"] = []
            for g in gpus_of_node:
                gf = self.gpu_findings.get((node, g), [])
                gst = _worst_status(gf, (node, g) in self.gpu_measured)
                entry: dict[str, Any] = {"gpu": g}
                uuid = self.gpu_uuids.get((node, g)) or next((f.uuid for f in gf if f.uuid), None)
                if uuid:
                    entry["uuid"] = uuid
                entry.update({"status": gst, "findings": [f.to_dict() for f in gf]})
                out["gpus"].append(entry)
        return out


def build(
    results: list[CheckResult], findings: list[outliers.Finding], world: dict[str, Any]
) -> dict[str, Any]:
    """The ``node_verdicts`` section for judged ``results`` (the verdict's copies).

    ``findings`` are the verdict's outlier findings (node-level ones become a node's
    finding); ``world`` is results.json's ``world`` (``hosts`` per rank, ``device``).
    """
    raw_hosts = world.get("hosts")
    names, sources = _platform_nodes(results, world)
    c = _Collector(
        hosts=[str(h) for h in raw_hosts] if isinstance(raw_hosts, list) else [],
        cuda=world.get("device") == "cuda",
        k8s=names,
        sources=sources,
    )
    c.add_nodes(results)
    for r in results:
        c.add_result(r)
    for fd in findings:
        c.add_outlier(fd)
    out = {"version": VERSION, "nodes": [c.entry(node) for node in c.order], "links": c.links}
    return {**out, "racks": c.racks} if c.racks else out


def worst(section: dict[str, Any]) -> str:
    """The worst node status of a ``node_verdicts`` section (PASS when it has no node)."""
    sts = [str(n.get("status")) for n in section.get("nodes", []) if isinstance(n, dict)]
    return max(sts, key=lambda s: _STATUS_ORDER.get(s, 0), default=PASS)
