"""``teardown``: delete what one deployment created, nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlenv.cluster.api import (
    LABEL_INSTANCE,
    OPENSHIFT_KINDS,
    ClusterClient,
    Forbidden,
    Manifest,
    NotFound,
    instance_selector,
    plural,
)
from mlenv.cluster.nodepool import (
    labelled_nodes,
    pinned_by_label,
    pool_label,
    pool_selector,
    take_labels,
)
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.contract import ANNOTATION_CREATED, APP, LABEL_NAME, LABEL_NAMESPACE
from mlenv.errors import InputError
from mlenv.render.names import workload
from mlenv.workload import WORKER_KINDS

# Every kind the plan or deploy can create, in delete order: workloads first so pods
# stop before the objects they use go away (the re-check CronJob before all, so no
# scheduled run starts into a half-deleted deployment; its Jobs and pods go with it).
# PVCs come last and only with --purge.
TEARDOWN_KINDS = (
    "CronJob",
    *WORKER_KINDS,
    "Pod",
    "Route",
    "Service",
    "NetworkPolicy",
    "BuildConfig",
    "ImageStream",
    "RoleBinding",
    "Role",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
)
CLUSTER_KINDS = ("SecurityContextConstraints", "ClusterRole")
# the image build survives a teardown (upstream's clean-multi-node kept it): a
# redeploy then starts from the built image instead of a 15-minute rebuild. --purge deletes it.
BUILD_KINDS = ("BuildConfig", "ImageStream")


@dataclass
class TeardownReport:
    """What teardown deleted, and what it had to leave behind (with why)."""

    deleted: list[str] = field(default_factory=list)  # kind/name
    left: list[str] = field(default_factory=list)  # one line each: what, why, what to do
    kept: list[str] = field(default_factory=list)  # kind/name kept on purpose (the image build)
    absent_kinds: list[str] = field(default_factory=list)  # kinds this API does not serve
    # nodes.pin_by: label: the pinned nodes the pool label was taken off (would be, dry run)
    unlabelled: list[str] = field(default_factory=list)


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


# Kinds made outside the plan: deploy's Secrets; the re-check's CronJob (and its pods).
MADE_BESIDE_PLAN = frozenset({"Secret", "Pod", "CronJob", "ConfigMap"})


def planned_kinds(cfg: ClusterConfig) -> frozenset[str] | None:
    """Every kind a deploy of ``cfg`` can make, in any mode (None: the config no longer
    renders, so any kind may be there). Teardown lists only these: a namespace ``edit``
    user may not list RoleBindings, and a TCP deployment never made one; on
    ``platform: kubernetes`` no OpenShift kind is read at all."""
    from mlenv.cluster.deploy import plan

    kinds: set[str] = set(MADE_BESIDE_PLAN)
    try:
        for mode in ("tcp", "rdma") if cfg.rdma.enabled else ("tcp",):
            kinds |= {str(m["kind"]) for m in plan(cfg, mode, None)}
    except InputError:
        return None
    if not cfg.traits.openshift:
        kinds -= OPENSHIFT_KINDS
    return frozenset(kinds)


def created_by_mlenv(obj: Manifest) -> bool:
    """True for objects deploy created. Objects from before the marker existed have fixed
    mlenv names and count as created, except a ServiceAccount: its name comes from the
    config and users pre-create it (upstream told them to), so unmarked it is adopted."""
    meta = obj.get("metadata") or {}
    if ANNOTATION_CREATED in (meta.get("annotations") or {}):
        return True
    return obj.get("kind") != "ServiceAccount"


def _pvcs_in_use_by_others(cfg: ClusterConfig, client: ClusterClient) -> dict[str, str]:
    """claim name → the pod of another instance (or no instance) that mounts it."""
    out: dict[str, str] = {}
    for pod in client.list("Pod", cfg.namespace):
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_INSTANCE) == cfg.name and labels.get(LABEL_NAME) == APP:
            continue
        for v in (pod.get("spec") or {}).get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                out[str(claim)] = str(pod["metadata"]["name"])
    return out


def _bound_elsewhere(client: ClusterClient, cfg: ClusterConfig, role: str) -> list[str]:
    """RoleBindings that are not this deployment's and grant ``role`` (a ClusterRole):
    deleting the role (and its SCC) would break their pods' next admission."""
    try:
        bindings = client.list("RoleBinding", None)
        scope = ""
    except Forbidden:
        bindings, scope = client.list("RoleBinding", cfg.namespace), " (this namespace only)"
    out = []
    for b in bindings:
        meta = b.get("metadata") or {}
        ref = b.get("roleRef") or {}
        if ref.get("kind") != "ClusterRole" or ref.get("name") != role:
            continue
        labels = meta.get("labels") or {}
        if meta.get("namespace") == cfg.namespace and labels.get(LABEL_INSTANCE) == cfg.name:
            continue
        out.append(f"rolebinding {meta.get('namespace')}/{meta.get('name')}{scope}")
    return out


