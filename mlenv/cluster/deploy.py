"""``deploy``: plan → preflight → server-side dry run → ssh Secret → apply → wait.

Nothing is applied unless the whole plan rendered and validated, preflight found no
blocking problem, and a server-side dry run of every object (the Secrets included)
was accepted: a Forbidden, Conflict or 422 found there applies nothing. Objects the API
cannot update in place (the workload's immutable fields, a bare Pod's spec) are deleted
and recreated, after saying so; ``--dry-run server`` reports "would recreate" instead.
Progress goes to the ``say`` callback; only the CLI prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from mlenv.cluster import keys
from mlenv.cluster.api import (
    CLUSTER_SCOPED_KINDS,
    FIELD_MANAGER,
    LABEL_COMPONENT,
    ApiError,
    ApplyResult,
    ClusterClient,
    DryRunItem,
    Forbidden,
    Invalid,
    Manifest,
    ObjectRef,
    PodView,
    Question,
    Unreachable,
    Unread,
    instance_selector,
    plural,
    resource_for,
)
from mlenv.cluster.nodepool import (
    labelled_nodes,
    pinned_by_label,
    pool_selector,
    put_labels,
    take_labels,
)
from mlenv.cluster.pods import neighbour_pods, split_pods
from mlenv.cluster.preflight import PreflightReport, Problem, foreign_objects, run_preflight
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.config.model import Mode
from mlenv.contract import (
    ANNOTATION_CREATED,
    APP,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    MANAGED_BY,
    shown,
)
from mlenv.errors import InfraError, InputError
from mlenv.render.names import DATASETS_PVC, DEV_POD, DEV_WORKSPACE_PVC, WORKSPACE_PVC, workload
from mlenv.workload import WORKER_KINDS, WORKLOADS

Renderer = Callable[[ClusterConfig, Mode, "int | None"], list[Manifest]]
Say = Callable[[str], None]
POLL_S = 2.0
# A poll of the wait reads every pod (with the workload and the warnings): at 512 pods
# about 11 MB through the API server, kubectl and this process, on the machines the pods
# start on. The next poll comes POLL_S after one ends, or POLL_SPACING times as long as
# that one took when it took longer, so the wait's own reads are at most a fifth of its
# time whatever the pod count (kubectl rollout status watches one object).
POLL_SPACING = 4.0
DELETE_WAIT_S = 120.0
# A RoleBinding's roleRef is immutable too: an RDMA deployment from before SCC names carried
# the namespace points its binding at the old ClusterRole, and the upgrade re-points it.
RECREATABLE = (*WORKER_KINDS, "Pod", "RoleBinding")
APPLY_TRIES = 3
# How the API server words a 422 for a field it cannot update in place.
IMMUTABLE_MARKERS = (
    "pod updates may not change fields",
    "cannot change roleref",
    *(w.immutable_marker for w in WORKLOADS),
    "field is immutable",
)


class PreflightFailed(InfraError):
    """Preflight found blocking problems (exit 2 when the config is at fault, else 3)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.exit_code = 2 if any(p.input for p in problems) else 3
        lines = "\n".join(f"  - {p.message}" for p in problems)
        super().__init__(f"preflight failed, nothing was applied:\n{lines}")


class DryRunRejected(InfraError):
    """The server-side dry run refused objects of the plan; nothing was applied.
    Exit 2 when every refusal is a 422 (the plan is invalid), else 3."""

    def __init__(self, rejections: list[tuple[str, ApiError]]) -> None:
        self.rejections = rejections
        self.exit_code = 2 if all(isinstance(e, Invalid) for _, e in rejections) else 3
        lines = "\n".join(f"  - {ref}: {e}" for ref, e in rejections)
        super().__init__(
            f"the server-side dry run refused {len(rejections)} object(s), "
            f"nothing was applied:\n{lines}"
        )


class DeployTimeout(InfraError):
    """Pods were not all Ready by the deadline; the message carries the reasons."""


class ImageUnavailable(DeployTimeout):
    """A pod's image cannot be pulled (ErrImagePull, then ImagePullBackOff): said within
    seconds, with the image and what to do, instead of at the Ready timeout."""


# Waiting reasons that waiting does not heal: the image is missing, private or misnamed.
PULL_FAILED = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
# ErrImagePull alone may be a registry's hiccup that the kubelet's next try survives;
# back-off, or the same failure for this long, is not.
PULL_GRACE_S = 15.0


class CrashLooping(DeployTimeout):
    """A worker's container keeps ending (CrashLoopBackOff): pod init failed, the same way
    each time. Said once it has been restarted CRASH_RESTARTS times, with its exit code and
    the end of its last run's log, instead of at the Ready timeout."""


# Restarts after which a crash loop is not a slow start: the kubelet restarts at once, then
# after 10 s and 20 s, so this is said about half a minute after the first failure.
CRASH_RESTARTS = 2
CRASH_LOG_LINES = 15


def crash_problem(cfg: ClusterConfig, client: ClusterClient, pod: PodView) -> str:
    """The crash loop in a few lines: the pod, its last exit code, its last run's log."""
    head = (
        f"{pod.name}: its container keeps exiting (CrashLoopBackOff, "
        + (f"exit {pod.last_exit}, " if pod.last_exit is not None else "")
        + f"{pod.restarts} restarts): pod init failed"
    )
    try:
        log = client.logs(pod.name, cfg.namespace, tail=CRASH_LOG_LINES, previous=True)
    except InfraError:
        try:
            log = client.logs(pod.name, cfg.namespace, tail=CRASH_LOG_LINES)
        except InfraError:
            log = ""
    lines = [shown(line) for line in log.splitlines() if line.strip()]
    body = (
        "; its last run's log ends:\n" + "\n".join(f"    {line}" for line in lines)
        if lines
        else "; its log is empty"
    )
    pod_index = pod.name.rsplit("-", 1)[-1]
    return (
        head
        + body
        + f"\n(`mlenv logs {cfg.name} --pod {pod_index}` shows it whole; nothing was rolled back: "
        f"`mlenv teardown {cfg.name}` removes what was applied)"
    )


class AdmissionRefused(DeployTimeout):
    """The API server's admission refused a pod the StatefulSet tried to create (Pod
    Security, an SCC, a ResourceQuota, a LimitRange, a webhook). The StatefulSet's
    FailedCreate event says so from the first try; waiting does not heal it, so it is said
    within seconds instead of at the Ready timeout (exit 3)."""


