"""One scenario set, run against the fake cluster and against the real control plane.

The fake (:mod:`mlenv.testing.fakecluster`) stands in for the API server in the fast
tiers, and we wrote both it and the code it tests: where it drifts from the real server
it hides the very bugs a first real deploy meets (``1024Gi`` read back as ``1Ti``, a
RoleBinding RBAC refuses, pods a rollout replaces). Each scenario here states one thing
the real API server does, through the :class:`~mlenv.cluster.api.ClusterClient`
interface both sides implement, and runs twice: in ``tests/unit/cluster/
test_scenarios_fake.py`` on the fake, and in ``tests/kube/test_scenarios.py`` on the
kube tier through :class:`~mlenv.cluster.oc.OcCluster` (real kubectl, real server).
Where they disagree the real plane is right: the fake is fixed, or the scenario moves to
the kube tier only and says why.

A scenario gets a :class:`Stage`: an admin client, a namespace-scoped non-admin client
(``admin`` role in its namespace, nothing cluster-wide: a project admin), the namespace,
and what the side calls an image that cannot be pulled. Time goes through the client's
``pause``/``monotonic`` (the fake runs its controllers on ``pause``; the plane sleeps).
Scenarios fail with :class:`ScenarioFailed`, which says which side and what it saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlenv.cluster.api import (
    ApiError,
    ClusterClient,
    DryRunItem,
    Forbidden,
    Manifest,
    NotFound,
    ObjectRef,
    Question,
)
from mlenv.config.rules import parse_quantity

# What a project admin may not do on OpenShift or in the tier (the fake's `denied` for the
# non-admin identity; on the plane, the user's RBAC says it).
NON_ADMIN_DENIED = (
    "create securitycontextconstraints",
    "patch securitycontextconstraints",
    "create clusterroles",
    "patch clusterroles",
    "bind clusterroles",
    "escalate clusterroles",
    "use securitycontextconstraints",
)

SCC_NAME = "mlenv-scenario-scc"
LABELS = {"app.kubernetes.io/name": "mlenv-scenario"}


class ScenarioFailed(AssertionError):
    """What the real server does, the side under test did not."""


@dataclass
class Stage:
    """What a scenario runs on (see the module docstring)."""

    side: str  # "fake" or "plane": named in every failure
    admin: ClusterClient
    user: ClusterClient
    namespace: str
    missing_image: str
    openshift: bool = True

    def expect(self, ok: bool, what: str, seen: Any = None) -> None:
        """Fail with the side's name, what the real server does, and what was seen."""
        if not ok:
            raise ScenarioFailed(
                f"[{self.side}] {what}" + (f" (seen: {seen!r})" if seen is not None else "")
            )

    def until(self, what: str, check: Callable[[], Any], seconds: float = 60.0) -> Any:
        """Poll ``check`` through the admin client's clock until it returns truthy."""
        deadline = self.admin.monotonic() + seconds
        last: Any = None
        while self.admin.monotonic() < deadline:
            last = check()
            if last:
                return last
            self.admin.pause(0.5)
        raise ScenarioFailed(f"[{self.side}] {what}: not within {seconds:g} s (last: {last!r})")


def _pod(name: str, image: str, labels: dict[str, str] | None = None) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or LABELS)},
        "spec": {
            "containers": [{"name": "main", "image": image, "command": ["sleep", "infinity"]}]
        },
    }


def _statefulset(name: str, replicas: int, env_value: str, claim_size: str) -> Manifest:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": dict(LABELS)},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": dict(LABELS)},
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.access.redhat.com/ubi9/ubi-minimal:latest",
                            "command": ["sleep", "infinity"],
                            "env": [{"name": "SCENARIO", "value": env_value}],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        }
                    ]
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": claim_size}},
                    },
                }
            ],
        },
    }


# -- the scenarios ----------------------------------------------------------------------


