"""Node verdicts: one status per node, GPU and link, with the action to take.

Pure and stdlib only: the judged results of a run (and the verdict's node-level outlier
findings) in, the ``node_verdicts`` section of ``results.json`` out (docs/contracts.md,
versioned by its own ``version``). Each verdict names the checks and figures behind it,
a severity, and one action from a small catalogue (:data:`ACTIONS`, docs/acceptance.md
"Node verdicts"), so an operator (or ``mlenv quarantine``) knows what to do with the node.

A node is the machine a rank ran on: the Kubernetes Node when the pod learnt it through
the downward API (``MLENV_NODE_NAME`` = ``spec.nodeName``, recorded by the environment
check), else the host (the Slurm node or plain host; on Kubernetes without it, the
pod). A node that no check measured is UNKNOWN, never PASS: the environment check only
records versions, so it counts only when it finds the GPU busy.
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
    check: str, scope: str, status: str, *, busy: bool, gpu: int | None, whole_node: bool
) -> str:
    if status == WARN:
        return "watch"
    if status == "ERROR":
        return "free-gpu" if busy else "recheck"
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

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "check": self.check,
            "scope": self.scope,
            "status": self.status,
            "figure": self.figure,
        }
        for k in ("rank", "gpu", "metric", "value"):
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


def _kubernetes_nodes(results: list[CheckResult]) -> dict[str, str]:
    """Host (pod) → the Kubernetes Node the environment check recorded for it (``node_name``)."""
    k8s: dict[str, str] = {}
    for r in results:
        name = (
            r.details.get("node_name")
            if r.name == "environment" and isinstance(r.details, dict)
            else None
        )
        if r.node and isinstance(name, str) and name:
            k8s[r.node] = name
    return k8s


@dataclass
class _Collector:
    """What the results say per node, GPU and link, gathered by :func:`build`."""

    hosts: list[str]
    cuda: bool
    k8s: dict[str, str]
    order: list[str] = field(default_factory=list)
    members: dict[str, list[str]] = field(default_factory=dict)
    per: dict[str, list[_Finding]] = field(default_factory=dict)
    measured: dict[str, set[str]] = field(default_factory=dict)
    gpu_findings: dict[tuple[str, int], list[_Finding]] = field(default_factory=dict)
    gpu_measured: set[tuple[str, int]] = field(default_factory=set)
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

    def add_result(self, r: CheckResult) -> None:
        """One judged result: what it measured on its node (and GPU), and its finding if any."""
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
        if r.status in (Status.PASS, Status.WARN, Status.FAIL) and r.name not in RECORD_ONLY:
            self.measured[node].add(r.name)
            if gpu is not None:
                self.gpu_measured.add((node, gpu))
        if r.status in (Status.WARN, Status.FAIL, Status.ERROR):
            busy = isinstance(r.details, dict) and isinstance(r.details.get("gpu_busy"), dict)
            f = _Finding(
                r.name, r.scope, r.status.value, _figure(r), rank=r.rank, gpu=gpu, busy=busy
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
                            f.check, f.scope, f.status, busy=f.busy, gpu=f.gpu, whole_node=whole
                        ),
                        f,
                    )
                    for f in fs
                ]
            )
        names = {"node": node, "gpu": why.gpu if why else None, "check": why.check if why else None}
        out: dict[str, Any] = {
            "node": node,
            "hosts": self.members[node] or [node],
            "node_from": "kubernetes" if any(h in self.k8s for h in self.members[node]) else "host",
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
                out["gpus"].append({"gpu": g, "status": gst, "findings": [f.to_dict() for f in gf]})
        return out


def build(
    results: list[CheckResult], findings: list[outliers.Finding], world: dict[str, Any]
) -> dict[str, Any]:
    """The ``node_verdicts`` section for judged ``results`` (the verdict's copies).

    ``findings`` are the verdict's outlier findings (node-level ones become a node's
    finding); ``world`` is results.json's ``world`` (``hosts`` per rank, ``device``).
    """
    raw_hosts = world.get("hosts")
    c = _Collector(
        hosts=[str(h) for h in raw_hosts] if isinstance(raw_hosts, list) else [],
        cuda=world.get("device") == "cuda",
        k8s=_kubernetes_nodes(results),
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