# How the API server words each admission refusal (in the FailedCreate event's message),
# with the policy it names and what the user can change.
ADMISSION_REFUSALS = (
    (
        "violates PodSecurity",
        "Pod Security admission",
        "the namespace's pod-security.kubernetes.io/enforce label does not allow what the "
        "pods ask for (RDMA pods add IPC_LOCK): ask its admin for the privileged level, or "
        "deploy with --mode tcp",
    ),
    (
        "exceeded quota",
        "a ResourceQuota",
        "the namespace's quota has no room for the pod: ask its admin for more, or deploy "
        "fewer pods (--nodes) or smaller ones (gpus.per_node, resources)",
    ),
    (
        "usage per ",
        "a LimitRange",
        "a LimitRange of the namespace bounds each container or pod: keep the pods' "
        "resources within it (kubectl describe limitrange) or ask its admin to widen it",
    ),
    (
        "security context constraint",
        "SCC admission",
        "",  # names the service account and the files: admission_refusal
    ),
    (
        "admission webhook",
        "an admission webhook",
        "a webhook of the cluster refused the pod: its message says why; ask the cluster's admin",
    ),
)
# A FailedCreate already there at the first look may be a former refusal the StatefulSet
# got past; one that is still the state of things this long after is not.
REFUSAL_SETTLE_S = 8.0


def admission_refusal(cfg: ClusterConfig, message: str) -> str:
    """One line for a FailedCreate message that is an admission refusal ("" otherwise)."""
    for marker, policy, change in ADMISSION_REFUSALS:
        if marker in message:
            why = message.split("is forbidden: ", 1)[-1]
            if policy == "SCC admission":
                # the grant that is missing is the pods' service account's (the
                # StatefulSet controller creates them, and may use restricted-v2 only)
                rdma = f"k8s/{cfg.name}/rdma"
                change = (
                    f"the service account {cfg.security.service_account} may use no "
                    "SecurityContextConstraints that admits the pods: deploy with --mode tcp, "
                    f"or have a cluster admin apply the RDMA SCC and its role "
                    f"({rdma}/securitycontextconstraints.yaml, {rdma}/clusterrole.yaml; "
                    "docs/deploy.md)"
                )
            return (
                f"{policy} refused pods of {workload(cfg).ref} in namespace "
                f"{cfg.namespace}: {why}; {change}"
            )
    return ""


def image_problem(cfg: ClusterConfig, stuck: list[PodView]) -> str:
    """One line: which pods, which image, why, and what to do."""
    from mlenv.render.names import default_image

    reasons = sorted({p.waiting_reason for p in stuck})
    head = (
        f"{', '.join(p.name for p in stuck)} cannot pull the image {default_image(cfg)} "
        f"({', '.join(reasons)})"
    )
    if not cfg.image.ref:
        return (
            head
            + ": the BuildConfig has not built it yet: `make build-image` (oc start-build), then "
            "deploy again; or set image.ref to an image the nodes can pull"
        )
    return (
        head
        + ": check image.ref's name and tag, and that the nodes may pull it (a pull secret for a "
        "private registry); or clear image.ref and `make build-image`"
    )


class ImageNotBuilt(InfraError):
    """the pods' image comes from this deployment's ImageStream and the BuildConfig
    has not pushed it yet (a first deploy on OpenShift: its build takes tens of minutes).
    Everything else is applied; the pods are not started on an image that is not there."""


def image_not_built(cfg: ClusterConfig, client: ClusterClient) -> str:
    """Why the pods' image is not there yet ("" when it is, or when it does not come from
    our ImageStream: image.ref set, or plain Kubernetes). The BuildConfig pushes to
    ``ml-dev-env:latest``; the ImageStream lists a pushed tag under ``status.tags`` with
    at least one item (the image's digest)."""
    if not cfg.traits.openshift or cfg.image.ref:
        return ""
    from mlenv.render.names import IMAGE_STREAM

    stream = client.get("ImageStream", IMAGE_STREAM, cfg.namespace)
    if stream is None:
        return f"ImageStream {IMAGE_STREAM} does not exist"
    for tag in (stream.get("status") or {}).get("tags") or []:
        if tag.get("tag") == "latest" and tag.get("items"):
            return ""
    return f"ImageStream {IMAGE_STREAM} has no image tagged latest yet (its first build has not finished)"


def _runs_our_image(cfg: ClusterConfig, m: Manifest) -> bool:
    """A workload whose containers run the ImageStream's image (the StatefulSet, the dev Pod)."""
    from mlenv.render.names import default_image

    spec = m.get("spec") or {}
    pod = ((spec.get("template") or {}).get("spec") or {}) if m.get("kind") != "Pod" else spec
    return any(c.get("image") == default_image(cfg) for c in (pod.get("containers") or []))


class DeployIncomplete(InfraError):
    """An apply failed after others succeeded (retried first): the message lists exactly
    what is now applied, what was deleted and not restored, and the command that restores
    or removes it (exit 3)."""

    def __init__(
        self, cause: Exception, done: list[str], pending: list[str], restore: str, remove: str
    ) -> None:
        lines = [f"deploy stopped half-way: {cause}", "now applied:"]
        lines += [f"  - {d}" for d in done] or ["  (nothing)"]
        if pending:
            lines.append("not applied:")
            lines += [f"  - {p}" for p in pending]
        lines.append(f"to finish it: {restore}")
        lines.append(f"to remove what was applied: {remove}")
        super().__init__("\n".join(lines))


@dataclass
class DeployOptions:
    """What the user asked for."""

    mode: Mode = "rdma"
    nodes: int | None = None
    dry_run: Literal["client", "server"] | None = None
    timeout: float = 900.0
    no_fallback: bool = False
    take_over: bool = False  # overwrite objects labelled for another instance (or unlabelled)
    scale_down: bool = False  # --nodes below the live deployment's pod count is meant


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
    recreated: list[str] = field(default_factory=list)  # "statefulset/x", "pod/y" (or would be)
    skipped: list[str] = field(default_factory=list)  # cluster-scoped objects left as they are
    ready: int = 0

    @property
    def unchanged(self) -> bool:
        """True when the apply changed no object."""
        return (
            bool(self.applied)
            and all(a.action == "unchanged" for a in self.applied)
            and not self.recreated
            and self.ssh_secret == "kept"
        )


