"""Deploy preflight: read the live cluster and explain everything missing before applying.

Problems come in two kinds: ``blocking`` ones stop the deploy in any mode (wrong API
server, missing namespace, nodes, storage classes, permissions) and ``rdma`` ones only
stop RDMA mode, which may then fall back to TCP (see :mod:`mlenv.cluster.deploy`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlparse

from mlenv.cluster.api import GPU_RESOURCE, ApiError, Cluster, Forbidden, Manifest, NotFound
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.config.model import Mode


@dataclass(frozen=True)
class Problem:
    """One thing the cluster lacks for this deployment."""

    kind: Literal["blocking", "rdma"]
    message: str
    input: bool = False  # the config is wrong (exit 2) rather than the cluster (exit 3)


@dataclass
class PreflightReport:
    """What preflight found: problems, and notes worth printing (skipped checks)."""

    user: str = ""
    server: str = ""
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def blocking(self) -> list[Problem]:
        """Problems that stop the deploy whatever the mode."""
        return [p for p in self.problems if p.kind == "blocking"]

    @property
    def rdma(self) -> list[Problem]:
        """Problems that only stop RDMA mode."""
        return [p for p in self.problems if p.kind == "rdma"]


def _host_port(url: str) -> tuple[str, int | None]:
    u = urlparse(url if "://" in url else f"https://{url}")
    return (u.hostname or "").lower(), u.port


def same_server(configured: str, live: str) -> bool:
    """``cluster.api`` (host, host:port or URL) names the server ``live`` is logged in to."""
    ch, cp = _host_port(configured)
    lh, lp = _host_port(live)
    return ch == lh and (cp is None or lp is None or cp == lp)


def _quantity(v: object) -> float:
    try:
        return float(str(v))
    except ValueError:
        return 0.0


def _ready(node: Manifest) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _alloc(node: Manifest, res: str) -> float:
    return _quantity(((node.get("status") or {}).get("allocatable") or {}).get(res, 0))


def run_preflight(cfg: ClusterConfig, mode: Mode, nodes: int, manifests: list[Manifest],
                  client: Cluster) -> PreflightReport:
    """Check the live cluster against the plan; raises only when the API cannot be reached."""
    rep = PreflightReport(user=client.whoami(), server=client.server())
    add = rep.problems.append
    ns = cfg.namespace
    if cfg.cluster.api and not same_server(cfg.cluster.api, rep.server):
        add(Problem("blocking", f"logged in to {rep.server}, but cluster.api of {cfg.name!r} is "
                    f"{cfg.cluster.api}: run `oc login {cfg.cluster.api}` (or fix cluster.api)",
                    input=True))
        return rep  # everything else would describe the wrong cluster
    try:
        present = client.get("Namespace", ns, None) is not None
    except Forbidden:
        present = client.get("Project", ns, None) is not None
    if not present:
        add(Problem("blocking", f"namespace {ns!r} does not exist (or you cannot see it): "
                    f"`oc new-project {ns}` or ask an admin"))
        return rep
    for verb, res in (("create", "statefulsets"), ("create", "services"),
                      ("create", "secrets"), ("create", "pods/exec")):
        if not client.can_i(verb, res, ns):
            add(Problem("blocking", f"user {rep.user} may not {verb} {res} in namespace {ns}"))
    _check_nodes(cfg, mode, nodes, client, rep)
    if mode == "rdma":
        for net in cfg.rdma.networks:
            nns, _, name = net.rpartition("/")
            try:
                found = client.get("NetworkAttachmentDefinition", name, nns or ns) is not None
            except ApiError as e:  # no Multus CRD at all reads as "no such resource type"
                found, why = False, str(e)
            else:
                why = "not found"
            if not found:
                add(Problem("rdma", f"Multus NetworkAttachmentDefinition {nns or ns}/{name} "
                            f"is missing ({why})"))
        for m in manifests:
            if m.get("kind") == "SecurityContextConstraints":
                scc = m["metadata"]["name"]
                try:
                    exists = client.get("SecurityContextConstraints", scc, None) is not None
                except NotFound:
                    exists = False
                    rep.notes.append("the API has no SecurityContextConstraints (not OpenShift)")
                if not exists and not client.can_i("create", "securitycontextconstraints"):
                    add(Problem("rdma", f"SCC {scc} (IPC_LOCK for RDMA) does not exist and "
                                f"{rep.user} may not create it: ask a cluster admin to apply "
                                f"k8s/{cfg.name}/rdma/ once"))
    st = cfg.storage
    classes = [st.class_rwx] if st.mode == "rwx" else [st.class_rwo]
    for sc in sorted({c for c in classes if c}):
        try:
            if client.get("StorageClass", sc, None) is None:
                add(Problem("blocking", f"storage class {sc!r} does not exist", input=True))
        except Forbidden:
            rep.notes.append(f"cannot read storage classes (forbidden): {sc!r} not checked")
    return rep


def _check_nodes(cfg: ClusterConfig, mode: Mode, nodes: int, client: Cluster,
                 rep: PreflightReport) -> None:
    add = rep.problems.append
    per_node = cfg.gpus.per_node
    rdma_res = cfg.rdma.resources if mode == "rdma" else ()
    try:
        if cfg.gpu_nodes:
            objs = []
            for name in cfg.gpu_nodes:
                node = client.get("Node", name, None)
                if node is None:
                    add(Problem("blocking", f"node {name} (nodes.gpu_nodes) does not exist",
                                input=True))
                else:
                    objs.append(node)
        else:
            objs = client.list("Node", None)
    except Forbidden:
        rep.notes.append("cannot read nodes (forbidden): GPU and RDMA capacity not checked")
        return
    usable = []
    for node in objs:
        name = node["metadata"]["name"]
        if not _ready(node):
            if cfg.gpu_nodes:
                add(Problem("blocking", f"node {name} is not Ready"))
            continue
        gpus = _alloc(node, GPU_RESOURCE)
        if gpus < per_node:
            if cfg.gpu_nodes:
                add(Problem("blocking", f"node {name} has {gpus:g} allocatable {GPU_RESOURCE}, "
                            f"needs {per_node}"))
            continue
        usable.append(node)
    if len(usable) < nodes:
        add(Problem("blocking", f"{len(usable)} Ready node(s) with {per_node} allocatable "
                    f"{GPU_RESOURCE}, {nodes} needed (one pod per node)"))
    for r in rdma_res:
        have = [n for n in usable if _alloc(n, r.name) >= r.count]
        if len(have) < nodes:
            lacking = sorted(n["metadata"]["name"] for n in usable if n not in have)
            add(Problem("rdma", f"{len(have)} node(s) offer {r.count} allocatable {r.name}, "
                        f"{nodes} needed" + (f" (lacking: {', '.join(lacking)})" if lacking else "")))