def binding_a_cluster_role_needs_bind_or_its_grants(st: Stage) -> None:
    """RBAC's escalation check: a project admin may create RoleBindings, but one that binds
    a ClusterRole granting ``use`` of an SCC is refused unless the user may ``bind`` that
    role or already holds ``use``; ``auth can-i bind`` says so beforehand. (The fake
    accepted the binding: found by this scenario, fixed.)"""
    role = f"{st.namespace}-scc-use"
    st.admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": ["security.openshift.io"],
                    "resources": ["securitycontextconstraints"],
                    "resourceNames": [SCC_NAME],
                    "verbs": ["use"],
                }
            ],
        },
        None,
    )
    try:
        st.expect(
            st.user.can_i("create", "rolebindings", st.namespace),
            "a project admin may create rolebindings",
        )
        st.expect(
            not st.user.can_i("bind", f"clusterroles/{role}", st.namespace),
            "a project admin may not bind a cluster role it was not given",
        )
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "scc-use"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": st.namespace}],
        }
        try:
            st.user.apply(binding, st.namespace)
        except Forbidden as e:
            st.expect(
                "not currently held" in str(e) or "escalat" in str(e),
                "the refusal names the permissions not held",
                str(e),
            )
        else:
            raise ScenarioFailed(
                f"[{st.side}] RBAC refuses a RoleBinding to a ClusterRole whose grants "
                "the user does not hold; it was accepted"
            )
        st.expect(
            st.admin.get("RoleBinding", "scc-use", st.namespace) is None, "nothing was created"
        )
        # the admin may: bind is implied for a cluster admin
        st.admin.apply(binding, st.namespace)
        st.expect(
            st.admin.get("RoleBinding", "scc-use", st.namespace) is not None,
            "the admin's binding exists",
        )
    finally:
        st.admin.delete("RoleBinding", "scc-use", st.namespace)
        st.admin.delete("ClusterRole", role, None)


def quantities_come_back_in_canonical_form(st: Stage) -> None:
    """The API server stores quantities canonically: a claim of ``1024Gi`` reads back as
    ``1Ti``, CPU ``1000m`` as ``1``, memory ``2048Mi`` as ``2Gi``. Code that compares strings sees a change on every re-apply (the StatefulSet was
    recreated every deploy). (The fake kept the text as sent: found, fixed.)"""
    sts = _statefulset("quant", 0, "one", "1024Gi")
    sts["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1000m", "memory": "2048Mi"}
    }
    st.user.apply(sts, st.namespace)
    got = st.user.get("StatefulSet", "quant", st.namespace) or {}
    size = got["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    req = got["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    st.expect(size == "1Ti", "1024Gi reads back as 1Ti", size)
    st.expect(req == {"cpu": "1", "memory": "2Gi"}, "1000m and 2048Mi read back as 1 and 2Gi", req)
    st.expect(parse_quantity(size) == parse_quantity("1024Gi"), "the value is unchanged", size)
    # re-applying the same text is no change (the server compares values, not strings)
    before = str((got.get("metadata") or {}).get("generation"))
    st.user.apply(sts, st.namespace)
    after = (st.user.get("StatefulSet", "quant", st.namespace) or {}).get("metadata") or {}
    st.expect(
        str(after.get("generation")) == before,
        "re-applying 1024Gi changes nothing",
        after.get("generation"),
    )
    st.user.delete("StatefulSet", "quant", st.namespace)


def a_bound_claim_cannot_shrink(st: Stage) -> None:
    """A bound PersistentVolumeClaim's size can grow (where its class allows expansion) but
    never shrink: the server answers 422 Invalid naming ``spec.resources.requests.storage``,
    the dry run included. Lowering ``storage.workspace_size`` on a deployed cluster meets
    exactly this (the dev Pod's own claim); the fake accepted it, so deploy's message for
    it was never seen in a test (found on the plane, fixed in the fake)."""
    from mlenv.cluster.api import Invalid

    claim: Manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "shrink", "labels": dict(LABELS)},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
    }
    st.user.apply(claim, st.namespace)
    st.until(
        "the claim binds",
        lambda: (
            (
                (st.user.get("PersistentVolumeClaim", "shrink", st.namespace) or {}).get("status")
                or {}
            ).get("phase")
            == "Bound"
        ),
    )
    smaller = {**claim, "spec": {**claim["spec"], "resources": {"requests": {"storage": "1Gi"}}}}
    for dry in (True, False):
        try:
            st.user.apply(smaller, st.namespace, dry_run=dry)
        except Invalid as e:
            st.expect(
                "spec.resources.requests.storage" in str(e),
                "the refusal names the size field",
                str(e),
            )
        else:
            raise ScenarioFailed(
                f"[{st.side}] shrinking a bound claim (dry_run={dry}) is refused (422); "
                "it was accepted"
            )
    size = (
        (
            (
                (st.user.get("PersistentVolumeClaim", "shrink", st.namespace) or {}).get("spec")
                or {}
            ).get("resources")
            or {}
        )
        .get("requests", {})
        .get("storage")
    )
    st.expect(parse_quantity(str(size)) == parse_quantity("2Gi"), "the claim keeps its size", size)
    st.user.delete("PersistentVolumeClaim", "shrink", st.namespace)