class ReadOnce:
    """A client whose ``get`` reads each object once: for deploy's checks before it
    applies anything (preflight, ownership, the created-by mark, secrets, the dry run),
    which each read the same objects. Measured on the kube tier: 53 ``kubectl get`` of
    95 calls for one deploy of the ``local`` example, each object read 4 to 8 times, at
    about 0.3 s a process; nothing is written in that phase (dry runs persist nothing),
    so a second read could only see another writer's change, which the apply meets
    anyway. Everything else goes to the client."""

    def __init__(self, client: ClusterClient) -> None:
        self._client = client
        self._seen: dict[ObjectRef, Manifest | None] = {}
        self._answers: dict[Question, bool] = {}

    def get(self, kind: str, name: str, namespace: str | None) -> Manifest | None:
        """The object as first read (None: it did not exist)."""
        key = (kind, name, namespace)
        if key not in self._seen:
            self._seen[key] = self._client.get(kind, name, namespace)
        got = self._seen[key]
        return None if got is None else json.loads(json.dumps(got))  # callers may change theirs

    def get_many(self, refs: Sequence[ObjectRef]) -> dict[ObjectRef, Manifest | None]:
        """the refs not read yet in one :meth:`ClusterClient.get_many` (one client
        process per namespace, not one per object), then every ref as :meth:`get` has it.
        A ref the server refused stays unread: the caller's own :meth:`get` meets the
        refusal where it met it before."""
        self._seen.update(self._client.get_many([r for r in refs if r not in self._seen]))
        return {r: self.get(*r) for r in refs if r in self._seen}

    def can_i(
        self,
        verb: str,
        resource: str,
        namespace: str | None = None,
        *,
        as_user: str | None = None,
        subresource: str | None = None,
    ) -> bool:
        """The answer as first given (preflight primes them all at once, then asks
        one by one); an impersonated question is always asked."""
        if as_user is not None:
            return self._client.can_i(
                verb, resource, namespace, as_user=as_user, subresource=subresource
            )
        q = Question(verb, resource, namespace, subresource)
        if q not in self._answers:
            self._answers[q] = self._client.can_i(
                verb, resource, namespace, subresource=subresource
            )
        return self._answers[q]

    def can_i_many(self, questions: Sequence[Question]) -> list[bool]:
        """The questions not answered yet in one :meth:`ClusterClient.can_i_many`."""
        todo = [q for q in dict.fromkeys(questions) if q not in self._answers]
        if todo:
            self._answers.update(zip(todo, self._client.can_i_many(todo), strict=True))
        return [self._answers[q] for q in questions]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def default_renderer(cfg: ClusterConfig, mode: Mode, nodes: int | None) -> list[Manifest]:
    """The real renderer (imported lazily; it validates against the API schemas)."""
    from mlenv.render.plan import render_cluster

    return render_cluster(cfg, mode, nodes)


def plan(
    cfg: ClusterConfig, mode: Mode, nodes: int | None, render: Renderer | None = None
) -> list[Manifest]:
    """The manifests deploy would apply, in apply order (raises InputError if invalid)."""
    return (render or default_renderer)(cfg, mode, nodes)


def _worker_count(cfg: ClusterConfig, manifests: list[Manifest]) -> int:
    wl = workload(cfg)
    for m in manifests:
        if m.get("kind") == wl.kind:
            return wl.desired(m)
    raise InputError(f"the plan has no {wl.kind}")


def _same_quantity(requests: dict[str, Any]) -> Any:
    """The storage request as a number of bytes: the API server returns ``1024Gi`` as ``1Ti``
    (its canonical form), which is the same claim and must not count as a change."""
    from mlenv.config.rules import parse_quantity

    raw = requests.get("storage")
    value = parse_quantity(str(raw)) if raw is not None else None
    return raw if value is None else value


def immutable_changes(cfg: ClusterConfig, live: Manifest, planned: Manifest) -> list[str]:
    """Names of the workload's immutable fields that differ between live and planned
    (claim sizes compared as quantities)."""
    return workload(cfg).immutable_changes(live, planned, _same_quantity)


def deploy(
    cfg: ClusterConfig,
    opts: DeployOptions,
    client: ClusterClient | None,
    *,
    render: Renderer | None = None,
    say: Say = lambda _m: None,
) -> DeployReport:
    """Deploy a cluster config. ``client`` may be None only for ``dry_run="client"``."""
    requested: Mode = opts.mode
    mode = cfg.effective_mode(requested)
    # (a requested mode the config cannot give: the caller has already warned, once)
    manifests = plan(cfg, mode, opts.nodes, render)
    nodes = _worker_count(cfg, manifests)
    rep = DeployReport(requested, mode, nodes, manifests)
    if opts.dry_run == "client":
        return rep
    if client is None:
        raise InputError("no cluster connection (internal: client is None)")
    applier, client = client, cast(ClusterClient, ReadOnce(client))  # reads until the apply
    # every object the checks below read, in one get per namespace
    client.get_many(
        [(str(m["kind"]), str(m["metadata"]["name"]), _scope(cfg, m)) for m in manifests]
        + [("Secret", n, cfg.namespace) for n in (keys.SECRET_NAME, keys.DEVTOOLS_SECRET)]
    )
    if opts.nodes is not None and not opts.scale_down:
        _refuse_silent_scale_down(cfg, client, nodes)
    from mlenv.cluster import legacy  # say what happens to upstream ml-dev-env's objects

    for line in legacy.deploy_notice(
        cfg, legacy.find(client, cfg.namespace, openshift=cfg.traits.openshift)
    ):
        say(line)
    pre = run_preflight(cfg, mode, nodes, manifests, client)
    for note in pre.notes:
        say(f"preflight: note: {note}")
    if mode == "rdma" and pre.rdma:
        reasons = [p.message for p in pre.rdma]
        if opts.no_fallback or not cfg.rdma.allow_tcp_fallback:
            why = "--no-fallback" if opts.no_fallback else "rdma.allow_tcp_fallback is false"
            raise PreflightFailed(
                pre.blocking
                + pre.rdma
                + [Problem("rdma", f"RDMA prerequisites missing and TCP fallback is off ({why})")]
            )
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
        for note in pre.notes:
            say(f"preflight (tcp): note: {note}")
        rep.mode, rep.manifests = mode, manifests
    rep.preflight = pre
    neighbours = neighbour_pods(cfg, client)
    if neighbours:  # ignored everywhere, but someone in the namespace made them
        say(
            f"preflight: warning: pod(s) {', '.join(neighbours)} carry the labels of "
            f"{cfg.name} but are not its {workload(cfg).kind}'s: sync, status, launch and teardown "
            f"ignore them; the namespace {cfg.namespace} is the trust boundary for the NCCL "
            "world and the c10d store (docs/security.md)"
        )
    if pre.blocking:
        raise PreflightFailed(pre.blocking)
    leave = set(pre.skip)
    todo = [m for m in manifests if (m["kind"], m["metadata"]["name"]) not in leave]
    _check_ownership(cfg, todo, client, opts.take_over, say)
    say(f"preflight: ok ({pre.user} on {pre.server}, namespace {cfg.namespace})")
    rep.skipped = [f"{k.lower()}/{n}" for k, n in pre.skip]  # the preflight notes say why
    secrets = _planned_secrets(cfg, manifests, client, rep, say)
    todo = [mark_created(m, client, _scope(cfg, m)) for m in todo]
    secrets = [mark_created(m, client, cfg.namespace) for m in secrets]
    server_dry = opts.dry_run == "server"
    recreate = dry_run_plan(cfg, secrets + todo, client, rep, say, report=server_dry)
    if server_dry:
        going = terminating(cfg, secrets + todo, client)
        if going:
            say(f"would wait for {', '.join(going)} to finish Terminating before applying")
        if pre.unlabelled:
            say(f"would label {len(pre.unlabelled)} pinned node(s) {pool_selector(cfg)}")
        return rep
    say(f"server-side dry run: {len(secrets) + len(todo)} object(s) accepted; applying")
    client = applier  # from here on every read is fresh
    spent = wait_terminating(cfg, secrets + todo, client, opts.timeout, say)
    _pin_pool(cfg, pre, client, say)
    _apply_phase(cfg, opts, mode, secrets, todo, client, rep, recreate, say)
    rep.ready = wait_ready(cfg, nodes, client, max(opts.timeout - spent, POLL_S), say)
    return rep


