"""``status`` and ``teardown``: read and delete what one deployment owns, nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlenv.cluster.api import Cluster, Forbidden, Manifest, NotFound, PodView, instance_selector
from mlenv.config.model import Cluster as ClusterConfig

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


def teardown(cfg: ClusterConfig, client: Cluster, *, purge: bool = False) -> list[str]:
    """Delete every object labelled with this deployment's instance and name; PVCs only
    with ``purge`` (including the ones volumeClaimTemplates created). Returns kind/name."""
    sel = instance_selector(cfg.name)
    deleted: list[str] = []

    def drop(kind: str, objs: list[Manifest], ns: str | None) -> None:
        for o in objs:
            if client.delete(kind, o["metadata"]["name"], ns, cascade="foreground"):
                deleted.append(f"{kind.lower()}/{o['metadata']['name']}")

    for kind in TEARDOWN_KINDS:
        drop(kind, client.list(kind, cfg.namespace, sel), cfg.namespace)
    for kind in CLUSTER_KINDS:
        try:
            drop(kind, client.list(kind, None, sel), None)
        except (NotFound, Forbidden):  # not OpenShift, or not ours to list: nothing to delete
            continue
    if purge:
        drop("PersistentVolumeClaim", client.list("PersistentVolumeClaim", cfg.namespace, sel),
             cfg.namespace)
    return deleted
