"""The ``ClusterClient`` interface: every side effect against a live cluster goes through it.

Two implementations: :class:`mlenv.cluster.oc.OcCluster` (the ``oc`` binary, or
``kubectl`` for the shared verbs) and
:class:`mlenv.testing.fakecluster.FakeCluster` (a stateful in-memory fake for tests and
benchmarks, not shipped; tests/integration/test_client_contract.py keeps the two
agreeing). Callers receive one injected
(``cluster: ClusterClient | None = None``), so nothing is monkeypatched in tests.

Manifests are plain ``dict`` objects exactly as the renderer returns them.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mlenv.contract import APP as APP_NAME
from mlenv.contract import LABEL_COMPONENT as LABEL_COMPONENT
from mlenv.contract import LABEL_INSTANCE as LABEL_INSTANCE
from mlenv.contract import LABEL_NAME as LABEL_NAME
from mlenv.errors import InfraError, InputError

if TYPE_CHECKING:
    from mlenv.cluster.nodemarks import MarkCall, NodeMarks
    from mlenv.cluster.nodetell import NodeTell
    from mlenv.cluster.packs import TreePacks

Manifest = dict[str, Any]
Output = Callable[[str], None]
# One object by kind, name and namespace (None: cluster-scoped, or the client's default).
ObjectRef = tuple[str, str, str | None]
ApplyAction = Literal["created", "configured", "unchanged"]

FIELD_MANAGER = "mlenv"
GPU_RESOURCE = "nvidia.com/gpu"

# Seconds an exec or rsync may take before it is killed (MLENV_EXEC_TIMEOUT overrides it);
# NO_TIMEOUT lets a call run as long as it needs (launch streams a whole training run).
DEFAULT_EXEC_TIMEOUT = 600.0
NO_TIMEOUT = math.inf
# Seconds the API server has for each other call (get, apply, delete, auth can-i, the
# reachability probe): MLENV_API_TIMEOUT_S or --request-timeout override it.
DEFAULT_API_TIMEOUT = 10.0

CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Node",
        "Namespace",
        "Project",
        "StorageClass",
        "SecurityContextConstraints",
        "ClusterRole",
        "ClusterRoleBinding",
        "PersistentVolume",
    }
)
# Kinds only an OpenShift API serves; a plain Kubernetes API answers "no such resource type".
OPENSHIFT_KINDS = frozenset(
    {
        "Route",
        "BuildConfig",
        "Build",
        "ImageStream",
        "ImageStreamTag",
        "DeploymentConfig",
        "SecurityContextConstraints",
        "Project",
    }
)
_PLURALS = {
    "SecurityContextConstraints": "securitycontextconstraints",
    "Endpoints": "endpoints",
    "Ingress": "ingresses",
    "NetworkPolicy": "networkpolicies",
}


def plural(kind: str) -> str:
    """The API resource name of a kind: ``StatefulSet`` → ``statefulsets``."""
    return _PLURALS.get(kind, f"{kind.lower()}s")


def resource_for(kind: str, api_version: str = "v1") -> str:
    """``auth can-i`` resource for a kind, group-qualified outside the core group
    (``routes.route.openshift.io``) so the answer does not depend on discovery."""
    group = api_version.split("/")[0] if "/" in api_version else ""
    return f"{plural(kind)}.{group}" if group else plural(kind)


class Unread(Enum):
    """``apply(live=Unread.UNREAD)``: the caller holds no read of the object; apply reads it."""

    UNREAD = "unread"


def read_each(
    get: Callable[[str, str, str | None], Manifest | None], refs: Sequence[ObjectRef]
) -> dict[ObjectRef, Manifest | None]:
    """Each ref read alone with ``get`` (a client's), as :meth:`ClusterClient.get_many`
    answers: a ref ``get`` refuses (ApiError) is left out, for a later ``get`` to say why."""
    out: dict[ObjectRef, Manifest | None] = {}
    for ref in refs:
        try:
            out[ref] = get(*ref)
        except ApiError:
            continue
    return out


@dataclass(frozen=True)
class DryRunItem:
    """One object for :meth:`ClusterClient.dry_run_many`: the manifest, the namespace it is
    applied in (None: cluster-scoped), the caller's read of it (``live``) and
    ``force_conflicts``, each as :meth:`ClusterClient.apply` takes them."""

    manifest: Manifest
    namespace: str | None
    live: Manifest | None | Unread = Unread.UNREAD
    force_conflicts: bool = False


def dry_run_each(
    apply: Callable[..., ApplyResult], items: Sequence[DryRunItem], field_manager: str
) -> list[ApplyResult | ApiError]:
    """Each item dry-run applied alone with ``apply`` (a client's), as
    :meth:`ClusterClient.dry_run_many` answers: the result, or the refusal (ApiError) in its
    place; Unreachable raises."""
    out: list[ApplyResult | ApiError] = []
    for it in items:
        try:
            out.append(
                apply(
                    it.manifest,
                    it.namespace,
                    field_manager=field_manager,
                    dry_run=True,
                    live=it.live,
                    force_conflicts=it.force_conflicts,
                )
            )
        except ApiError as e:  # Unreachable is not one: it raises
            out.append(e)
    return out


def instance_selector(cluster_name: str) -> dict[str, str]:
    """The labels that select one deployment and nothing else (docs/contracts.md)."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: cluster_name}


@dataclass(frozen=True)
class Question:
    """One permission question, as :meth:`ClusterClient.can_i` takes it (never ``as_user``:
    an impersonated question is asked alone)."""

    verb: str
    resource: str  # RESOURCE[.GROUP] or RESOURCE[.GROUP]/NAME, as can_i takes it
    namespace: str | None = None
    subresource: str | None = None


class ApiError(InfraError):
    """The API server answered with an error status (``code`` is the HTTP status)."""

    code = 500

    def __init__(self, message: str, *, kind: str = "", name: str = "") -> None:
        self.kind = kind
        self.name = name
        super().__init__(message)


class NotFound(ApiError):
    """404: the object (or namespace) does not exist."""

    code = 404


class Forbidden(ApiError):
    """403: the logged-in user may not do this."""

    code = 403


class Conflict(ApiError):
    """409: server-side apply conflict with another field manager."""

    code = 409

    def __init__(
        self,
        message: str,
        *,
        kind: str = "",
        name: str = "",
        fields: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.fields = list(fields)  # (field path, owning manager)
        super().__init__(message, kind=kind, name=name)


class Invalid(ApiError, InputError):
    """422: the object is invalid, e.g. a change to an immutable StatefulSet field."""

    code = 422
    exit_code = InputError.exit_code


class Unreachable(InfraError):
    """The API server could not be reached (DNS, TCP, TLS, not logged in)."""


class NodeUnreachable(Unreachable):
    """The API server answered but could not reach the node a pod runs on: exec, logs,
    copies and port-forwards go through that node's kubelet (exit 3; the command in the
    pod never ran, so this is not :class:`ExecFailed`)."""


class NotLoggedIn(Unreachable):
    """No kubeconfig context to use, or the server refused the credentials (exit 3, with
    the ``oc login`` hint first)."""


class KubeconfigError(InputError):
    """The kubeconfig file named by ``KUBECONFIG`` is missing or unreadable."""


@dataclass(frozen=True)
class ExecResult:
    """Like :class:`subprocess.CompletedProcess`: what an exec in a pod returned."""

    args: tuple[str, ...]
    returncode: int
    stdout: str = ""
    stderr: str = ""


class ExecTimeout(InfraError):
    """An exec or rsync did not finish within its timeout and was killed."""

    def __init__(self, what: str, pod: str, seconds: float) -> None:
        super().__init__(
            f"{what} in pod {pod} did not finish within {seconds:g} s and was "
            "stopped (raise the limit with --timeout or MLENV_EXEC_TIMEOUT)"
        )


class ExecFailed(InfraError):
    """An exec with ``check=True`` returned non-zero."""

    def __init__(self, pod: str, result: ExecResult) -> None:
        self.result = result
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
        super().__init__(
            f"exec in pod {pod} failed (exit {result.returncode}): "
            f"{' '.join(result.args[:3])}…: {tail[0]}"
        )


@dataclass(frozen=True)
class ApplyResult:
    """One object after server-side apply."""

    kind: str
    name: str
    action: ApplyAction
    # what the server warned of while applying it (admission's ``Warning:`` lines, such as
    # Pod Security's "would violate PodSecurity ..." for a workload's pod template)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Event:
    """One Kubernetes event about an object (``reason`` like FailedScheduling)."""

    kind: str
    name: str
    type: str  # Normal | Warning
    reason: str
    message: str
    count: int = 1
    uid: str = ""  # the involved object's uid: tells a replaced object's events from its own


@dataclass
class PodView:
    """The fields of a pod that status, wait and sync read."""

    name: str
    phase: str
    ready: bool
    restarts: int
    node: str
    labels: dict[str, str] = field(default_factory=dict)
    waiting_reason: str = ""
    # deleted and within its grace period: its Ready condition may still say True until
    # the kubelet stops it, but it is on its way out and never counts as Ready
    terminating: bool = False
    uid: str = ""
    # the exit code of a container's last run (lastState.terminated), when one ended
    last_exit: int | None = None

    @staticmethod
    def of(pod: Manifest) -> PodView:
        """Read a pod object as returned by ``get``/``list``."""
        status = pod.get("status") or {}
        terminating = "deletionTimestamp" in (pod.get("metadata") or {})
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        cstat = status.get("containerStatuses") or []
        waiting = ""
        last_exit: int | None = None
        for cs in cstat:
            w = (cs.get("state") or {}).get("waiting")
            if w:
                waiting = str(w.get("reason", ""))
            ended = ((cs.get("lastState") or {}).get("terminated") or {}).get("exitCode")
            if isinstance(ended, int) and (last_exit is None or w):
                last_exit = ended
        return PodView(
            name=pod["metadata"]["name"],
            phase=str(status.get("phase", "Pending")),
            ready=conds.get("Ready") == "True" and not terminating,
            restarts=sum(int(cs.get("restartCount", 0)) for cs in cstat),
            node=str((pod.get("spec") or {}).get("nodeName", "")),
            labels=dict(pod["metadata"].get("labels") or {}),
            waiting_reason=waiting,
            terminating=terminating,
            uid=str(pod["metadata"].get("uid", "")),
            last_exit=last_exit,
        )


class ClusterClient(Protocol):
    """What mlenv needs from a cluster. Namespaced calls take the namespace explicitly."""

    description: str  # e.g. "oc", "kubectl at PATH (oc not found: …)", "fake"

    @property
    def one_stream_copy(self) -> bool:
        """Whether :meth:`copy_planned` serves: kubectl copies by a tar stream, planned
        inside the same exec; False: oc rsync plans for itself, so a caller lists first
        (for the summary and the check) and then rsyncs."""
        ...

    def server(self) -> str:
        """The API server URL the client is logged in to; raises Unreachable if none."""
        ...

    def whoami(self) -> str:
        """The logged-in user; raises Unreachable when not logged in."""
        ...

    def can_i(
        self,
        verb: str,
        resource: str,
        namespace: str | None = None,
        *,
        as_user: str | None = None,
        subresource: str | None = None,
    ) -> bool:
        """``auth can-i``: may the logged-in user (or ``as_user``, impersonated) do ``verb``
        on ``resource`` (``RESOURCE`` or ``RESOURCE/NAME``: ``pods/exec`` is a pod named
        exec, as the API server reads it) or on its ``subresource`` (``--subresource=exec``)?
        Raises Forbidden when the user may not impersonate ``as_user``."""
        ...

    def can_i_many(self, questions: Sequence[Question]) -> builtins.list[bool]:
        """Each question as :meth:`can_i` answers it, in order. OcCluster asks them
        in one process (a List of SelfSubjectAccessReviews), each one it cannot put there
        exactly (no namespace, an API group it does not know) and all of them when that
        call fails by itself; Unreachable raises."""
        ...

    def apply(
        self,
        manifest: Manifest,
        namespace: str | None,
        *,
        field_manager: str = FIELD_MANAGER,
        force_conflicts: bool = False,
        dry_run: bool = False,
        live: Manifest | None | Unread = Unread.UNREAD,
    ) -> ApplyResult:
        """Server-side apply one object; raises Conflict (409) or Invalid (422).

        ``live``: the object as the caller last read it (None: it did not exist), when
        nothing has written it since; the action (created/configured/unchanged) is then
        judged against it instead of a fresh read (one client process fewer)."""
        ...

    def dry_run_many(
        self, items: Sequence[DryRunItem], *, field_manager: str = FIELD_MANAGER
    ) -> builtins.list[ApplyResult | ApiError]:
        """Server-side dry-run apply of each item, answered in order as :meth:`apply`
        answers it alone (``dry_run=True``): its result, or its refusal (ApiError) in its
        place; Unreachable raises. OcCluster sends them in one process per namespace
        (a List on stdin), and asks each alone only when that call is refused, so every
        refusal is exactly the one the object meets by itself."""
        ...

    def get(self, kind: str, name: str, namespace: str | None) -> Manifest | None:
        """One object, or None when it does not exist."""
        ...

    def get_many(self, refs: Sequence[ObjectRef]) -> dict[ObjectRef, Manifest | None]:
        """Several objects at once, each answered as :meth:`get` answers it (None: it does
        not exist). A ref the server would not read in the batch or alone (a kind it does
        not serve, Forbidden) is left out: :meth:`get` it to hear why. Raises Unreachable.
        one client process per namespace instead of one per object."""
        ...

    def list(
        self, kind: str, namespace: str | None, selector: dict[str, str] | None = None
    ) -> list[Manifest]:
        """Objects of a kind, filtered by an equality label selector; ``namespace`` None
        means cluster-scoped kinds, or every namespace for a namespaced kind."""
        ...

    def list_many(
        self, kinds: Sequence[str], namespace: str, selector: dict[str, str] | None = None
    ) -> dict[str, builtins.list[Manifest]]:
        """:meth:`list` of several namespaced kinds at once, by kind (every kind asked is a
        key). OcCluster reads them all at once: each kind of its ``RAW_LISTS`` by its own
        ``get --raw``, the others in one ``get K1,K2 -l … -o json`` (each alone when that
        call fails by itself), so a refusal is the one :meth:`list` of its kind meets;
        Unreachable raises."""
        ...

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None,
        *,
        cascade: Literal["background", "foreground", "orphan"] = "background",
    ) -> bool:
        """Delete one object; False when it did not exist."""
        ...

    def events(
        self,
        namespace: str,
        kind: str | None = None,
        name: str | None = None,
        *,
        warnings: bool = False,
    ) -> builtins.list[Event]:
        """Events in a namespace, optionally only those about one kind or object, and with
        ``warnings`` only those of type Warning (chosen by the server: a deployment of 512
        pods has thousands of Normal ones, Scheduled, Pulled, Started, read on every poll)."""
        ...

    def mark_nodes(
        self,
        marks: Sequence[NodeMarks],
        *,
        remove: bool = False,
        by_hostname: Collection[str] = (),
    ) -> builtins.list[str]:
        """Label, annotate and taint Nodes for quarantine (``remove``: take the three off),
        in the calls :func:`mlenv.cluster.nodemarks.mark_calls` prints, one per kind of mark.
        A node a call cannot mark (gone, refused) does not stop the others: what the calls
        said of it comes back, one line each (empty: every call succeeded); which marks
        each node carries is for the caller to read back. The nodes in ``by_hostname``
        (read: their hostname label is their name) are chosen by a hostname selector, one
        list where names are a throttled GET each. Unreachable raises."""
        ...

    def run_marks(self, calls: Sequence[MarkCall]) -> builtins.list[str]:
        """Run ``label`` / ``annotate`` / ``taint`` calls on Nodes as they stand (the
        pool label of ``nodes.pin_by: label``); like :meth:`mark_nodes`, a node a call
        cannot mark does not stop the others, and what was said of it comes back, one
        line each. Unreachable raises."""
        ...

    def tell_node(self, tell: NodeTell) -> None:
        """Record the Event about a Node and, with ``tell.condition``, patch its
        ``MlenvAcceptance`` condition, exactly as :meth:`NodeTell.shell_lines` prints them;
        Forbidden without ``create events`` (namespace default) or ``patch nodes/status``."""
        ...

    def tell_nodes(self, tells: Sequence[NodeTell]) -> builtins.list[str]:
        """:meth:`tell_node` for many Nodes in the calls
        :func:`mlenv.cluster.nodetell.tell_calls` prints (the Events in one List, each
        condition group in one patch); what failed comes back, one line each (empty: all
        told). Unreachable raises."""
        ...

    def exec(
        self,
        pod: str,
        namespace: str,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        check: bool = True,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run an argument list in a pod; raises ExecFailed when check and non-zero, and
        ExecTimeout after ``timeout`` seconds (None: the client's default, NO_TIMEOUT: none)."""
        ...

    def exec_stream(
        self,
        pod: str,
        namespace: str,
        argv: Sequence[str],
        out: Output,
        *,
        timeout: float | None = None,
    ) -> int:
        """Run an argument list in a pod, passing output lines to ``out``; returns the exit
        code. No limit unless ``timeout`` is given (a stream is usually a whole job)."""
        ...

    def rsync(
        self,
        local_dir: str,
        pod: str,
        namespace: str,
        remote_dir: str,
        *,
        exclude: Sequence[str] = (),
        timeout: float | None = None,
        then: Sequence[str] = (),
    ) -> str:
        """Copy the contents of ``local_dir`` to ``remote_dir`` in the pod, adding and
        updating files only: no client deletes (``sync --delete`` removes an explicit,
        protected list through exec). ``exclude`` holds rsync patterns: ``/x`` only at the
        top of the tree, ``x`` at any depth. ``then``: an argument list run in the pod once
        the copy landed, in the copy's own exec where the client can (one process per pod
        instead of two); its output is returned ("" without it; a failure of it is
        ExecFailed). ExecTimeout as for :meth:`exec`."""
        ...

    def packs(self, local_dir: str, names: Sequence[str]) -> AbstractContextManager[TreePacks]:
        """The tar files of ``local_dir`` (``names``: its whole listing) for
        :meth:`copy_planned`, each set of files packed once for every pod that needs it,
        all removed on the way out."""
        ...

    def copy_planned(
        self,
        packs: TreePacks,
        pod: str,
        namespace: str,
        remote_dir: str,
        choose: Callable[[str], Sequence[str]],
        *,
        timeout: float | None = None,
    ) -> str:
        """:meth:`rsync` in one stream per pod, for a client whose :attr:`one_stream_copy`:
        one exec lists ``remote_dir`` (:data:`~mlenv.cluster.treehash.LIST_SCRIPT`'s
        output, handed to ``choose``), receives the tar of just the names ``choose``
        returns (from ``packs``; none: nothing is unpacked) and lists those names again as
        they landed: that last listing (the names actually sent, which may be the whole
        tree: :class:`~mlenv.cluster.packs.TreePacks`). Adds and updates only."""
        ...

    def logs(
        self,
        pod: str,
        namespace: str,
        *,
        follow: bool = False,
        out: Output | None = None,
        tail: int | None = None,
        previous: bool = False,
    ) -> str:
        """A pod's log (streamed to ``out`` when following); ``tail``: only the last N lines;
        ``previous``: its container's run before this one (a restarted container's)."""
        ...

    def interactive(self, pod: str, namespace: str, argv: Sequence[str]) -> int:
        """Run a command with the user's terminal attached (shell); returns the exit code."""
        ...

    def port_forward(self, pod: str, namespace: str, ports: Sequence[tuple[int, int]]) -> int:
        """Forward local→pod ports until interrupted; returns the exit code."""
        ...

    def start_build(self, name: str, namespace: str, out: Output) -> int:
        """Start a BuildConfig and follow its log; returns the exit code."""
        ...

    def monotonic(self) -> float:
        """The clock deadlines are measured against."""
        ...

    def pause(self, seconds: float) -> None:
        """Wait between polls (the fake runs its controllers instead of sleeping)."""
        ...