def _pin_pool(cfg: ClusterConfig, pre: PreflightReport, client: ClusterClient, say: Say) -> None:
    """``nodes.pin_by: label``: the pool label on the pinned nodes that lack it (before the
    pods, which select it, exist), and off the nodes a config pinned before and no longer
    lists (one read by the label; a user who may not list or patch Nodes is told)."""
    if not pinned_by_label(cfg):
        return
    label = pool_selector(cfg)
    put_labels(cfg, client, pre.unlabelled, pre.named)
    if pre.unlabelled:
        say(f"labelled {len(pre.unlabelled)} pinned node(s) {label} (nodes.pin_by: label)")
    pinned = set(cfg.gpu_nodes)
    stale = [n for n in labelled_nodes(cfg, client) or [] if n["metadata"]["name"] not in pinned]
    said = take_labels(cfg, client, stale)
    if stale and not said:
        say(f"took {label} off {len(stale)} node(s) no longer in nodes.gpu_nodes")
    for line in said:
        say(f"warning: {line}")


def _deleted(m: Manifest | None) -> bool:
    return m is not None and "deletionTimestamp" in (m.get("metadata") or {})


def terminating(cfg: ClusterConfig, objs: list[Manifest], client: ClusterClient) -> list[str]:
    """The objects of the plan, and this instance's pods and claims, that are Terminating
    (deleted, within a grace period or held by a finalizer). On a real cluster a teardown
    leaves them so for seconds: an apply then finds the dying object, says "unchanged", and
    the garbage collector removes it (and the StatefulSet's pods, the dev Pod, a purged
    claim) after the deploy has counted it."""
    refs = [(str(m["kind"]), str(m["metadata"]["name"]), _scope(cfg, m)) for m in objs]
    out = [
        f"{k.lower()}/{n}" for (k, n, _), live in client.get_many(refs).items() if _deleted(live)
    ]
    sel = instance_selector(cfg.name)
    for p in client.list("Pod", cfg.namespace, sel):
        meta = p.get("metadata") or {}
        ours = meta.get("name") == DEV_POD or workload(cfg).made(p)
        if ours and _deleted(p) and f"pod/{meta.get('name')}" not in out:
            out.append(f"pod/{meta.get('name')}")
    for c in client.list("PersistentVolumeClaim", cfg.namespace, sel):
        ref = f"persistentvolumeclaim/{c['metadata']['name']}"
        if _deleted(c) and ref not in out:
            out.append(ref)
    return out


def wait_terminating(
    cfg: ClusterConfig, objs: list[Manifest], client: ClusterClient, timeout: float, say: Say
) -> float:
    """Wait (at most ``timeout``) until nothing :func:`terminating` names is left, saying
    so in one line; the seconds spent. Nothing is applied before: an object applied while
    it is Terminating is gone seconds later."""
    start = client.monotonic()
    going = terminating(cfg, objs, client)
    if not going:
        return 0.0
    say(
        f"{', '.join(going)}: Terminating (deleted by an earlier teardown or delete): "
        "waiting for them to go before applying"
    )
    while going:
        if client.monotonic() - start >= timeout:
            raise DeployTimeout(
                f"{', '.join(going)} still Terminating after {timeout:g} s; nothing was "
                "applied: a finalizer may hold them (kubectl get -o yaml shows "
                "metadata.finalizers); deploy again once they are gone"
            )
        client.pause(POLL_S)
        going = terminating(cfg, objs, client)
    spent = client.monotonic() - start
    say(f"the Terminating objects are gone ({spent:.0f} s); applying")
    return spent


def _apply_phase(
    cfg: ClusterConfig,
    opts: DeployOptions,
    mode: Mode,
    secrets: list[Manifest],
    todo: list[Manifest],
    client: ClusterClient,
    rep: DeployReport,
    recreate: dict[str, str],
    say: Say,
) -> None:
    """The secrets, then the plan (:func:`_apply_unless_unbuilt`); a failure after some
    applies is DeployIncomplete, listing what is applied and the commands that restore or
    remove it."""
    done: list[str] = []
    try:
        # each object's state before its apply, in one read: the applies before it
        # write only themselves (a controller's status write in between reads as
        # "configured", as it could within the one call's time before)
        reads = client.get_many(
            [(str(m["kind"]), str(m["metadata"]["name"]), _scope(cfg, m)) for m in secrets + todo]
        )
        for secret in secrets:
            key = ("Secret", str(secret["metadata"]["name"]), cfg.namespace)
            _apply_retrying(
                client, secret, cfg.namespace, say, force=True, live=reads.get(key, Unread.UNREAD)
            )
            done.append(f"secret/{secret['metadata']['name']}: created")
            say(f"secret/{secret['metadata']['name']} created")
        _apply_unless_unbuilt(cfg, todo, client, rep, recreate, say, done, reads)
    except ImageNotBuilt:
        raise
    except (ApiError, InfraError) as e:
        applied = {d.split(":", 1)[0] for d in done}
        pending = [_ref(m) for m in secrets + todo if _ref(m) not in applied]
        again = f"mlenv deploy {cfg.name} --mode {mode}" + (
            f" --nodes {opts.nodes}" if opts.nodes else ""
        )
        # a refusal (admission, RBAC, an invalid object) meets the same plan again: the
        # retry is only worth suggesting after the cause is changed
        refused = isinstance(e, (Forbidden, Invalid))
        raise DeployIncomplete(
            e,
            done,
            pending,
            restore=(
                f"change what the refusal above names (the config, or the namespace's "
                f"policy), then {again}"
                if refused
                else f"{again} (re-runs the same plan)"
            ),
            remove=f"mlenv teardown {cfg.name} (deletes only what mlenv created)",
        ) from e


