"""Upstream ml-dev-env's objects in a namespace we deploy into (the migration from upstream).

The public ml-dev-env project (EldritchJS/ml-dev-env) applied hand-written manifests:
StatefulSet ``ml-dev-env`` + headless Service ``ml-dev-env-headless`` (label
``app=ml-dev-env-multi``), a single-node Pod (label ``app=ml-dev-env``), Service
``ml-dev-env``, Routes ``ml-dev-vscode`` / ``ml-dev-jupyter`` / ``ml-dev-tensorboard`` (later
``ml-dev-env-vscode`` / ``-jupyter`` / ``-tensorboard``) and
the PVCs ``ml-dev-workspace`` / ``ml-datasets``. None carry our labels, so teardown never
sees them, and the StatefulSet and headless Service have the names ours use. This module
finds them (by those labels and names, never anything labelled managed-by mlenv), says
what a deploy will do with them, and removes them on request (PVCs only with purge).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlenv.cluster.api import OPENSHIFT_KINDS, ApiError, ClusterClient, Manifest
from mlenv.config.model import Cluster as ClusterConfig

LEGACY_APP_LABELS = frozenset({"ml-dev-env-multi", "ml-dev-env"})
LEGACY_NAMES: dict[str, frozenset[str]] = {
    "Service": frozenset({"ml-dev-env", "ml-dev-env-headless"}),
    # the names of upstream's first and last releases: its Routes were renamed to those ours
    # carry (ours are labelled managed-by mlenv, so never taken for upstream's)
    "Route": frozenset(
        {
            "ml-dev-vscode",
            "ml-dev-jupyter",
            "ml-dev-tensorboard",
            "ml-dev-env-vscode",
            "ml-dev-env-jupyter",
            "ml-dev-env-tensorboard",
        }
    ),
    "PersistentVolumeClaim": frozenset({"ml-dev-workspace", "ml-datasets"}),
}
# Order of removal: the workloads first, so no pod still holds a claim when PVCs go.
KINDS = ("StatefulSet", "Pod", "Route", "Service", "PersistentVolumeClaim")
MANAGED_BY = "app.kubernetes.io/managed-by"


@dataclass(frozen=True)
class LegacyObject:
    """One upstream object: its kind, name and why it counts as upstream's."""

    kind: str
    name: str
    why: str

    @property
    def ref(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


def _legacy(kind: str, obj: Manifest) -> str:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY) == "mlenv":
        return ""
    if kind == "Pod" and meta.get("ownerReferences"):
        return ""  # a StatefulSet's pod goes with its StatefulSet
    if labels.get("app") in LEGACY_APP_LABELS:
        return f"label app={labels['app']}"
    if meta.get("name") in LEGACY_NAMES.get(kind, ()):
        return "upstream ml-dev-env's name"
    return ""


def find(client: ClusterClient, namespace: str, *, openshift: bool = True) -> list[LegacyObject]:
    """Upstream ml-dev-env objects in ``namespace``, in removal order. Kinds this user may
    not list (or this API server does not serve, e.g. Route off OpenShift) are skipped:
    detection informs a deploy, it must never be what breaks one. ``openshift`` False
    (``platform: kubernetes``): no OpenShift kind is asked for."""
    out: list[LegacyObject] = []
    for kind in KINDS:
        if not openshift and kind in OPENSHIFT_KINDS:
            continue
        try:
            objs = client.list(kind, namespace)
        except ApiError:
            continue
        for obj in objs:
            why = _legacy(kind, obj)
            if why:
                out.append(LegacyObject(kind, str(obj["metadata"]["name"]), why))
    return out


def deploy_notice(cfg: ClusterConfig, objs: list[LegacyObject]) -> list[str]:
    """What ``mlenv deploy`` will do with upstream's objects, one line each."""
    if not objs:
        return []
    st = cfg.storage
    mounted = {st.workspace_claim, st.datasets_claim} - {""}
    lines = [
        f"legacy: namespace {cfg.namespace} holds {len(objs)} object(s) of upstream ml-dev-env:"
    ]
    for o in objs:
        if o.kind == "PersistentVolumeClaim":
            what = (
                "kept and mounted (storage.existing_claims)"
                if o.name in mounted
                else "kept, not mounted: name it in storage.existing_claims to use its data"
            )
        elif (o.kind, o.name) in {
            ("StatefulSet", "ml-dev-env"),
            ("Service", "ml-dev-env-headless"),
        }:
            what = "has the name ours uses: deploy refuses to overwrite it; remove it first"
        else:
            what = "left as it is (not ours)"
        lines.append(f"legacy:   {o.ref} ({o.why}): {what}")
    lines.append(
        f"legacy: remove them with `mlenv teardown {cfg.name} --legacy` "
        "(PVCs and their data only with --purge)"
    )
    return lines


def remove(
    client: ClusterClient, namespace: str, objs: list[LegacyObject], *, purge: bool
) -> tuple[list[str], list[str]]:
    """Delete ``objs`` (PVCs only with ``purge``); returns (deleted, kept) refs."""
    deleted: list[str] = []
    kept: list[str] = []
    for o in objs:
        if o.kind == "PersistentVolumeClaim" and not purge:
            kept.append(o.ref)
            continue
        if client.delete(o.kind, o.name, namespace):  # False: gone meanwhile, goal holds
            deleted.append(o.ref)
    return deleted, kept
