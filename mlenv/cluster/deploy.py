"""``deploy``: plan → preflight → ssh Secret → server-side apply → wait for Ready pods.

Nothing is applied unless the whole plan rendered and validated and preflight found no
blocking problem. Progress goes to the ``say`` callback; only the CLI prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mlenv.cluster import keys
from mlenv.cluster.api import (
    FIELD_MANAGER,
    LABEL_COMPONENT,
    ApplyResult,
    Cluster,
    Invalid,
    Manifest,
    PodView,
    instance_selector,
)
from mlenv.cluster.preflight import PreflightReport, Problem, run_preflight
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.config.model import Mode
from mlenv.errors import InfraError, InputError

Renderer = Callable[[ClusterConfig, Mode, "int | None"], list[Manifest]]
Say = Callable[[str], None]
STATEFULSET = "ml-dev-env"
POLL_S = 2.0


class PreflightFailed(InfraError):
    """Preflight found blocking problems (exit 2 when the config is at fault, else 3)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.exit_code = 2 if any(p.input for p in problems) else 3
        lines = "\n".join(f"  - {p.message}" for p in problems)
        super().__init__(f"preflight failed, nothing was applied:\n{lines}")


class DeployTimeout(InfraError):
    """Pods were not all Ready by the deadline; the message carries the reasons."""


@dataclass
class DeployOptions:
    """What the user asked for."""

    mode: Mode = "rdma"
    nodes: int | None = None
    dry_run: Literal["client", "server"] | None = None
    timeout: float = 900.0
    no_fallback: bool = False


@dataclass
class DeployReport:
    """What deploy did."""

    requested_mode: Mode
    mode: Mode
    nodes: int
    manifests: list[Manifest]
    fallback_reasons: list[str] = field(default_factory=list)
    preflight: PreflightReport | None = None
    applied: list[ApplyResult] = field(default_factory=list)
    ssh_secret: str = ""
    recreated: list[str] = field(default_factory=list)
    ready: int = 0

    @property
    def unchanged(self) -> bool:
        """True when the apply changed no object."""
        return bool(self.applied) and all(a.action == "unchanged" for a in self.applied) \
            and not self.recreated and self.ssh_secret == "kept"


def default_renderer(cfg: ClusterConfig, mode: Mode, nodes: int | None) -> list[Manifest]:
    """The real renderer (imported lazily; it validates against the API schemas)."""
    from mlenv.render.plan import render_cluster

    return render_cluster(cfg, mode, nodes)


def plan(cfg: ClusterConfig, mode: Mode, nodes: int | None,
         render: Renderer | None = None) -> list[Manifest]:
    """The manifests deploy would apply, in apply order (raises InputError if invalid)."""
    return (render or default_renderer)(cfg, mode, nodes)


def _worker_count(manifests: list[Manifest]) -> int:
    for m in manifests:
        if m.get("kind") == "StatefulSet":
            return int((m.get("spec") or {}).get("replicas", 1))
    raise InputError("the plan has no StatefulSet")


def _immutable_view(sts: Manifest) -> dict[str, Any]:
    """The immutable StatefulSet fields, normalised so server defaults don't count as changes."""
    spec = sts.get("spec") or {}
    vcts = []
    for v in spec.get("volumeClaimTemplates") or []:
        vs = v.get("spec") or {}
        vcts.append({"name": (v.get("metadata") or {}).get("name"),
                     "accessModes": vs.get("accessModes"),
                     "storageClassName": vs.get("storageClassName"),
                     "storage": ((vs.get("resources") or {}).get("requests") or {}).get("storage")})
    return {"selector": (spec.get("selector") or {}).get("matchLabels"),
            "serviceName": spec.get("serviceName"),
            "podManagementPolicy": spec.get("podManagementPolicy", "OrderedReady"),
            "volumeClaimTemplates": vcts}


def immutable_changes(live: Manifest, planned: Manifest) -> list[str]:
    """Names of the immutable StatefulSet fields that differ between live and planned."""
    a, b = _immutable_view(live), _immutable_view(planned)
    changed = []
    for k in a:
        if k == "volumeClaimTemplates":
            # the server fills in the default storage class: only an explicit change counts
            la = [{**x, "storageClassName": x["storageClassName"] if y["storageClassName"] else None}
                  for x, y in zip(a[k], b[k], strict=False)]
            if len(a[k]) != len(b[k]) or la != b[k]:
                changed.append(k)
        elif a[k] != b[k]:
            changed.append(k)
    return changed