def _check_ownership(
    cfg: ClusterConfig, todo: list[Manifest], client: ClusterClient, take_over: bool, say: Say
) -> None:
    """refuse to overwrite live objects of another instance unless ``take_over``."""
    names = {keys.SECRET_NAME, keys.DEVTOOLS_SECRET}
    probes = todo + [{"kind": "Secret", "metadata": {"name": n}} for n in sorted(names)]
    foreign = foreign_objects(cfg, probes, client)
    if not foreign:
        return
    if take_over:
        for f in foreign:
            say(f"take-over: {f}: overwriting it (--take-over)")
        return
    raise PreflightFailed(
        [
            Problem(
                "blocking",
                f"{len(foreign)} object(s) this deploy would overwrite in namespace {cfg.namespace} "
                "are not this deployment's:\n"
                + "\n".join(f"      {f}" for f in foreign)
                + "\n    deploy into another namespace, tear the other one down, or pass "
                "--take-over to overwrite them (their owner's pods are replaced)",
                input=True,
            )
        ]
    )


def mark_created(m: Manifest, client: ClusterClient, namespace: str | None) -> Manifest:
    """``m`` with the created-by annotation when this deploy creates it (or an earlier
    mlenv deploy did): server-side apply would drop the annotation if a later apply left
    it out, so it is re-applied as long as the live object has it. An object that existed
    without it (a pre-created ServiceAccount) is adopted and never marked."""
    live = client.get(str(m["kind"]), str(m["metadata"]["name"]), namespace)
    if live is not None and ANNOTATION_CREATED not in (
        (live.get("metadata") or {}).get("annotations") or {}
    ):
        return m
    out = json.loads(json.dumps(m))
    out["metadata"].setdefault("annotations", {})[ANNOTATION_CREATED] = "mlenv"
    return dict(out)


def _apply_retrying(
    client: ClusterClient,
    m: Manifest,
    namespace: str | None,
    say: Say,
    *,
    force: bool = False,
    live: Manifest | None | Unread = Unread.UNREAD,
) -> ApplyResult:
    """Apply, retrying a failure that is not the plan's fault (not 422, not 403) twice
    with a growing pause: a flaky API must not leave a half-applied namespace. A server
    that did not answer at all is not retried (each try would cost the full API
    timeout again). ``live`` serves the first try only: a failed try may have written."""
    for attempt in range(1, APPLY_TRIES + 1):
        try:
            return client.apply(
                m,
                namespace,
                field_manager=FIELD_MANAGER,
                force_conflicts=force,
                live=live if attempt == 1 else Unread.UNREAD,
            )
        except (Invalid, Forbidden, Unreachable):
            raise
        except (ApiError, InfraError) as e:
            if attempt == APPLY_TRIES:
                raise
            say(f"{_ref(m)}: apply failed ({e}); retrying ({attempt}/{APPLY_TRIES - 1})")
            client.pause(2.0 * attempt)
    raise AssertionError("unreachable")


def _needs_devtools_secret(manifests: list[Manifest]) -> bool:
    for m in manifests:
        spec = m.get("spec") or {}
        for v in spec.get("volumes") or []:
            if (v.get("secret") or {}).get("secretName") == keys.DEVTOOLS_SECRET:
                return True
        if m.get("kind") == "Pod" and any(
            (e.get("valueFrom") or {}).get("secretKeyRef", {}).get("name") == keys.DEVTOOLS_SECRET
            for c in spec.get("containers") or []
            for e in c.get("env") or []
        ):
            return True
    return False


def secret_labels(cfg: ClusterConfig) -> dict[str, str]:
    """Labels of the Secrets deploy creates: a Secret made elsewhere (a GitOps tool applying
    ``mlenv secrets`` output) with these labels is this instance's and is kept."""
    return {
        **instance_selector(cfg.name),
        LABEL_PART_OF: APP,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: "ssh",
    }


def secrets_for_gitops(cfg: ClusterConfig, manifests: list[Manifest]) -> list[Manifest]:
    """Fresh Secrets a rendered tree needs but does not contain (the ssh keys, and the
    dev-tools credentials when a rendered object refers to them), for a GitOps tool to
    seal and apply beside ``k8s/<cluster>/<mode>/`` (``mlenv secrets``)."""
    labels = secret_labels(cfg)
    out = [keys.secret_manifest(cfg.namespace, labels, keys.generate_keys(f"mlenv@{cfg.name}"))]
    if _needs_devtools_secret(manifests):
        out.append(keys.devtools_secret_manifest(cfg.namespace, {**labels, LABEL_COMPONENT: "dev"}))
    return out


def _planned_secrets(
    cfg: ClusterConfig,
    manifests: list[Manifest],
    client: ClusterClient,
    rep: DeployReport,
    say: Say = lambda _m: None,
) -> list[Manifest]:
    """The Secrets deploy creates (none when complete ones of this instance exist: keys
    are kept; an empty or foreign one is regenerated, and that is said)."""
    labels = secret_labels(cfg)
    out = []
    for name, wanted in (
        (keys.SECRET_NAME, keys.KEY_FILES),
        (keys.DEVTOOLS_SECRET, keys.DEVTOOLS_KEYS),
    ):
        why = keys.why_not_reusable(client.get("Secret", name, cfg.namespace), wanted, labels)
        if why:
            say(f"secret/{name}: not reusable ({why}): generating new values")
    ssh = keys.planned_ssh_secret(client, cfg.namespace, labels, f"mlenv@{cfg.name}")
    rep.ssh_secret = "kept" if ssh is None else "created"
    if ssh is not None:
        out.append(ssh)
    if _needs_devtools_secret(manifests):
        dev = keys.planned_devtools_secret(
            client, cfg.namespace, {**labels, LABEL_COMPONENT: "dev"}
        )
        if dev is not None:
            out.append(dev)
    return out