def a_changed_template_replaces_every_pod_with_the_new_revision(st: Stage) -> None:
    """The StatefulSet controller records ``status.updateRevision`` and replaces the pods
    one by one; a pod carries its revision in the ``controller-revision-hash`` label.
    Until all are replaced, old pods stay Ready (counting Ready pods is not a rollout)."""
    st.user.apply(_statefulset("roll", 2, "one", "1Gi"), st.namespace)

    def settled() -> str:
        sts = st.user.get("StatefulSet", "roll", st.namespace) or {}
        status = sts.get("status") or {}
        pods = st.user.list("Pod", st.namespace, LABELS)
        rev = str(status.get("updateRevision", ""))
        done = (
            rev
            and len(pods) == 2
            and int(status.get("readyReplicas") or 0) == 2
            and all(
                (p["metadata"].get("labels") or {}).get("controller-revision-hash") == rev
                for p in pods
            )
        )
        return rev if done else ""

    first = st.until("two Ready pods on the first revision", settled, 90)
    st.user.apply(_statefulset("roll", 2, "two", "1Gi"), st.namespace)
    second = st.until(
        "both pods replaced by the new revision",
        lambda: (lambda r: r if r and r != first else "")(settled()),
        120,
    )
    st.expect(second != first, "the template change made a new revision", second)
    for p in st.user.list("Pod", st.namespace, LABELS):
        env = p["spec"]["containers"][0].get("env") or []
        st.expect(
            {"name": "SCENARIO", "value": "two"} in env, "every pod runs the new template", env
        )
    st.user.delete("StatefulSet", "roll", st.namespace)


def an_image_that_cannot_be_pulled_is_said_by_the_pod(st: Stage) -> None:
    """The kubelet reports ``ErrImagePull`` in the container's waiting reason, then
    ``ImagePullBackOff``; the pod stays Pending, never Running."""
    st.user.apply(_pod("nopull", st.missing_image), st.namespace)

    def reason() -> str:
        p = st.user.get("Pod", "nopull", st.namespace) or {}
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            r = str(((cs.get("state") or {}).get("waiting") or {}).get("reason", ""))
            if r in ("ErrImagePull", "ImagePullBackOff"):
                return r
        return ""

    st.until("the pod says it cannot pull its image", reason, 60)
    phase = ((st.user.get("Pod", "nopull", st.namespace) or {}).get("status") or {}).get("phase")
    st.expect(phase == "Pending", "a pod that cannot pull stays Pending", phase)
    st.user.delete("Pod", "nopull", st.namespace)


def _ipc_lock_statefulset(name: str, service_account: str) -> Manifest:
    """One pod adding IPC_LOCK (what the product's RDMA workers add), created by the
    StatefulSet controller: SCC admission turns on the pod's service account."""
    labels = {**LABELS, "scenario/sts": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": dict(LABELS)},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": service_account,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.access.redhat.com/ubi9/ubi-minimal:latest",
                            "command": ["sleep", "infinity"],
                            "securityContext": {
                                "capabilities": {"add": ["IPC_LOCK"], "drop": ["ALL"]}
                            },
                        }
                    ],
                },
            },
        },
    }


