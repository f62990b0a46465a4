"""Deploy preflight: read the live cluster and explain everything missing before applying.

Problems come in two kinds: ``blocking`` ones stop the deploy in any mode (wrong API
server, missing namespace, nodes, storage classes, permissions) and ``rdma`` ones only
stop RDMA mode, which may then fall back to TCP (see :mod:`mlenv.cluster.deploy`).

Permissions are derived from the plan: every kind it holds must be creatable and
patchable (server-side apply is a PATCH). Cluster-scoped objects (the RDMA SCC and its
ClusterRole) are usually an admin's: when one already exists as planned and the user may
not patch it, deploy leaves it alone (``skip``); when it is missing or differs and the
user may not create/patch it, that is a problem naming the file an admin should apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlparse

from mlenv import argv
from mlenv.argv import UnsafeArgument
from mlenv.cluster.api import (
    CLUSTER_SCOPED_KINDS,
    GPU_RESOURCE,
    ApiError,
    ClusterClient,
    Forbidden,
    Manifest,
    NotFound,
    ObjectRef,
    Question,
    instance_selector,
    plural,
    resource_for,
)
from mlenv.cluster.nodepool import (
    label_lines,
    named_nodes,
    pinned_by_label,
    pool_holder,
    pool_label,
    pool_selector,
)
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.config.model import Mode
from mlenv.contract import APP, LABEL_INSTANCE, LABEL_NAME, LABEL_NAMESPACE
from mlenv.render.serialize import file_name
from mlenv.workload import worker_of


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
    skip: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) left as they are
    # nodes.pin_by: label: the pinned nodes deploy must label (none known when unreadable),
    # and those of them a hostname selector would miss, which its calls name
    unlabelled: list[str] = field(default_factory=list)
    named: set[str] = field(default_factory=set)

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
    host = (u.hostname or "").lower()
    # upstream configs name the cluster (`barcelona.nerc.mghpcc.org`) where `oc`
    # reports its API host (`api.barcelona.nerc.mghpcc.org`): both spellings are one server.
    return host.removeprefix("api."), u.port


def same_server(configured: str, live: str) -> bool:
    """``cluster.api`` (host, host:port or URL) names the server ``live`` is logged in to.

    Hosts compare without scheme and without a leading ``api.`` on either side; the port
    counts only when both sides give one (upstream's configs never give a port).
    """
    ch, cp = _host_port(configured)
    lh, lp = _host_port(live)
    return ch == lh and (cp is None or lp is None or cp == lp)


def _quantity(v: object) -> float:
    """A node's allocatable amount. The API server writes quantities in canonical form: a
    device plugin's 1000 shared RDMA devices come back as ``1k`` (seen on the real plane),
    which float() refused, so preflight counted 0 and refused RDMA."""
    from mlenv.config.rules import parse_quantity

    q = parse_quantity(str(v))
    return float(q) if q is not None and q.is_finite() else 0.0


def node_ready(node: Manifest) -> bool:
    """True when a Node's Ready condition is True."""
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _alloc(node: Manifest, res: str) -> float:
    return _quantity(((node.get("status") or {}).get("allocatable") or {}).get(res, 0))


def run_preflight(
    cfg: ClusterConfig, mode: Mode, nodes: int, manifests: list[Manifest], client: ClusterClient
) -> PreflightReport:
    """Check the live cluster against the plan; raises only when the API cannot be reached."""
    rep = PreflightReport(user=client.whoami(), server=client.server())
    add = rep.problems.append
    ns = cfg.namespace
    if cfg.cluster.api and not same_server(cfg.cluster.api, rep.server):
        add(
            Problem(
                "blocking",
                f"logged in to {rep.server}, but cluster.api of {cfg.name!r} is "
                f"{cfg.cluster.api}: run `oc login {cfg.cluster.api}` (or fix cluster.api)",
                input=True,
            )
        )
        return rep  # everything else would describe the wrong cluster
    if cfg.traits.kubernetes and not cfg.traits.openshift and not cfg.image.ref:
        add(
            Problem(
                "blocking",
                f"{cfg.name}: platform: kubernetes needs image.ref (plain Kubernetes has no "
                "BuildConfig to build the image): push the image to a registry the nodes can "
                "pull from and set image.ref",
                input=True,
            )
        )
        return rep
    if cfg.traits.openshift and not serves_openshift(client, ns):
        add(
            Problem(
                "blocking",
                f"this server is not OpenShift (no route/security.openshift.io APIs): set "
                f"platform: kubernetes in the config of {cfg.name}",
                input=True,
            )
        )
        return rep
    try:
        live_ns = client.get("Namespace", ns, None)
        present = live_ns is not None
    except Forbidden:
        live_ns = None
        try:
            present = client.get("Project", ns, None) is not None
        except ApiError:
            # Forbidden here too, or no Project API (plain Kubernetes): whether it exists
            # cannot be read by this user; the permission checks below ask inside it
            present = True
    if "deletionTimestamp" in ((live_ns or {}).get("metadata") or {}):
        add(
            Problem(
                "blocking",
                f"namespace {ns!r} is Terminating (being deleted): wait until it is gone and "
                f"create it again, or deploy into another namespace",
            )
        )
        return rep
    if not present:
        add(
            Problem(
                "blocking",
                f"namespace {ns!r} does not exist (or you cannot see it): "
                f"`oc new-project {ns}` or ask an admin",
            )
        )
        return rep
    _check_permissions(ns, manifests, client, rep)
    _check_admission(cfg, mode, live_ns, manifests, client, rep)
    unserved = _check_cluster_scoped(cfg, mode, manifests, client, rep)
    if "SecurityContextConstraints" not in unserved:
        _check_scc_use(ns, manifests, client, rep)
        _check_binds(ns, manifests, client, rep)
    _check_nodes(cfg, mode, nodes, client, rep, manifests)
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
                add(
                    Problem(
                        "rdma",
                        f"Multus NetworkAttachmentDefinition {nns or ns}/{name} is missing ({why})",
                    )
                )
    st = cfg.storage
    field_of = (
        {st.class_rwx: "storage.class_rwx"}
        if st.mode == "rwx"
        else {st.class_rwo: "storage.class_rwo"}
    )
    for sc in sorted(c for c in field_of if c):
        # Defence in depth: the schema refuses such names too, but a name that
        # reached here unchecked must never become an argv word (`--kubeconfig=FILE`).
        try:
            argv.name("StorageClass", sc)
        except UnsafeArgument as e:
            add(Problem("blocking", f"{field_of[sc]}: {e}", input=True))
            continue
        try:
            if client.get("StorageClass", sc, None) is None:
                add(Problem("blocking", f"storage class {sc!r} does not exist", input=True))
        except Forbidden:
            rep.notes.append(f"cannot read storage classes (forbidden): {sc!r} not checked")
    return rep


def _check_admission(
    cfg: ClusterConfig,
    mode: Mode,
    live_ns: Manifest | None,
    manifests: list[Manifest],
    client: ClusterClient,
    rep: PreflightReport,
) -> None:
    """What the namespace's admission would refuse after the apply (its Pod Security
    level, its ResourceQuotas), said before it: the refusal would otherwise surface
    only as the StatefulSet's FailedCreate events once everything is applied."""
    from mlenv.cluster import admission

    for line in admission.pod_security_refusals(live_ns, manifests):
        # RDMA pods add IPC_LOCK: the TCP fallback may still fit the namespace
        rdma = mode == "rdma" and "IPC_LOCK" in line
        rep.problems.append(Problem("rdma" if rdma else "blocking", line))
    try:
        quotas = client.list("ResourceQuota", cfg.namespace)
        ours = [
            p
            for p in client.list("Pod", cfg.namespace, instance_selector(cfg.name))
            if "deletionTimestamp" not in (p.get("metadata") or {})
        ]
    except Forbidden:
        rep.notes.append("cannot read ResourceQuotas (forbidden): quota room not checked")
        return
    for line in admission.quota_refusals(quotas, manifests, ours):
        rep.problems.append(Problem("blocking", line))


def serves_openshift(client: ClusterClient, ns: str) -> bool:
    """Does the API server serve OpenShift's security.openshift.io or route.openshift.io
    group? A refusal to read counts as served (the server knows the resource); only "no
    such resource type" for both says this is plain Kubernetes."""
    for kind, name, scope in (
        ("SecurityContextConstraints", "restricted-v2", None),
        ("Route", APP, ns),
    ):
        try:
            client.get(kind, name, scope)
        except NotFound:
            continue
        except Forbidden:
            return True
        return True
    return False


def _kinds(manifests: list[Manifest]) -> dict[str, str]:
    """kind → apiVersion of every kind in the plan, in plan order."""
    out: dict[str, str] = {}
    for m in manifests:
        out.setdefault(str(m.get("kind", "")), str(m.get("apiVersion", "v1")))
    return out


def _bind_questions(ns: str, manifests: list[Manifest]) -> list[Question]:
    """What :func:`_check_binds` may ask (bind, escalate, each grant of the bound role),
    asked up front with the permission questions: one too many costs nothing in a batch."""
    out: list[Question] = []
    for m in manifests:
        ref = m.get("roleRef") or {}
        if m.get("kind") != "RoleBinding" or ref.get("kind") not in ("Role", "ClusterRole"):
            continue
        res = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
        out += [Question(v, f"{res}/{ref.get('name', '')}", ns) for v in ("bind", "escalate")]
        out += [
            _grant_question(verb, grant, ns)
            for verb, grant in _role_grants(
                str(ref.get("name", "")), manifests, str(ref.get("kind"))
            )
        ]
    return out


def _check_permissions(
    ns: str, manifests: list[Manifest], client: ClusterClient, rep: PreflightReport
) -> None:
    """create + patch for every namespaced kind of the plan (and the ssh Secret), exec.
    asked in one :meth:`ClusterClient.can_i_many` with the questions the bind checks
    may ask later (deploy's client keeps the answers: they ask again one by one)."""
    kinds = _kinds(manifests)
    kinds.setdefault("Secret", "v1")  # the per-deployment ssh key Secret
    questions = [
        (kind, verb, resource_for(kind, api_version))
        for kind, api_version in kinds.items()
        if kind not in CLUSTER_SCOPED_KINDS  # _check_cluster_scoped: maybe an admin's
        for verb in ("create", "patch")
    ] + [("", "create", "pods/exec")]
    # the exec subresource, not `can-i create pods/exec` (a pod named exec)
    asked = [
        Question(verb, res, ns) if kind else Question(verb, "pods", ns, "exec")
        for kind, verb, res in questions
    ]
    answers = client.can_i_many(asked + _bind_questions(ns, manifests))[: len(asked)]
    for (kind, verb, res), ok in zip(questions, answers, strict=True):
        if ok:
            continue
        if not kind:
            rep.problems.append(
                Problem(
                    "blocking",
                    f"user {rep.user} may not {verb} {res} in "
                    f"namespace {ns} (sync and launch run through exec)",
                )
            )
            continue
        names = sorted(m["metadata"]["name"] for m in manifests if m.get("kind") == kind)
        rep.problems.append(
            Problem(
                "blocking",
                f"user {rep.user} may not {verb} {plural(kind)} in namespace {ns}"
                + (f" (the plan has {', '.join(names)})" if names else ""),
            )
        )


def _covers(live: object, planned: object) -> bool:
    """Every field the plan sets has that value in the live object (server defaults and
    omitted empty values do not count as differences)."""
    if isinstance(planned, dict):
        if not isinstance(live, dict):
            return not planned
        return all(_covers(live.get(k), v) for k, v in planned.items())
    if isinstance(planned, list):
        if not isinstance(live, list):
            return not planned
        return len(live) == len(planned) and all(
            _covers(a, b) for a, b in zip(live, planned, strict=False)
        )
    if planned is None:
        return live in (None, [], {}, "")
    return live == planned


def matches_plan(live: Manifest, planned: Manifest) -> bool:
    """True when applying ``planned`` over ``live`` would change nothing it sets."""
    want = {k: v for k, v in planned.items() if k != "metadata"}
    meta = planned.get("metadata") or {}
    want["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
    return _covers(live, want)


def _check_cluster_scoped(
    cfg: ClusterConfig,
    mode: Mode,
    manifests: list[Manifest],
    client: ClusterClient,
    rep: PreflightReport,
) -> set[str]:
    """The plan's cluster-scoped objects: exist as planned, or may be created/patched.
    Returns the kinds the API does not serve (their objects are skipped)."""
    unserved: set[str] = set()
    severity: Literal["blocking", "rdma"] = "rdma" if mode == "rdma" else "blocking"
    for m in manifests:
        kind, name = str(m.get("kind", "")), m["metadata"]["name"]
        if kind not in CLUSTER_SCOPED_KINDS:
            continue
        res = resource_for(kind, str(m.get("apiVersion", "v1")))
        rel = f"k8s/{cfg.name}/{mode}/{file_name(kind)}"
        rendered = cfg.source is not None and (cfg.source.parent.parent / rel).is_file()
        hint = (
            f"ask a cluster admin to apply {rel} (oc apply --server-side -f {rel})"
            if rendered
            # a file that is not there yet is no help to the admin: say how to make it
            else f"render it (`mlenv render {cfg.name} --mode {mode}` writes {rel}) and ask "
            f"a cluster admin to apply it (oc apply --server-side -f {rel})"
        )
        try:
            live = client.get(kind, name, None)
        except NotFound:
            if kind == "SecurityContextConstraints":
                rep.notes.append(
                    f"the API has no SecurityContextConstraints (not OpenShift): "
                    f"{plural(kind)}/{name} is not applied"
                )
                rep.skip.append((kind, name))
                unserved.add(kind)
                continue
            live = None
        except Forbidden:
            if client.can_i("create", res) and client.can_i("patch", res):
                continue  # unreadable but ours to apply
            # neither readable nor writable: only an admin can have put it there, and the
            # wait step names an SCC denial if they have not
            rep.skip.append((kind, name))
            rep.notes.append(
                f"{rep.user} may not read, create or patch {plural(kind)}/{name}: "
                f"left to a cluster admin ({hint}); if pods stay Pending with a "
                "security context constraint denial, that is still to be done"
            )
            continue
        if live is None:
            if not client.can_i("create", res):
                rep.problems.append(
                    Problem(
                        severity,
                        f"{kind} {name} does not exist and {rep.user} may not create it: {hint}",
                    )
                )
            continue
        if client.can_i("patch", res):
            continue  # apply keeps it as planned (a no-op when it already is)
        if matches_plan(live, m):
            rep.skip.append((kind, name))
            rep.notes.append(
                f"{plural(kind)}/{name} exists as planned and {rep.user} may not "
                "patch it: left as it is"
            )
        else:
            rep.problems.append(
                Problem(
                    severity,
                    f"{kind} {name} differs from the plan and {rep.user} may not patch it: {hint}",
                )
            )
    return unserved


def _check_scc_use(
    ns: str, manifests: list[Manifest], client: ClusterClient, rep: PreflightReport
) -> None:
    """The pods' service account may use the plan's SCC, now or once the plan's RoleBinding
    is applied (asked as the service account: ``auth can-i --as=system:serviceaccount:…``)."""
    sccs = [
        m["metadata"]["name"] for m in manifests if m.get("kind") == "SecurityContextConstraints"
    ]
    sas = sorted(
        {
            str(_pod_template([m]).get("serviceAccountName", "default"))
            for m in manifests
            if worker_of(m) is not None
        }
    )
    for scc in sccs:
        for sa in sas:
            user = f"system:serviceaccount:{ns}:{sa}"
            try:
                ok = client.can_i("use", f"securitycontextconstraints/{scc}", ns, as_user=user)
            except Forbidden:
                rep.notes.append(
                    f"cannot ask as {user} (impersonation forbidden): whether it "
                    f"may use SCC {scc} is not checked"
                )
                continue
            if ok:
                continue
            grant = _granting_binding(manifests, ns, sa, scc)
            if grant:
                rep.notes.append(
                    f"service account {sa} may not use SCC {scc} yet: "
                    f"rolebinding/{grant} of this plan grants it"
                )
            else:
                rep.problems.append(
                    Problem(
                        "rdma",
                        f"service account {ns}/{sa} may not use SCC {scc} and the plan does "
                        f"not grant it: ask a cluster admin (oc adm policy add-scc-to-user {scc} "
                        f"-z {sa} -n {ns})",
                    )
                )


def _role_grants(
    role: str, manifests: list[Manifest], kind: str = "ClusterRole"
) -> list[tuple[str, str]]:
    """(verb, resource/name) pairs ``role`` grants: from the plan's ClusterRole (or Role,
    with ``kind``), or for OpenShift's ``system:openshift:scc:<name>`` roles, ``use`` of
    that SCC."""
    for m in manifests:
        if m.get("kind") == kind and m["metadata"]["name"] == role:
            return [
                (verb, f"{res}/{name}" if name else res)
                for rule in m.get("rules") or []
                for verb in rule.get("verbs") or []
                for res in rule.get("resources") or []
                for name in (rule.get("resourceNames") or [""])
            ]
    prefix = "system:openshift:scc:"
    return (
        [("use", f"securitycontextconstraints/{role[len(prefix) :]}")]
        if role.startswith(prefix)
        else []
    )


def _check_binds(
    ns: str, manifests: list[Manifest], client: ClusterClient, rep: PreflightReport
) -> None:
    """RBAC lets a user bind a ClusterRole in a RoleBinding only with ``bind`` (or
    ``escalate``) on that role, or when the user already holds everything it grants.
    create/patch on rolebindings alone is not enough: a non-admin's RDMA apply was refused
    by the server after preflight said yes. Said before anything is applied (rdma: the
    deploy falls back to TCP and says why, unless --no-fallback)."""
    for m in manifests:
        ref = m.get("roleRef") or {}
        if m.get("kind") == "RoleBinding" and ref.get("kind") == "Role":
            _check_role_bind(ns, m, manifests, client, rep)
            continue
        if m.get("kind") != "RoleBinding" or ref.get("kind") != "ClusterRole":
            continue
        role = str(ref.get("name", ""))
        if client.can_i("bind", f"clusterroles/{role}", ns) or client.can_i(
            "escalate", f"clusterroles/{role}", ns
        ):
            continue
        grants = _role_grants(role, manifests)
        if grants and all(client.can_i(verb, res, ns) for verb, res in grants):
            continue
        held = ", ".join(f"{v} {r}" for v, r in grants) or "what the role grants"
        rep.problems.append(
            Problem(
                "rdma",
                f"user {rep.user} may not bind clusterrole {role} (rolebinding/{m['metadata']['name']}): "
                f"that needs `bind` on the role or holding {held} yourself; ask a cluster admin to grant "
                f"`bind` on clusterrole {role} in namespace {ns}, or to apply the RoleBinding",
            )
        )


def _grant_question(verb: str, res: str, ns: str) -> Question:
    """The question one grant of a role asks: ``pods/exec/NAME`` is the exec subresource of
    pod NAME."""
    base, _, rest = res.partition("/")
    sub, _, name = rest.rpartition("/") if rest.count("/") else ("", "", rest)
    return Question(verb, f"{base}/{name}", ns, sub) if sub else Question(verb, res, ns)


def _holds(client: ClusterClient, verb: str, res: str, ns: str) -> bool:
    """``auth can-i`` for one grant (:func:`_grant_question`)."""
    q = _grant_question(verb, res, ns)
    return client.can_i(q.verb, q.resource, q.namespace, subresource=q.subresource)


def _check_role_bind(
    ns: str,
    binding: Manifest,
    manifests: list[Manifest],
    client: ClusterClient,
    rep: PreflightReport,
) -> None:
    """the re-check's RoleBinding to the plan's own Role passes RBAC's escalation
    check only with ``bind`` on roles, or when the user holds what the Role grants
    (``get`` and exec on pod-0, which anyone who may `mlenv launch` does)."""
    role = str((binding.get("roleRef") or {}).get("name", ""))
    if client.can_i("bind", f"roles/{role}", ns) or client.can_i("escalate", f"roles/{role}", ns):
        return
    grants = _role_grants(role, manifests, "Role")
    missing = [f"{v} {r}" for v, r in grants if not _holds(client, v, r, ns)]
    if missing or not grants:
        rep.problems.append(
            Problem(
                "blocking",
                f"user {rep.user} may not bind role {role} (rolebinding/{binding['metadata']['name']}, "
                f"the scheduled re-check): that needs `bind` on roles or holding {', '.join(missing) or 'what it grants'} "
                f"yourself in namespace {ns}",
            )
        )


def _granting_binding(manifests: list[Manifest], ns: str, sa: str, scc: str) -> str:
    """Name of a RoleBinding in the plan giving ``sa`` a (Cluster)Role of the plan that
    may ``use`` ``scc``; "" when none does."""
    roles = {
        (m["kind"], m["metadata"]["name"]): m
        for m in manifests
        if m.get("kind") in ("Role", "ClusterRole")
    }
    for m in manifests:
        if m.get("kind") != "RoleBinding":
            continue
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == sa
            and s.get("namespace", ns) == ns
            for s in m.get("subjects") or []
        ):
            continue
        ref = m.get("roleRef") or {}
        role = roles.get((str(ref.get("kind", "")), str(ref.get("name", ""))))
        for rule in (role or {}).get("rules") or []:
            if (
                "use" in (rule.get("verbs") or [])
                and "securitycontextconstraints" in (rule.get("resources") or [])
                and scc in (rule.get("resourceNames") or [scc])
            ):
                return str(m["metadata"]["name"])
    return ""


def _pod_template(manifests: list[Manifest]) -> Manifest:
    """The worker pods' spec in the plan ({} when there is none)."""
    for m in manifests:
        wl = worker_of(m)
        if wl is not None:
            return dict(wl.pod_template(m).get("spec") or {})
    return {}


def _tolerates(tolerations: list[Manifest], taint: Manifest) -> bool:
    """Kubernetes' rule: a toleration matches a taint's effect (or all effects) and its key
    (``Exists``: any value; an empty key with ``Exists``: every taint) and value."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and str(t.get("value", "")) == str(
            taint.get("value", "")
        ):
            return True
    return False


def unschedulable(node: Manifest, pod: Manifest) -> str:
    """Why the scheduler would not put the planned pod on this node ("" when it may):
    cordoned, a NoSchedule/NoExecute taint the pod does not tolerate, or a label of the
    pod's nodeSelector (``scheduling.node_selector``) the node lacks."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "cordoned"
    tolerations = list(pod.get("tolerations") or [])
    for taint in spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(
            tolerations, taint
        ):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint.get('key')}{value}:{taint.get('effect')} not tolerated"
    labels = (node.get("metadata") or {}).get("labels") or {}
    missing = [f"{k}={v}" for k, v in (pod.get("nodeSelector") or {}).items() if labels.get(k) != v]
    if missing:
        return f"no label {', '.join(missing)} (scheduling.node_selector)"
    return ""