def _scope(cfg: ClusterConfig, m: Manifest) -> str | None:
    return None if m.get("kind") in CLUSTER_SCOPED_KINDS else cfg.namespace


def _ref(m: Manifest) -> str:
    return f"{str(m['kind']).lower()}/{m['metadata']['name']}"


def _immutable(e: Invalid) -> bool:
    low = str(e).lower()
    return any(marker in low for marker in IMMUTABLE_MARKERS)


def _sa_created_here(m: Manifest, objs: list[Manifest], client: ClusterClient, ns: str) -> str:
    """The service account a Pod runs as when this deploy creates it ("" otherwise): the
    API's admission rejects even a dry-run Pod whose service account does not exist yet."""
    sa = str((m.get("spec") or {}).get("serviceAccountName", ""))
    planned = any(o.get("kind") == "ServiceAccount" and o["metadata"]["name"] == sa for o in objs)
    if sa and planned and client.get("ServiceAccount", sa, ns) is None:
        return sa
    return ""


def _role_created_here(m: Manifest, objs: list[Manifest], client: ClusterClient, ns: str) -> str:
    """The Role a RoleBinding of the plan refers to when this deploy creates it ("" otherwise).
    for a user without ``bind``, the API server's escalation check reads the Role the
    binding names, and refuses a binding to one that does not exist yet (Forbidden, "not
    found") even in a dry run; the real apply creates the Role first."""
    ref = m.get("roleRef") or {}
    if m.get("kind") != "RoleBinding" or ref.get("kind") != "Role":
        return ""
    role = str(ref.get("name", ""))
    planned = any(o.get("kind") == "Role" and o["metadata"]["name"] == role for o in objs)
    if planned and client.get("Role", role, ns) is None:
        return role
    return ""


def dry_run_plan(
    cfg: ClusterConfig,
    objs: list[Manifest],
    client: ClusterClient,
    rep: DeployReport,
    say: Say,
    *,
    report: bool,
) -> dict[str, str]:
    """Server-side dry-run apply of every object. Collects every refusal and raises
    DryRunRejected when there is one; returns the objects to recreate (ref → why).
    With ``report`` (``--dry-run server``) each result is said and recorded."""
    ns = cfg.namespace
    recreate: dict[str, str] = {}
    rejected: list[tuple[str, ApiError]] = []
    asked: list[Manifest] = []
    for m in objs:
        kind, name, ref = str(m["kind"]), m["metadata"]["name"], _ref(m)
        if kind == workload(cfg).kind:
            live = client.get(kind, name, ns)
            changed = immutable_changes(cfg, live, m) if live is not None else []
            if changed:
                recreate[ref] = f"immutable field(s) changed ({', '.join(changed)})"
                continue
        if kind == "Pod":
            sa = _sa_created_here(m, objs, client, ns)
            if sa:
                say(
                    f"{ref}: not in the server-side dry run: its service account {sa} is "
                    "created by this deploy (admission looks it up)"
                )
                continue
        role = _role_created_here(m, objs, client, ns)
        if role:
            say(
                f"{ref}: not in the server-side dry run: its role {role} is created by this "
                "deploy (RBAC's escalation check reads it; preflight checked you hold what it grants)"
            )
            continue
        asked.append(m)
    # all of them in one client call per namespace, each answered as it would be alone,
    # judged against deploy's read (ReadOnce: nothing wrote it since)
    answers = client.dry_run_many(
        [
            DryRunItem(
                m,
                _scope(cfg, m),
                live=client.get(str(m["kind"]), m["metadata"]["name"], _scope(cfg, m)),
                force_conflicts=m["kind"] == "Secret",
            )
            for m in asked
        ]
    )
    warned: list[str] = []
    for res in answers:
        if isinstance(res, ApplyResult):
            warned += [w for w in res.warnings if w not in warned]
    for w in warned:
        # Pod Security warns of a workload's pod template at the namespace's warn (and
        # audit) level; its enforce level refuses the pods themselves, which the wait
        # reports within seconds (AdmissionRefused)
        say(f"server warning (dry run): {shown(w)}")
    for m, res in zip(asked, answers, strict=True):
        kind, name, ref = str(m["kind"]), m["metadata"]["name"], _ref(m)
        if isinstance(res, Invalid):
            if kind in RECREATABLE and _immutable(res):
                recreate[ref] = (
                    "its spec changed in fields a Pod cannot update in place"
                    if kind == "Pod"
                    else "its roleRef changed"
                    if kind == "RoleBinding"
                    else "the API refuses the update in place"
                )
            else:
                rejected.append(
                    (
                        ref,
                        _claim_size_hint(res, m, client, ns)
                        if kind == "PersistentVolumeClaim"
                        else res,
                    )
                )
            continue
        if isinstance(res, ApiError):  # Forbidden, Conflict, NotFound (no such kind or namespace)
            rejected.append((ref, res))
            continue
        if report:
            if kind == "Secret":
                rep.ssh_secret = "would create" if name == keys.SECRET_NAME else rep.ssh_secret
                say(f"{ref} would be created (server dry run)")
            else:
                rep.applied.append(res)
                say(f"{ref} {res.action} (server dry run)")
    for ref in recreate:  # recreating deletes first: that must be allowed too
        m = next(o for o in objs if _ref(o) == ref)
        kind = str(m["kind"])
        if not client.can_i("delete", resource_for(kind, str(m.get("apiVersion", "v1"))), ns):
            rejected.append(
                (
                    ref,
                    Forbidden(
                        f"it must be deleted and recreated, and "
                        f"{client.whoami()} may not delete {plural(kind)}",
                        kind=kind,
                    ),
                )
            )
    if rejected:
        raise DryRunRejected(rejected)
    if report:
        for ref, why in recreate.items():
            rep.recreated.append(ref)
            say(f"{ref}: {why}: would delete and recreate it (server dry run: nothing changed)")
    return recreate


# the config key that sizes each claim mlenv creates (render/plan.py)
_CLAIM_KEYS = {
    WORKSPACE_PVC: "storage.workspace_size",
    DEV_WORKSPACE_PVC: "storage.workspace_size",
    DATASETS_PVC: "storage.datasets_size",
}