def a_pod_is_admitted_only_through_an_scc_its_service_account_may_use(st: Stage) -> None:
    """OpenShift's SCC admission: a StatefulSet pod adding IPC_LOCK whose service account
    may use only restricted-v2 is refused (the StatefulSet's FailedCreate event says
    "unable to validate against any security context constraint"); with an SCC allowing
    IPC_LOCK that its service account may use, it is created and annotated
    ``openshift.io/scc`` with that SCC. Plain Kubernetes has no SCCs: the pod is created."""
    st.user.apply(_ipc_lock_statefulset("scc-refused", "default"), st.namespace)
    if not st.openshift:
        st.until(
            "the pod is created (no SCC on plain Kubernetes)",
            lambda: st.user.get("Pod", "scc-refused-0", st.namespace),
        )
        st.user.delete("StatefulSet", "scc-refused", st.namespace)
        return

    def refusal() -> str:
        for ev in st.user.events(st.namespace, "StatefulSet", "scc-refused"):
            if ev.reason == "FailedCreate" and "security context constraint" in ev.message:
                return ev.message
        return ""

    said = st.until("the StatefulSet's FailedCreate event names SCC admission", refusal)
    st.expect("IPC_LOCK" in said, "the refusal names the capability", said)
    st.expect(st.user.get("Pod", "scc-refused-0", st.namespace) is None, "no pod was created", said)
    scc_name = f"scenario-ipc-lock-{st.namespace}"
    role = f"{scc_name}-use"
    from mlenv.testing.kube.scc import scc_object

    st.admin.apply(
        scc_object(
            scc_name,
            allowedCapabilities=["IPC_LOCK"],
            requiredDropCapabilities=["ALL"],
            runAsUser={"type": "MustRunAsRange"},
            seLinuxContext={"type": "MustRunAs"},
            fsGroup={"type": "MustRunAs"},
            supplementalGroups={"type": "RunAsAny"},
            volumes=["configMap", "emptyDir", "persistentVolumeClaim", "projected", "secret"],
        ),
        None,
    )
    try:
        st.admin.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": [
                    {
                        "apiGroups": ["security.openshift.io"],
                        "resources": ["securitycontextconstraints"],
                        "resourceNames": [scc_name],
                        "verbs": ["use"],
                    }
                ],
            },
            None,
        )
        st.user.apply(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "rdma"}},
            st.namespace,
        )
        st.admin.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "rdma-scc"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": "rdma", "namespace": st.namespace}],
            },
            st.namespace,
        )
        st.user.apply(_ipc_lock_statefulset("scc-granted", "rdma"), st.namespace)
        pod = st.until(
            "the granted service account's pod is created",
            lambda: st.user.get("Pod", "scc-granted-0", st.namespace),
        )
        got = ((pod.get("metadata") or {}).get("annotations") or {}).get("openshift.io/scc")
        st.expect(
            got == scc_name, f"the admitted pod is annotated openshift.io/scc: {scc_name}", got
        )
        st.expect(
            st.user.get("Pod", "scc-refused-0", st.namespace) is None,
            "the default service account's pod is still refused",
        )
    finally:
        for name in ("scc-refused", "scc-granted"):
            st.user.delete("StatefulSet", name, st.namespace)
        st.admin.delete("RoleBinding", "rdma-scc", st.namespace)
        st.admin.delete("ClusterRole", role, None)
        st.admin.delete("SecurityContextConstraints", scc_name, None)