def deploy(cfg: ClusterConfig, opts: DeployOptions, client: Cluster | None, *,
           render: Renderer | None = None, say: Say = lambda _m: None) -> DeployReport:
    """Deploy a cluster config. ``client`` may be None only for ``dry_run="client"``."""
    requested: Mode = opts.mode
    mode = cfg.effective_mode(requested)
    if mode != requested:
        say(f"notice: cluster {cfg.name} has network.rdma.enabled false: deploying in TCP mode")
    manifests = plan(cfg, mode, opts.nodes, render)
    nodes = _worker_count(manifests)
    rep = DeployReport(requested, mode, nodes, manifests)
    if opts.dry_run == "client":
        return rep
    if client is None:
        raise InputError("no cluster connection (internal: client is None)")
    pre = run_preflight(cfg, mode, nodes, manifests, client)
    for note in pre.notes:
        say(f"preflight: note: {note}")
    if mode == "rdma" and pre.rdma:
        reasons = [p.message for p in pre.rdma]
        if opts.no_fallback or not cfg.rdma.allow_tcp_fallback:
            why = "--no-fallback" if opts.no_fallback else "rdma.allow_tcp_fallback is false"
            raise PreflightFailed(pre.blocking + pre.rdma + [
                Problem("rdma", f"RDMA prerequisites missing and TCP fallback is off ({why})")])
        banner = "!" * 72
        say(banner)
        say("!! RDMA PREREQUISITES MISSING: FALLING BACK TO TCP (NCCL over sockets)")
        for r in reasons:
            say(f"!!   - {r}")
        say("!! fix these and re-deploy for RDMA; forbid this with rdma.allow_tcp_fallback: false")
        say(banner)
        rep.fallback_reasons = reasons
        mode = "tcp"
        manifests = plan(cfg, mode, opts.nodes, render)
        pre = run_preflight(cfg, mode, nodes, manifests, client)
        rep.mode, rep.manifests = mode, manifests
    rep.preflight = pre
    if pre.blocking:
        raise PreflightFailed(pre.blocking)
    say(f"preflight: ok ({pre.user} on {pre.server}, namespace {cfg.namespace})")
    server_dry = opts.dry_run == "server"
    labels = {**instance_selector(cfg.name), "app.kubernetes.io/part-of": "ml-dev-env",
              "app.kubernetes.io/managed-by": "mlenv", LABEL_COMPONENT: "ssh"}
    rep.ssh_secret = keys.ensure_ssh_secret(client, cfg.namespace, labels,
                                            f"mlenv@{cfg.name}", dry_run=server_dry)
    if any(m.get("kind") == "Pod" and any(
            (e.get("valueFrom") or {}).get("secretKeyRef", {}).get("name") == keys.DEVTOOLS_SECRET
            for c in (m.get("spec") or {}).get("containers") or [] for e in c.get("env") or [])
           for m in manifests) or _mounts_devtools_secret(manifests):
        keys.ensure_devtools_secret(client, cfg.namespace, {**labels, LABEL_COMPONENT: "dev"},
                                    dry_run=server_dry)
    _apply_all(cfg, manifests, client, rep, server_dry, say)
    if server_dry:
        return rep
    rep.ready = wait_ready(cfg, nodes, client, opts.timeout, say)
    return rep


def _mounts_devtools_secret(manifests: list[Manifest]) -> bool:
    for m in manifests:
        for v in ((m.get("spec") or {}).get("volumes") or []):
            if (v.get("secret") or {}).get("secretName") == keys.DEVTOOLS_SECRET:
                return True
    return False