def _claim_size_hint(e: Invalid, claim: Manifest, client: ClusterClient, ns: str) -> Invalid:
    """The server's refusal of a smaller bound claim, with the config key to set back and
    the size the claim has (a bound claim never shrinks; growing needs a StorageClass with
    ``allowVolumeExpansion``). Other refusals of a claim pass through as they are."""
    name = str((claim.get("metadata") or {}).get("name", ""))
    key = _CLAIM_KEYS.get(name)
    if key is None or "spec.resources.requests.storage" not in str(e):
        return e
    live = client.get("PersistentVolumeClaim", name, ns) or {}
    have = ((live.get("status") or {}).get("capacity") or {}).get("storage") or (
        ((live.get("spec") or {}).get("resources") or {}).get("requests") or {}
    ).get("storage")
    return Invalid(
        f"{e}; the claim is bound{f' at {have}' if have else ''} and cannot shrink: set {key} "
        f"back{f' to {have}' if have else ''} (a bound claim grows only where its StorageClass "
        "allows volume expansion; `teardown --purge` deletes the claim and its data)",
        kind="PersistentVolumeClaim",
        name=name,
    )


def _apply_all(
    cfg: ClusterConfig,
    manifests: list[Manifest],
    client: ClusterClient,
    rep: DeployReport,
    recreate: dict[str, str],
    say: Say,
    done: list[str] | None = None,
    reads: dict[ObjectRef, Manifest | None] | None = None,
) -> None:
    """Apply in order; ``done`` collects "ref: action" lines (a deleted-for-recreate
    object that could not be re-applied is listed as deleted) for the failure report.
    ``reads``: objects as read before the first apply (the rest, and what is recreated,
    are read by the apply itself)."""
    done = [] if done is None else done
    for m in manifests:
        kind, name, ref = str(m["kind"]), m["metadata"]["name"], _ref(m)
        key = (kind, str(name), _scope(cfg, m))
        live: Manifest | None | Unread = (reads or {}).get(key, Unread.UNREAD)
        if ref in recreate:
            _recreate(client, kind, cfg.namespace, name, recreate[ref], say)
            rep.recreated.append(ref)
            done.append(f"{ref}: DELETED to be recreated, not yet re-applied")
            live = Unread.UNREAD
        try:
            res = _apply_retrying(client, m, _scope(cfg, m), say, live=live)
        except Invalid as e:
            if kind not in RECREATABLE or ref in rep.recreated or not _immutable(e):
                raise
            # the live object changed after the dry run: trust the 422
            _recreate(client, kind, cfg.namespace, name, "the API refuses the update in place", say)
            rep.recreated.append(ref)
            done.append(f"{ref}: DELETED to be recreated, not yet re-applied")
            res = _apply_retrying(client, m, _scope(cfg, m), say)
        if done and done[-1].startswith(f"{ref}: DELETED"):
            done.pop()
        done.append(f"{ref}: {'recreated' if ref in rep.recreated else res.action}")
        rep.applied.append(res)
        say(f"{ref} {res.action}")


def _apply_unless_unbuilt(
    cfg: ClusterConfig,
    todo: list[Manifest],
    client: ClusterClient,
    rep: DeployReport,
    recreate: dict[str, str],
    say: Say,
    done: list[str],
    reads: dict[ObjectRef, Manifest | None] | None = None,
) -> None:
    """:func:`_apply_all` in plan order, but the workloads that run the ImageStream's image
    only once it has one: it is looked at when the first workload is due (the
    ImageStream and BuildConfig come before it in the plan, so a first deploy has made
    them). Held workloads: everything else is applied, then ImageNotBuilt."""
    first = next((i for i, m in enumerate(todo) if _runs_our_image(cfg, m)), len(todo))
    _apply_all(cfg, todo[:first], client, rep, recreate, say, done, reads)
    unbuilt = image_not_built(cfg, client) if first < len(todo) else ""
    held = [m for m in todo[first:] if unbuilt and _runs_our_image(cfg, m)]
    _apply_all(
        cfg, [m for m in todo[first:] if m not in held], client, rep, recreate, say, done, reads
    )
    if held:
        raise ImageNotBuilt(
            f"{', '.join(_ref(m) for m in held)} not started: {unbuilt}. Everything else is applied "
            f"and the BuildConfig's build runs on its own: follow it with `make build-image "
            f"CLUSTER={cfg.name}` (oc start-build --follow), then deploy again; or set image.ref to an "
            "image the nodes can pull"
        )


def _recreate(client: ClusterClient, kind: str, ns: str, name: str, why: str, say: Say) -> None:
    if kind in WORKER_KINDS:
        say(
            f"{kind.lower()}/{name}: {why}: deleting and recreating it; pods are replaced, "
            "PVCs are kept"
        )
        # foreground: the pods go with it before the new one takes their names
        client.delete(kind, name, ns, cascade="foreground")
    elif kind == "RoleBinding":
        say(
            f"rolebinding/{name}: {why}: deleting and recreating it (its roleRef cannot "
            "change in place; running pods keep the SCC they were admitted with)"
        )
        client.delete(kind, name, ns)
    else:
        say(
            f"{kind.lower()}/{name}: {why}: deleting and recreating it (a bare {kind} "
            "cannot be updated in place; what runs in it restarts)"
        )
        client.delete(kind, name, ns)
    deadline = client.monotonic() + DELETE_WAIT_S
    while client.get(kind, name, ns) is not None:
        if client.monotonic() > deadline:
            raise DeployTimeout(f"{kind.lower()}/{name} was not deleted within {DELETE_WAIT_S:g} s")
        client.pause(1.0)


def pending_reasons(
    cfg: ClusterConfig, client: ClusterClient, pods: list[PodView], sts_uid: str = ""
) -> list[str]:
    """Why pods are not Ready, from their events and the workload's (latest first);
    with ``sts_uid``, only that workload object's (a torn-down one's events outlive it)."""
    out: list[str] = []
    wl = workload(cfg)
    for ev in client.events(cfg.namespace, wl.kind, wl.name, warnings=True):
        if not sts_uid or not ev.uid or ev.uid == sts_uid:
            out.append(f"{wl.ref}: {ev.reason}: {ev.message}")
    for p in pods:
        if p.ready:
            continue
        warnings = [
            e
            for e in client.events(cfg.namespace, "Pod", p.name, warnings=True)
            if not e.uid or not p.uid or e.uid == p.uid
        ]
        if warnings:
            e = warnings[-1]
            out.append(f"{p.name}: {e.reason}: {e.message}")
        elif p.waiting_reason:
            out.append(f"{p.name}: {p.phase}: {p.waiting_reason}")
        else:
            out.append(f"{p.name}: {p.phase}, not Ready yet")
    return out