def _check_nodes(
    cfg: ClusterConfig,
    mode: Mode,
    nodes: int,
    client: ClusterClient,
    rep: PreflightReport,
    manifests: list[Manifest] | None = None,
) -> None:
    from mlenv.render.workload import cpu_only

    add = rep.problems.append
    # `gpus.type: cpu` (the local demo) requests no nvidia.com/gpu, so a GPU-less
    # cluster (kind, CRC, CPU-only nodes) must pass: any Ready node will do.
    per_node = 0 if cpu_only(cfg) else cfg.gpus.per_node
    rdma_res = cfg.rdma.resources if mode == "rdma" else ()
    try:
        if cfg.gpu_nodes:
            objs = []
            # the pinned nodes in one read (a process per node was 512 at 512 nodes); a
            # node the batch left out (refused) is asked alone, to hear why
            refs: list[ObjectRef] = [("Node", name, None) for name in cfg.gpu_nodes]
            got = client.get_many(refs)
            for ref in refs:
                name = ref[1]
                node = got[ref] if ref in got else client.get(*ref)
                if node is None:
                    add(
                        Problem(
                            "blocking", f"node {name} (nodes.gpu_nodes) does not exist", input=True
                        )
                    )
                else:
                    objs.append(node)
        else:
            objs = client.list("Node", None)
    except Forbidden:
        rep.notes.append("cannot read nodes (forbidden): GPU and RDMA capacity not checked")
        if pinned_by_label(cfg):
            # The usual namespace user may not even get a Node: an admin labelled them
            # once, or did not, and the pods' Pending reason will say which. Refusing
            # here would refuse that user forever, labelled or not.
            rep.notes.append(
                f"nodes.pin_by: label: the pinned nodes' label {pool_selector(cfg)} not "
                "checked (cannot read nodes): the pods start only on nodes that carry it; "
                "an admin labels them once with:\n    "
                + "\n    ".join(label_lines(cfg, cfg.gpu_nodes))
            )
        return
    usable = []
    left_out: list[str] = []
    pod = _pod_template(manifests or [])
    if pinned_by_label(cfg):
        objs = _check_pool(cfg, objs, client, rep)
        key = pool_label(cfg)[0]
        pod = {
            **pod,
            "nodeSelector": {k: v for k, v in (pod.get("nodeSelector") or {}).items() if k != key},
        }
    for node in objs:
        name = node["metadata"]["name"]
        if not node_ready(node):
            if cfg.gpu_nodes:
                add(Problem("blocking", f"node {name} is not Ready"))
            continue
        why = unschedulable(node, pod)
        if why:
            left_out.append(f"{name} ({why})")
            if cfg.gpu_nodes:
                add(Problem("blocking", f"node {name} (nodes.gpu_nodes) takes no pod: {why}"))
            continue
        gpus = _alloc(node, GPU_RESOURCE)
        if gpus < per_node:
            if cfg.gpu_nodes:
                add(
                    Problem(
                        "blocking",
                        f"node {name} has {gpus:g} allocatable {GPU_RESOURCE}, needs {per_node}",
                    )
                )
            continue
        usable.append(node)
    if len(usable) < nodes:
        add(
            Problem(
                "blocking",
                f"{len(usable)} Ready node(s)"
                + (f" with {per_node} allocatable {GPU_RESOURCE}" if per_node else "")
                + f", {nodes} needed (one pod per node)"
                + (f"; left out: {', '.join(left_out)}" if left_out else ""),
            )
        )
    for r in rdma_res:
        have = [n for n in usable if _alloc(n, r.name) >= r.count]
        if len(have) < nodes:
            lacking = sorted(n["metadata"]["name"] for n in usable if n not in have)
            add(
                Problem(
                    "rdma",
                    f"{len(have)} node(s) offer {r.count} allocatable {r.name}, "
                    f"{nodes} needed" + (f" (lacking: {', '.join(lacking)})" if lacking else ""),
                )
            )