def openshift_kinds_exist_only_on_openshift(st: Stage) -> None:
    """A plain Kubernetes API does not serve Route, ImageStream, BuildConfig or SCC: get
    answers NotFound (as "no such resource", not "no such object") and apply is refused."""
    for kind in ("Route", "ImageStream", "BuildConfig", "SecurityContextConstraints"):
        ns = None if kind == "SecurityContextConstraints" else st.namespace
        if st.openshift:
            st.expect(
                st.admin.get(kind, "absent", ns) is None, f"an absent {kind} is None on OpenShift"
            )
            continue
        try:
            got = st.admin.get(kind, "absent", ns)
        except NotFound:
            got = None
        st.expect(got is None, f"no {kind} on plain Kubernetes", got)
        obj = {
            "apiVersion": "route.openshift.io/v1" if kind == "Route" else "image.openshift.io/v1",
            "kind": kind,
            "metadata": {"name": "x"},
        }
        try:
            st.admin.apply(obj, ns)
        except NotFound:
            continue
        raise ScenarioFailed(
            f"[{st.side}] applying a {kind} on plain Kubernetes is refused; it was accepted"
        )


def _one_by_one(client: ClusterClient, refs: list[ObjectRef]) -> dict[ObjectRef, Any]:
    """Each ref as ``get`` reads it alone (uid, or None), left out where get is refused."""
    out: dict[ObjectRef, Any] = {}
    for ref in refs:
        try:
            got = client.get(*ref)
        except ApiError:
            continue
        out[ref] = None if got is None else got["metadata"]["uid"]
    return out


def many_objects_read_at_once_answer_as_each_alone(st: Stage) -> None:
    """``get_many`` (one ``kubectl get KIND/NAME …`` per namespace, kubectl answering
    a List) reads what ``get`` reads one by one, for the admin and for the project admin,
    whom the API refuses cluster-scoped reads (the batch fails and falls back to one get
    each); a kind the server does not serve (ImageStream off OpenShift) is left out."""
    st.admin.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "many", "labels": dict(LABELS)},
            "data": {"k": "v"},
        },
        st.namespace,
    )
    refs: list[ObjectRef] = [
        ("ConfigMap", "many", st.namespace),
        ("ConfigMap", "absent", st.namespace),
        ("ServiceAccount", "default", st.namespace),
        ("ImageStream", "absent", st.namespace),
        ("Namespace", st.namespace, None),
        ("Namespace", "default", None),
    ]
    for who, client in (("admin", st.admin), ("project admin", st.user)):
        got = {
            ref: None if obj is None else obj["metadata"]["uid"]
            for ref, obj in client.get_many(refs).items()
        }
        st.expect(
            got == _one_by_one(client, refs), f"get_many reads as get does, for the {who}", got
        )
        st.expect(
            got.get(("ConfigMap", "many", st.namespace)) is not None,
            f"the {who} reads its ConfigMap",
            got,
        )
    st.admin.delete("ConfigMap", "many", st.namespace)


def many_questions_asked_at_once_answer_as_each_alone(st: Stage) -> None:
    """``can_i_many`` (one List of SelfSubjectAccessReviews, the API group given
    where ``auth can-i`` finds it through discovery) answers what ``auth can-i`` answers
    one by one, for the admin and for the project admin; a subresource is not a name
    (``pods`` + exec vs a pod named exec), and an unknown word or a question without a
    namespace is asked alone."""
    ns = st.namespace
    questions = [
        Question("create", "rolebindings", ns),
        Question("create", "rolebindings.rbac.authorization.k8s.io", ns),
        Question("bind", "clusterroles/mlenv-scenario-role", ns),
        Question("escalate", "roles/any", ns),
        Question("create", "pods", ns, "exec"),
        Question("create", "pods/exec", ns),
        Question("get", "pods/ml-dev-env-0", ns),
        Question("use", f"securitycontextconstraints/{SCC_NAME}", ns),
        Question("patch", "statefulsets.apps", ns),
        Question("create", "imagestreams.image.openshift.io", ns),
        Question("create", "networkpolicies.networking.k8s.io", ns),
        Question("create", "secrets", ns),
        Question("create", "clusterroles"),
        Question("list", "nodes", "default"),
        Question("get", "widgets", ns),
    ]
    for who, client in (("admin", st.admin), ("project admin", st.user)):
        alone = [
            client.can_i(q.verb, q.resource, q.namespace, subresource=q.subresource)
            for q in questions
        ]
        st.expect(
            client.can_i_many(questions) == alone,
            f"can_i_many answers as can_i does, for the {who}",
            list(
                zip(
                    [f"{q.verb} {q.resource} {q.subresource or ''}".strip() for q in questions],
                    alone,
                    strict=True,
                )
            ),
        )
    st.expect(
        st.user.can_i("create", "rolebindings", ns)
        and not st.user.can_i("bind", "clusterroles/mlenv-scenario-role", ns),
        "the project admin may create rolebindings and may not bind a cluster role",
    )


