"""``status`` and ``teardown``: read and delete what one deployment owns, nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlenv.cluster.api import (
    LABEL_INSTANCE,
    Cluster,
    Forbidden,
    Manifest,
    NotFound,
    PodView,
    instance_selector,
    plural,
)
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.errors import InputError

# Every kind the plan or deploy can create, in delete order: workloads first so pods
# stop before the objects they use go away. PVCs come last and only with --purge.
TEARDOWN_KINDS = ("StatefulSet", "Pod", "Route", "Service", "BuildConfig", "ImageStream",
                  "RoleBinding", "ServiceAccount", "Secret", "ConfigMap")
CLUSTER_KINDS = ("SecurityContextConstraints", "ClusterRole")


@dataclass
class StatusReport:
    """Pods, StatefulSet readiness and PVCs of one deployment."""

    pods: list[PodView] = field(default_factory=list)
    desired: int = 0
    ready: int = 0
    pvcs: list[tuple[str, str, str]] = field(default_factory=list)  # name, phase, size


def status(cfg: ClusterConfig, client: Cluster) -> StatusReport:
    """Read the deployment's state."""
    sel = instance_selector(cfg.name)
    rep = StatusReport()
    sts = client.get("StatefulSet", "ml-dev-env", cfg.namespace)
    if sts is not None:
        rep.desired = int((sts.get("spec") or {}).get("replicas", 0))
        rep.ready = int((sts.get("status") or {}).get("readyReplicas", 0))
    rep.pods = sorted((PodView.of(p) for p in client.list("Pod", cfg.namespace, sel)),
                      key=lambda p: p.name)
    for pvc in client.list("PersistentVolumeClaim", cfg.namespace, sel):
        size = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
            "storage", "")
        rep.pvcs.append((pvc["metadata"]["name"], str((pvc.get("status") or {}).get("phase", "")),
                         str(size)))
    return rep


@dataclass
class TeardownReport:
    """What teardown deleted, and what it had to leave behind (with why)."""

    deleted: list[str] = field(default_factory=list)  # kind/name
    left: list[str] = field(default_factory=list)  # one line each: what, why, what to do
    absent_kinds: list[str] = field(default_factory=list)  # kinds this API does not serve


def _cluster_scoped_names(cfg: ClusterConfig) -> dict[str, list[str]]:
    """kind → names of the cluster-scoped objects an RDMA deploy of ``cfg`` creates."""
    from mlenv.cluster.deploy import plan

    try:
        objs = plan(cfg, "rdma", None) if cfg.rdma.enabled else []
    except InputError:
        return {}
    out: dict[str, list[str]] = {}
    for m in objs:
        if m.get("kind") in CLUSTER_KINDS:
            out.setdefault(str(m["kind"]), []).append(str(m["metadata"]["name"]))
    return out


def teardown(cfg: ClusterConfig, client: Cluster, *, purge: bool = False) -> TeardownReport:
    """Delete every object labelled with this deployment's instance and name; PVCs only
    with ``purge`` (including the ones volumeClaimTemplates created).

    Kinds the API does not serve (Route, BuildConfig, ImageStream, SCC on plain
    Kubernetes) are skipped. Cluster-scoped objects the user may not list or delete are
    reported in ``left`` by name, for an admin to remove; a Forbidden on a namespaced
    kind raises (exit 3).
    """
    sel = instance_selector(cfg.name)
    rep = TeardownReport()

    def drop(kind: str, objs: list[Manifest], ns: str | None) -> None:
        for o in objs:
            if client.delete(kind, o["metadata"]["name"], ns, cascade="foreground"):
                rep.deleted.append(f"{kind.lower()}/{o['metadata']['name']}")

    for kind in TEARDOWN_KINDS:
        try:
            objs = client.list(kind, cfg.namespace, sel)
        except NotFound:  # e.g. Route on plain Kubernetes: nothing of that kind can exist
            rep.absent_kinds.append(kind)
            continue
        drop(kind, objs, cfg.namespace)
    for kind in CLUSTER_KINDS:
        try:
            objs = client.list(kind, None, sel)
        except NotFound:
            rep.absent_kinds.append(kind)
            continue
        except Forbidden:
            names = _cluster_scoped_names(cfg).get(kind, [])
            what = ", ".join(f"{plural(kind)}/{n}" for n in names) or f"any {plural(kind)}"
            rep.left.append(f"{what}: you may not list {plural(kind)} (cluster-scoped); if this "
                            "deployment created them, ask a cluster admin to delete them "
                            f"(oc delete {plural(kind)} -l {LABEL_INSTANCE}={cfg.name})")
            continue
        for o in objs:
            name = o["metadata"]["name"]
            try:
                if client.delete(kind, name, None):
                    rep.deleted.append(f"{kind.lower()}/{name}")
            except Forbidden:
                rep.left.append(f"{plural(kind)}/{name}: you may not delete it "
                                "(cluster-scoped): ask a cluster admin to "
                                f"(oc delete {plural(kind)} {name})")
    if purge:
        drop("PersistentVolumeClaim", client.list("PersistentVolumeClaim", cfg.namespace, sel),
             cfg.namespace)
    return rep