def _apply_all(cfg: ClusterConfig, manifests: list[Manifest], client: Cluster,
               rep: DeployReport, dry_run: bool, say: Say) -> None:
    ns = cfg.namespace
    for m in manifests:
        name = m["metadata"]["name"]
        if m.get("kind") == "StatefulSet":
            live = client.get("StatefulSet", name, ns)
            changed = immutable_changes(live, m) if live is not None else []
            if changed:
                _recreate(client, ns, name, changed, rep, dry_run, say)
        scope = None if m.get("kind") in ("SecurityContextConstraints", "ClusterRole") else ns
        try:
            res = client.apply(m, scope, field_manager=FIELD_MANAGER, dry_run=dry_run)
        except Invalid as e:
            if m.get("kind") != "StatefulSet" or name in rep.recreated:
                raise
            # the live object differs in a way our comparison did not see: trust the 422
            _recreate(client, ns, name, [str(e)], rep, dry_run, say)
            res = client.apply(m, scope, field_manager=FIELD_MANAGER, dry_run=dry_run)
        rep.applied.append(res)
        say(f"{m['kind'].lower()}/{name} {res.action}" + (" (server dry run)" if dry_run else ""))


def _recreate(client: Cluster, ns: str, name: str, changed: list[str], rep: DeployReport,
              dry_run: bool, say: Say) -> None:
    say(f"statefulset/{name}: immutable field(s) changed ({', '.join(changed)}): "
        "deleting and recreating it; pods are replaced, PVCs are kept")
    rep.recreated.append(name)
    if dry_run:
        return
    # foreground: the pods go with it (orphan=false) before the new one takes their names
    client.delete("StatefulSet", name, ns, cascade="foreground")
    deadline = client.monotonic() + 120
    while client.get("StatefulSet", name, ns) is not None:
        if client.monotonic() > deadline:
            raise DeployTimeout(f"statefulset/{name} was not deleted within 120 s")
        client.pause(1.0)


def pending_reasons(cfg: ClusterConfig, client: Cluster, pods: list[PodView]) -> list[str]:
    """Why pods are not Ready, from their events and the StatefulSet's (latest first)."""
    out: list[str] = []
    for ev in client.events(cfg.namespace, "StatefulSet", STATEFULSET):
        if ev.type == "Warning":
            out.append(f"statefulset/{STATEFULSET}: {ev.reason}: {ev.message}")
    for p in pods:
        if p.ready:
            continue
        warnings = [e for e in client.events(cfg.namespace, "Pod", p.name) if e.type == "Warning"]
        if warnings:
            e = warnings[-1]
            out.append(f"{p.name}: {e.reason}: {e.message}")
        elif p.waiting_reason:
            out.append(f"{p.name}: {p.phase}: {p.waiting_reason}")
        else:
            out.append(f"{p.name}: {p.phase}, not Ready yet")
    return out


def worker_pods(cfg: ClusterConfig, client: Cluster) -> list[PodView]:
    """The StatefulSet's pods, ordered by index."""
    sel = {**instance_selector(cfg.name), LABEL_COMPONENT: "worker"}
    pods = [PodView.of(p) for p in client.list("Pod", cfg.namespace, sel)]
    return sorted(pods, key=lambda p: int(p.name.rsplit("-", 1)[-1])
                  if p.name.rsplit("-", 1)[-1].isdigit() else 1 << 30)


def wait_ready(cfg: ClusterConfig, nodes: int, client: Cluster, timeout: float,
               say: Say) -> int:
    """Poll until ``nodes`` worker pods are Ready; DeployTimeout with reasons at the deadline."""
    deadline = client.monotonic() + timeout
    last = ""
    while True:
        pods = worker_pods(cfg, client)
        ready = sum(p.ready for p in pods)
        line = f"waiting: {ready}/{nodes} pods Ready " + " ".join(
            f"{p.name}={'Ready' if p.ready else p.waiting_reason or p.phase}" for p in pods
        ) if pods else f"waiting: 0/{nodes} pods Ready (none created yet)"
        if line != last:
            say(line)
            last = line
        if ready >= nodes and len(pods) >= nodes:
            return ready
        if client.monotonic() >= deadline:
            reasons = pending_reasons(cfg, client, pods) or ["no pods were created"]
            raise DeployTimeout(f"{ready}/{nodes} pods Ready after {timeout:g} s; why:\n"
                                + "\n".join(f"  - {r}" for r in reasons))
        client.pause(POLL_S)