def teardown(
    cfg: ClusterConfig, client: ClusterClient, *, purge: bool = False, dry_run: bool = False
) -> TeardownReport:
    """Delete what this deployment created, nothing else.

    ``dry_run``: read and decide exactly as a real teardown, change nothing;
    ``deleted`` then lists what would be deleted, ``left`` what would be kept.

    - Namespaced objects labelled with this instance, and only those deploy created
      (:func:`created_by_mlenv`); an adopted ServiceAccount keeps existing, with mlenv's
      labels released.
    - Cluster-scoped objects (RDMA SCC, ClusterRole) only when they carry this namespace's
      label too and no RoleBinding of another deployment still grants them; one named
      the old way (without the namespace) is left, with why.
    - PVCs (including the volumeClaimTemplate ones) only with ``purge``, and never one a
      pod of another instance mounts; the BuildConfig and ImageStream too (``kept``
      otherwise: a redeploy then starts from the built image).
    - Pods only the workload's own (by ownership and rank) and the dev Pod: a pod
      that merely carries our labels is a namespace neighbour's and is kept.

    Only kinds a deploy of ``cfg`` can make are read (:func:`planned_kinds`: no OpenShift
    kind for ``platform: kubernetes``); kinds the API does not serve are skipped.
    Cluster-scoped objects the user may not list or delete are reported in ``left`` by
    name, for an admin to remove; a Forbidden on a namespaced kind raises (exit 3) unless
    the user may not create that kind either (then they made none: a namespace ``edit``
    user and RoleBindings).
    """
    from mlenv.cluster.pods import split_pods

    sel = instance_selector(cfg.name)
    rep = TeardownReport()
    made = planned_kinds(cfg)
    kinds = [k for k in TEARDOWN_KINDS if made is None or k in made]
    wl = workload(cfg).kind
    # every kind in one read (one process, not one per kind); when that fails (a kind
    # the API does not serve, one the user may not list) each kind is read alone below,
    # meeting its own refusal
    try:
        listed: dict[str, list[Manifest]] | None = client.list_many(kinds, cfg.namespace, sel)
    except (NotFound, Forbidden):
        listed = None
    # the workload's pods, read before the workload (and its uid) goes
    both = {wl, "Pod"} <= set(kinds) and listed is not None
    split = split_pods(cfg, client, listed if both else None)
    ours = {str(p["metadata"]["name"]) for p in split.workers + split.leaving + split.dev}
    if pinned_by_label(cfg):
        # before the deletes: a Node patch is milliseconds on an idle server, and waits
        # behind 512 pods' deletions after them (60 s here at 512 nodes, against 4 s)
        _unpin(cfg, client, rep, dry_run)
    for kind in kinds:
        try:
            objs = listed[kind] if listed is not None else client.list(kind, cfg.namespace, sel)
        except NotFound:  # e.g. Route on plain Kubernetes: nothing of that kind can exist
            rep.absent_kinds.append(kind)
            continue
        except Forbidden:
            if client.can_i("create", plural(kind), cfg.namespace):
                raise  # it could have made some: they cannot be found, let alone deleted
            continue  # a user who may neither list nor create them made none
        if kind in BUILD_KINDS and not purge:
            rep.kept += [f"{kind.lower()}/{o['metadata']['name']}" for o in objs]
            continue
        if kind == "Pod":
            objs = _own_pods(cfg, rep, objs, ours)
        _drop(client, rep, kind, objs, cfg.namespace, dry_run)
    for kind in CLUSTER_KINDS:
        if made is None or kind in made:
            _drop_cluster_scoped(cfg, client, rep, kind, sel, dry_run)
    if purge:
        busy = _pvcs_in_use_by_others(cfg, client)
        claims = client.list("PersistentVolumeClaim", cfg.namespace, sel)
        for c in claims:
            n = c["metadata"]["name"]
            if n in busy:
                rep.left.append(
                    f"persistentvolumeclaim/{n}: kept: pod {busy[n]} of another "
                    "deployment mounts it"
                )
        _drop(
            client,
            rep,
            "PersistentVolumeClaim",
            [c for c in claims if c["metadata"]["name"] not in busy],
            cfg.namespace,
            dry_run,
        )
    return rep


def _unpin(cfg: ClusterConfig, client: ClusterClient, rep: TeardownReport, dry_run: bool) -> None:
    """The pool label off every node that carries this deployment's (found by the label,
    so nodes a config listed before are found too); a user who may not list or patch
    Nodes leaves it, with the command for an admin."""
    label = pool_selector(cfg)
    nodes = labelled_nodes(cfg, client)
    if nodes is None:
        binary = "oc" if cfg.traits.openshift else "kubectl"
        rep.left.append(
            f"the node label {label} (may not list nodes): an admin can take it off "
            f"with `{binary} label nodes -l {label} {pool_label(cfg)[0]}-`"
        )
        return
    said = [] if dry_run else take_labels(cfg, client, nodes)
    rep.left += [f"the node label {label}: {line}" for line in said]
    names = [str(n["metadata"]["name"]) for n in nodes]
    rep.unlabelled = [n for n in names if not any(f'"{n}"' in x for x in said)]