def _latest_warnings(
    cfg: ClusterConfig, client: ClusterClient, pods: list[PodView]
) -> dict[str, str]:
    """Pod name → reason of its latest Warning event (FailedScheduling, FailedMount,
    FailedCreatePodSandBox…), one events call per poll: a Pending pod with no container
    yet has no waiting reason of its own, and "Pending" alone tells nobody anything. Only
    the current pod's events count (by uid): a replaced pod has its predecessor's name,
    and its FailedScheduling would be shown for minutes."""
    uids = {p.name: p.uid for p in pods}
    out: dict[str, str] = {}
    for ev in client.events(cfg.namespace, "Pod", warnings=True):
        if not ev.uid or ev.uid == uids.get(ev.name, ev.uid):
            out[ev.name] = ev.reason
    return out


def _refusals(cfg: ClusterConfig, client: ClusterClient, sts: Manifest | None) -> dict[str, int]:
    """The workload's FailedCreate events that are admission refusals: line → count.
    Only this object's (by uid): one torn down before kept its events for an hour."""
    uid = str(((sts or {}).get("metadata") or {}).get("uid", ""))
    out: dict[str, int] = {}
    wl = workload(cfg)
    for ev in client.events(cfg.namespace, wl.kind, wl.name, warnings=True):
        line = admission_refusal(cfg, ev.message) if ev.reason == "FailedCreate" else ""
        if line and (not ev.uid or ev.uid == uid):
            out[line] = max(out.get(line, 0), ev.count)
    return out


def _refuse_silent_scale_down(cfg: ClusterConfig, client: ClusterClient, nodes: int) -> None:
    """An explicit --nodes below the live deployment's pod count stops pods and rolls pod-0
    onto the new spec: upstream's `make deploy` (one pod) did that to a running multi-node
    deployment without a word. Refused unless --scale-down says it is meant.

    Raises:
        InputError: this instance's workload runs more pods than ``nodes``.
    """
    live = workload(cfg).desired(_our_workload(cfg, client))
    if live > nodes:
        raise InputError(
            f"{cfg.name} runs {live} pods; --nodes {nodes} would stop pods {nodes}..{live - 1} "
            f"and restart the others: add --scale-down if that is meant (make deploy "
            f"SCALE_DOWN=1), or keep {live} with `mlenv deploy {cfg.name}` (make deploy-cluster)"
        )


def _our_workload(cfg: ClusterConfig, client: ClusterClient) -> Manifest | None:
    """This instance's workload object (its labels name the instance), or None."""
    wl = workload(cfg)
    sts = client.get(wl.kind, wl.name, cfg.namespace)
    labels = ((sts or {}).get("metadata") or {}).get("labels") or {}
    if sts is None or labels.get(LABEL_INSTANCE) != cfg.name or labels.get(LABEL_NAME) != APP:
        return None
    return sts


def wait_ready(
    cfg: ClusterConfig, nodes: int, client: ClusterClient, timeout: float, say: Say
) -> int:
    """Poll until ``nodes`` worker pods are Ready (polls spaced by their cost:
    POLL_SPACING); DeployTimeout with reasons at the deadline."""
    start = client.monotonic()
    deadline = start + timeout
    last = ""
    last_states: dict[str, str] = {}
    pull_failed_since: float | None = None
    first_refusals: dict[str, int] | None = None
    while True:
        polled = client.monotonic()
        split = split_pods(cfg, client)
        pods = [PodView.of(p) for p in split.workers]
        if len(pods) < nodes and split.live is not None:
            # a pod not created yet: admission may have refused it (the workload's
            # event says so from the first try; the pods' events never will)
            now_refused = _refusals(cfg, client, split.live)
            first_refusals = now_refused if first_refusals is None else first_refusals
            settled = client.monotonic() - start >= REFUSAL_SETTLE_S
            fresh = [
                line
                for line, n in now_refused.items()
                if settled or n > first_refusals.get(line, 0)
            ]
            if fresh:
                raise AdmissionRefused(
                    f"{len(pods)}/{nodes} pods created: {fresh[0]} (nothing was rolled back: "
                    f"`mlenv teardown {cfg.name}` removes what was applied)"
                )
        ready = sum(p.ready for p in pods)
        stuck = [p for p in pods if not p.ready and p.waiting_reason in PULL_FAILED]
        if not stuck:
            pull_failed_since = None
        else:
            now = client.monotonic()
            pull_failed_since = now if pull_failed_since is None else pull_failed_since
            if (
                any(p.waiting_reason != "ErrImagePull" for p in stuck)
                or now - pull_failed_since >= PULL_GRACE_S
            ):
                raise ImageUnavailable(image_problem(cfg, stuck))
        looping = [
            p
            for p in pods
            if not p.ready
            and p.waiting_reason == "CrashLoopBackOff"
            and p.restarts >= CRASH_RESTARTS
        ]
        if looping:
            raise CrashLooping(crash_problem(cfg, client, looping[0]))
        why = _latest_warnings(cfg, client, pods) if ready < len(pods) else {}
        stale = workload(cfg).not_rolled_out(split.live, pods)
        states = {
            p.name: "Terminating"
            if p.terminating
            else "Ready"
            if p.ready
            else p.waiting_reason or why.get(p.name) or p.phase
            for p in pods
        }
        line = (
            f"waiting: {ready}/{nodes} pods Ready"
            + (
                f" (rollout: {len(stale)} not yet replaced: {', '.join(stale[:5])}"
                + (" …)" if len(stale) > 5 else ")")
                if stale
                else ""
            )
            if pods
            else f"waiting: 0/{nodes} pods Ready (none created yet)"
        )
        # Only the pods whose state changed since the last line: every pod on every line
        # made the output grow with the square of the pod count (2.7 MB at 512 pods).
        changed = [f"{n}={st}" for n, st in states.items() if last_states.get(n) != st]
        gone = [n for n in last_states if n not in states]
        if line != last or changed or gone:
            # the state changed: say it, with the time spent so far (a stuck pull shows)
            say(
                line
                + "".join(f" {c}" for c in changed)
                + (f" (gone: {' '.join(gone)})" if gone else "")
                + f" ({client.monotonic() - start:.0f} s)"
            )
            last, last_states = line, states
        if ready >= nodes and len(pods) >= nodes and not stale:
            return ready
        if client.monotonic() >= deadline:
            uid = str(((split.live or {}).get("metadata") or {}).get("uid", ""))
            reasons = pending_reasons(cfg, client, pods, uid) or ["no pods were created"]
            raise DeployTimeout(
                f"{ready}/{nodes} pods Ready after {timeout:g} s; why:\n"
                + "\n".join(f"  - {r}" for r in reasons)
            )
        client.pause(max(POLL_S, POLL_SPACING * (client.monotonic() - polled)))