def _outcome(res: Any) -> str:
    """An apply's answer as a scenario compares it: the action, or the refusal's class."""
    return type(res).__name__ if isinstance(res, ApiError) else str(res.action)


def many_objects_dry_run_at_once_answer_as_each_alone(st: Stage) -> None:
    """``dry_run_many`` (deploy's server dry run: one ``apply --dry-run=server`` of a
    List per namespace) answers what ``apply(dry_run=True)`` answers one by one: unchanged,
    configured, created, and a refusal in the refused object's place, which makes the real
    batch fail and fall back to one call each; for the admin and for the project admin
    (RBAC refuses it the ClusterRole). Nothing is written."""
    ns = st.namespace
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dry", "labels": dict(LABELS)},
        "data": {"k": "v"},
    }
    st.admin.apply(cm, ns)
    changed = {**cm, "data": {"k": "w"}}
    new = {**cm, "metadata": {"name": "dry-new", "labels": dict(LABELS)}}
    role: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "mlenv-scenario-dry", "labels": dict(LABELS)},
        "rules": [],
    }
    for who, client in (("admin", st.admin), ("project admin", st.user)):
        for items in (
            [DryRunItem(cm, ns), DryRunItem(changed, ns), DryRunItem(new, ns)],
            [
                DryRunItem(cm, ns),
                DryRunItem(new, ns),
                DryRunItem(role, None),
                DryRunItem(changed, ns),
            ],
        ):
            got = [_outcome(r) for r in client.dry_run_many(items)]
            alone = []
            for it in items:
                try:
                    alone.append(_outcome(client.apply(it.manifest, it.namespace, dry_run=True)))
                except ApiError as e:
                    alone.append(_outcome(e))
            st.expect(
                got == alone,
                f"dry_run_many answers as apply(dry_run=True) does, for the {who}",
                list(zip(got, alone, strict=True)),
            )
        st.expect(
            got[:2] == ["unchanged", "created"] and got[3] == "configured",
            f"the {who}'s unchanged, new and changed ConfigMaps",
            got,
        )
        st.expect(
            (got[2] == "Forbidden") == (who == "project admin"),
            f"RBAC refuses the ClusterRole to the project admin only (the {who})",
            got,
        )
    st.expect(
        st.admin.get("ConfigMap", "dry-new", ns) is None
        and st.admin.get("ClusterRole", role["metadata"]["name"], None) is None,
        "a dry run creates nothing",
    )
    st.expect(
        (st.admin.get("ConfigMap", "dry", ns) or {}).get("data") == {"k": "v"},
        "a dry run changes nothing",
    )
    st.admin.delete("ConfigMap", "dry", ns)


SCENARIOS: dict[str, Callable[[Stage], None]] = {
    f.__name__: f
    for f in (
        binding_a_cluster_role_needs_bind_or_its_grants,
        quantities_come_back_in_canonical_form,
        a_bound_claim_cannot_shrink,
        a_changed_template_replaces_every_pod_with_the_new_revision,
        an_image_that_cannot_be_pulled_is_said_by_the_pod,
        openshift_kinds_exist_only_on_openshift,
        a_pod_is_admitted_only_through_an_scc_its_service_account_may_use,
        many_objects_read_at_once_answer_as_each_alone,
        many_questions_asked_at_once_answer_as_each_alone,
        many_objects_dry_run_at_once_answer_as_each_alone,
    )
}