def _check_pool(
    cfg: ClusterConfig, objs: list[Manifest], client: ClusterClient, rep: PreflightReport
) -> list[Manifest]:
    """``nodes.pin_by: label``: the pinned nodes that lack the pool label go in
    ``rep.unlabelled`` (deploy labels them, so the pods' selector is not held against them
    here); one pinned by another deployment of the namespace is blocking, and is left
    out of the nodes that count."""
    key = pool_label(cfg)[0]
    kept = []
    for node in objs:
        holder = pool_holder(cfg, node)
        if holder not in (None, cfg.name):
            rep.problems.append(
                Problem(
                    "blocking",
                    f"node {node['metadata']['name']} (nodes.gpu_nodes) carries "
                    f"{key}={holder}: another deployment of namespace "
                    f"{cfg.namespace} is pinned to it (nodes.pin_by: label); take it out of "
                    "one of the two lists",
                )
            )
            continue
        if holder is None:
            rep.unlabelled.append(str(node["metadata"]["name"]))
            rep.named |= named_nodes([node])
        kept.append(node)
    _check_pool_rights(cfg, client, rep)
    return kept


def _check_pool_rights(cfg: ClusterConfig, client: ClusterClient, rep: PreflightReport) -> None:
    """Labelling the nodes in ``rep.unlabelled`` needs ``patch nodes`` (and ``list``: they
    are chosen by a selector): without both, the commands for an admin (after which
    deploy needs no rights on Nodes)."""
    if not rep.unlabelled or (client.can_i("patch", "nodes") and client.can_i("list", "nodes")):
        return
    rep.problems.append(
        Problem(
            "blocking",
            f"nodes.pin_by: label: {len(rep.unlabelled)} pinned node(s) lack the label "
            f"{pool_selector(cfg)} and {rep.user or 'this user'} may not list and patch "
            "nodes; "
            "an admin can label them once (deploy then needs no rights on Nodes):\n    "
            + "\n    ".join(label_lines(cfg, rep.unlabelled, rep.named)),
        )
    )