def _own_pods(
    cfg: ClusterConfig, rep: TeardownReport, objs: list[Manifest], ours: set[str]
) -> list[Manifest]:
    """The pods among ``objs`` (all carrying this instance's labels) that are this
    deployment's: ``ours``, the workload's own and the bare dev Pod deploy makes
    (:func:`~mlenv.cluster.deploy.split_pods`, read before the workload was deleted).
    anyone who may create pods in the namespace can put our labels on one; such a
    pod is a neighbour's, kept and named in ``rep.left``, never deleted."""
    kept = [o for o in objs if str(o["metadata"]["name"]) not in ours]
    rep.left += [
        f"pod/{o['metadata']['name']}: kept: it carries the labels of {cfg.name} but "
        f"neither its {workload(cfg).kind} nor deploy made it (a namespace neighbour's; see "
        "docs/security.md)"
        for o in kept
    ]
    return [o for o in objs if str(o["metadata"]["name"]) in ours]


def _drop(
    client: ClusterClient,
    rep: TeardownReport,
    kind: str,
    objs: list[Manifest],
    ns: str | None,
    dry_run: bool,
) -> None:
    """Delete (or, dry, list) the namespaced ``objs`` mlenv created; release the adopted ones."""
    for o in objs:
        name = o["metadata"]["name"]
        owners = {
            f"{r.get('kind', '').lower()}/{r.get('name')}"
            for r in o["metadata"].get("ownerReferences") or []
        }
        if owners & set(rep.deleted):
            # goes with its owner (foreground cascade); a real teardown lists it while it
            # is Terminating, and counting it again would differ from the dry run's list
            continue
        if not created_by_mlenv(o):
            if not dry_run:
                _release(client, o, ns)
            rep.left.append(
                f"{kind.lower()}/{name}: kept (it existed before mlenv "
                "adopted it); mlenv's labels removed"
            )
            continue
        if dry_run or client.delete(kind, name, ns, cascade="foreground"):
            rep.deleted.append(f"{kind.lower()}/{name}")


def _drop_cluster_scoped(
    cfg: ClusterConfig,
    client: ClusterClient,
    rep: TeardownReport,
    kind: str,
    sel: dict[str, str],
    dry_run: bool,
) -> None:
    """The cluster-scoped objects of ``kind`` this deployment created and nobody else uses."""
    try:
        objs = client.list(kind, None, sel)
    except NotFound:
        rep.absent_kinds.append(kind)
        return
    except Forbidden:
        names = _cluster_scoped_names(cfg).get(kind, [])
        what = ", ".join(f"{plural(kind)}/{n}" for n in names) or f"any {plural(kind)}"
        rep.left.append(
            f"{what}: you may not list {plural(kind)} (cluster-scoped); if this "
            "deployment created them, ask a cluster admin to delete them "
            f"(oc delete {plural(kind)} -l {LABEL_INSTANCE}={cfg.name},"
            f"{LABEL_NAMESPACE}={cfg.namespace})"
        )
        return
    for o in objs:
        name = o["metadata"]["name"]
        labels = o["metadata"].get("labels") or {}
        if labels.get(LABEL_NAMESPACE) != cfg.namespace:
            if LABEL_NAMESPACE not in labels:
                rep.left.append(
                    f"{plural(kind)}/{name}: kept: named before mlenv put the namespace in "
                    f"cluster-scoped names, so a deployment of {cfg.name!r} in another "
                    "namespace may use it; delete it once none does "
                    f"(oc delete {plural(kind)} {name})"
                )
            continue  # another namespace's deployment of the same cluster name
        role = name if kind == "ClusterRole" else f"{name}-use"
        users = _bound_elsewhere(client, cfg, role)
        if users:
            rep.left.append(f"{plural(kind)}/{name}: kept: still granted by " + ", ".join(users))
            continue
        try:
            if dry_run and not client.can_i("delete", plural(kind)):
                raise Forbidden(f"may not delete {plural(kind)}", kind=kind, name=name)
            if dry_run or client.delete(kind, name, None):
                rep.deleted.append(f"{kind.lower()}/{name}")
        except Forbidden:
            rep.left.append(
                f"{plural(kind)}/{name}: you may not delete it "
                "(cluster-scoped): ask a cluster admin to "
                f"(oc delete {plural(kind)} {name})"
            )


def _release(client: ClusterClient, obj: Manifest, ns: str | None) -> None:
    """Give an adopted object back: a server-side apply of nothing under mlenv's field
    manager removes exactly the fields mlenv set (its labels), nothing another owner set."""
    from mlenv.cluster.api import FIELD_MANAGER

    bare = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj["kind"],
        "metadata": {"name": obj["metadata"]["name"]},
    }
    client.apply(bare, ns, field_manager=FIELD_MANAGER)