# The objects deploy applies have fixed names (docs/contracts.md), so a second config
# deployed into the same namespace would silently take over the first one's StatefulSet,
# dev Pod, Secrets and claims. Before anything is applied, every planned object that is
# already there must be this instance's.
ADOPTABLE = ("ServiceAccount",)  # users pre-create the service account (upstream's notes did)


def foreign_objects(
    cfg: ClusterConfig, planned: list[Manifest], client: ClusterClient
) -> list[str]:
    """One line per live object the plan would overwrite that is not this instance's
    (another instance's label, or no mlenv label at all): "kind/name: whose"."""
    out: list[str] = []
    for m in planned:
        kind, name = str(m["kind"]), str(m["metadata"]["name"])
        scoped = kind in CLUSTER_SCOPED_KINDS
        try:
            live = client.get(kind, name, None if scoped else cfg.namespace)
        except (NotFound, Forbidden):
            continue  # unserved kind, or unreadable: the permission checks speak for it
        if live is None:
            continue
        labels = (live.get("metadata") or {}).get("labels") or {}
        owner = labels.get(LABEL_INSTANCE)
        ours = labels.get(LABEL_NAME) == APP and owner == cfg.name
        if scoped:
            ns_label = labels.get(LABEL_NAMESPACE)
            ours = ours and ns_label in (None, cfg.namespace)
        if ours:
            continue
        if owner is None and kind in ADOPTABLE:
            continue  # a pre-created service account is adopted, never deleted (teardown)
        if owner is not None:
            whose = f"belongs to instance {owner!r}" + (
                f" of namespace {labels.get(LABEL_NAMESPACE)!r}"
                if scoped and labels.get(LABEL_NAMESPACE)
                else ""
            )
        else:
            whose = "was not created by mlenv (no app.kubernetes.io/instance label)"
        out.append(f"{kind.lower()}/{name}: {whose}")
    return out
