"""OcCluster: the :class:`~mlenv.cluster.api.ClusterClient` on the ``oc`` binary.

Each call is one ``oc`` process; when ``oc`` is missing we run ``kubectl`` for the verbs
the two share (get, apply, delete, exec, logs, port-forward, auth can-i) and say so in
:attr:`OcCluster.description`. OpenShift-only verbs have a kubectl path (rsync through a
tar stream) or a clear error (start-build).

Commands are argument lists built by :mod:`mlenv.argv`: every name is validated for its
kind and positional names stand after ``--``, so no config value or file name can become
an option (``--kubeconfig=FILE`` would run that kubeconfig's exec plugin). Manifests go
through stdin as JSON, never through a shell.
Captured calls run through :meth:`OcCluster._call` (``subprocess.run``, output into
files); streaming verbs (exec for launch, logs -f, rsh, port-forward, build logs) read the
process's output as it comes.

the captured calls went through openshift-client's ``invoke`` until the kube tier
measured it. It polls each process (10 ms, doubling to 1 s), so a kubectl call that took
0.2 s returned 0.1-0.3 s late, 80 times per deploy, and a killed call up to a second
past its deadline. ``_call`` runs the argv invoke ran (binary, verb, ``--namespace=NS``,
the rest), with the environment it gave (``LC_ALL=en_US.UTF-8``: kubectl's messages stay
English, which :func:`classify` reads), an empty stdin unless one is given, and the same
kill at the deadline (exit -1, ``timed_out``); waiting on the process itself returns as
it ends. openshift-client's own environment settings (``OPENSHIFT_CLIENT_PYTHON_*``: a
kubeconfig, server, CA, log level or TLS skip added to every captured call, oc over ssh, a
master timeout) no longer apply: the argv is mlenv's alone (``--kubeconfig``/``--context``
through :mod:`mlenv.argv`), as it always was for the streaming verbs.
"""

from __future__ import annotations

import builtins
import gc
import json
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any, Literal

from mlenv import argv
from mlenv.cluster import nodemarks, nodetell, treehash
from mlenv.cluster.api import (
    CLUSTER_SCOPED_KINDS,
    DEFAULT_API_TIMEOUT,
    DEFAULT_EXEC_TIMEOUT,
    FIELD_MANAGER,
    NO_TIMEOUT,
    ApiError,
    ApplyResult,
    Conflict,
    DryRunItem,
    Event,
    ExecFailed,
    ExecResult,
    ExecTimeout,
    Forbidden,
    Invalid,
    KubeconfigError,
    Manifest,
    NodeUnreachable,
    NotFound,
    NotLoggedIn,
    ObjectRef,
    Output,
    Question,
    Unreachable,
    Unread,
    dry_run_each,
    read_each,
)
from mlenv.cluster.packs import TreePacks
from mlenv.cluster.pool import bounded_map
from mlenv.errors import InfraError, InputError
from mlenv.workload import WORKLOADS

if TYPE_CHECKING:
    from mlenv.cluster.nodemarks import MarkCall, NodeMarks
    from mlenv.cluster.nodetell import NodeTell

# A client process past its --request-timeout by this much is killed: kubectl's discovery
# retries a hanging /api five times (memcache.go), each with the full timeout. One
# second outlasts kubectl reporting its own timeout, and a verb against a half-up server
# has the timeout plus 5 s in all, the probe (two client processes) included.
CALL_SLACK_S = 1.0
# Seconds a call that acts on many objects may take per object, beyond one call's
# deadline: kubectl reads and patches each named node in turn (two requests each).
PER_NAME_S = 0.5
# get_many reads more Nodes than this by one list of every Node instead of by name
NODES_BY_NAME = 16
# Names to one batched ``get``: kubectl reads each named object with a request of its
# own, and one call has one call's deadline, so thousands are many calls of a few dozen.
GET_NAMES = 50
_TIMEOUT_MARKERS = (
    "context deadline exceeded",
    "client.timeout",
    "i/o timeout",
    "tls handshake timeout",
    "awaiting headers",
)
# What `kubectl config view --minify` says when there is no kubeconfig or no current context.
_NO_CONTEXT = ("current-context must exist", "current-context is not set")
LOGIN_HINT = "run `oc login <server>` (or `kubectl config use-context`) or set KUBECONFIG"


@contextmanager
def _killed_after(proc: subprocess.Popen[bytes], limit: float | None) -> Iterator[threading.Event]:
    """``proc`` killed ``limit`` seconds from now (none: never) unless the block ends
    first; the event says whether the timer fired."""
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        proc.kill()

    timer = None if limit is None else threading.Timer(limit, kill)
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield fired
    finally:
        if timer is not None:
            timer.cancel()


def _wait_killing(proc: subprocess.Popen[bytes], limit: float | None) -> tuple[int, bool]:
    """Wait for ``proc``, killed ``limit`` seconds after now (none: no limit); its
    (returncode, timed_out), -1 for a killed one. A blocking wait with a timer to kill:
    ``Popen.wait(timeout)`` polls, and its sleeps (up to 50 ms apart) added about 15 ms
    to each client call's end."""
    with _killed_after(proc, limit) as fired:
        try:
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if fired.is_set() and rc == -signal.SIGKILL:
        return -1, True
    return rc, False


def _read_to(stream: IO[bytes], mark: bytes) -> bytes | None:
    """What ``stream`` (a pipe's buffered reader) yields before ``mark``, which ends it;
    None when the stream ends first."""
    got = bytearray()
    read1 = getattr(stream, "read1", stream.read)
    while True:
        chunk = read1(1 << 16)
        if not chunk:
            return None
        start = max(0, len(got) - len(mark) + 1)
        got += chunk
        at = got.find(mark, start)
        if at >= 0:
            if at + len(mark) != len(got):
                # the pod says nothing after its mark until it is answered
                raise InfraError(f"the copy's stream went on past its mark: {bytes(got[-200:])!r}")
            return bytes(got[:at])


def _send(stdin: IO[bytes], pack: tuple[str, Sequence[str]] | None) -> None:
    """The names of ``pack`` and its tar file into ``stdin``, closed after; nothing but an
    empty list of names when there is nothing to send. A pod that stopped reading (its
    script failed: its exit status and stderr say why) ends the writing quietly."""
    try:
        stdin.write(treehash.names_header(pack[1] if pack else []))
        if pack is not None:
            with open(pack[0], "rb") as fh:
                shutil.copyfileobj(fh, stdin, 1 << 16)
        stdin.close()
    except BrokenPipeError:
        try:
            stdin.close()
        except BrokenPipeError:
            pass


def _resource_ref(ref: str) -> str:
    """``auth can-i`` takes ``RESOURCE`` or ``RESOURCE/NAME`` (e.g. ``scc/NAME``)."""
    kind, _, nm = ref.partition("/")
    return argv.resource(kind) + (f"/{argv.name(kind, nm)}" if nm else "")


# The API group of each resource word that can_i callers pass without one (preflight's
# exec, bind and grant questions): `auth can-i` finds it through discovery, a
# SelfSubjectAccessReview must name it. Every other kind comes group-qualified
# (api.resource_for); a word in neither is asked alone.
RESOURCE_GROUPS = {
    **dict.fromkeys(
        (
            "pods",
            "services",
            "secrets",
            "configmaps",
            "serviceaccounts",
            "persistentvolumeclaims",
            "endpoints",
            "events",
            "namespaces",
            "nodes",
            "persistentvolumes",
        ),
        "",
    ),
    **dict.fromkeys(
        ("roles", "rolebindings", "clusterroles", "clusterrolebindings"),
        "rbac.authorization.k8s.io",
    ),
    "securitycontextconstraints": "security.openshift.io",
}


def review_attributes(q: Question) -> dict[str, str] | None:
    """The ``spec.resourceAttributes`` of a SelfSubjectAccessReview asking what ``auth
    can-i`` asks for ``q``, or None when that is not certain: no namespace (kubectl asks
    in the kubeconfig's), or a resource word whose API group is not known here. Values
    are checked as can_i checks them (UnsafeArgument)."""
    argv.verb(q.verb)
    _resource_ref(q.resource)
    if q.subresource:
        argv.resource(q.subresource)
    if not q.namespace:
        return None
    argv.name("Namespace", q.namespace)
    word, _, name = q.resource.partition("/")
    plural_, dot, group = word.lower().partition(".")  # kubectl lowers the word, not the name
    if not dot:
        if plural_ not in RESOURCE_GROUPS:
            return None
        group = RESOURCE_GROUPS[plural_]
    attrs = {
        "namespace": q.namespace,
        "verb": q.verb,
        "group": group,
        "resource": plural_,
        "subresource": q.subresource or "",
        "name": name,
    }
    return {k: v for k, v in attrs.items() if v}  # the server echoes no empty field


def check_kubeconfig(flag: str | None = None) -> None:
    """The ``--kubeconfig`` file, else every file named by ``KUBECONFIG``, must exist and be
    readable (exit 2 otherwise): kubectl would silently use an empty config instead."""
    paths = (
        [(flag, "--kubeconfig")]
        if flag
        else [
            (p, "from KUBECONFIG") for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p
        ]
    )
    for path, origin in paths:
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError as e:
            raise KubeconfigError(
                f"kubeconfig {path} ({origin}) is unreadable: {e.strerror}"
            ) from None


def _one_line(text: str, limit: int = 200) -> str:
    """The last non-empty line of a client's stderr, without klog's ``E1122 …`` prefix
    noise, shortened: error messages stay one line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    last = lines[-1] if lines else "no answer"
    last = last.removeprefix("error: ").removeprefix("Error: ")
    return last if len(last) <= limit else last[: limit - 3] + "..."


def unreachable_reason(stderr: str, timed_out: bool, timeout: float) -> str | None:
    """Why a probe of the API server failed, in words, or None when the server answered
    (a 403 on /version still proves it is there)."""
    low = stderr.lower()
    if timed_out or any(s in low for s in _TIMEOUT_MARKERS):
        return (
            f"no answer within {timeout:g} s (raise the limit with MLENV_API_TIMEOUT_S or "
            "--request-timeout)"
        )
    if "connection refused" in low or "was refused" in low:
        return "connection refused"
    if "no such host" in low:
        return "no such host (DNS)"
    if "x509" in low or "certificate" in low:
        return f"TLS certificate not trusted: {_one_line(stderr)}"
    if "unable to connect" in low or "connection reset" in low or " eof" in low:
        return _one_line(stderr)
    return None


# Server-populated fields that differ between two reads of an object the apply did not change.
_VOLATILE_META = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")


def server_warnings(stderr: str) -> tuple[str, ...]:
    """The API server's warnings kubectl printed (``Warning: ...`` lines), without the prefix."""
    return tuple(
        ln.strip()[len("Warning: ") :]
        for ln in stderr.splitlines()
        if ln.strip().startswith("Warning: ")
    )


def judged(
    kind: str, name: str, before: Manifest | None, after: Manifest, *, dry_run: bool
) -> ApplyResult:
    """One server-side apply's action, from the object as read before it (None: it did not
    exist) and as the server returned it: a real apply by its resourceVersion, a dry run,
    which bumps nothing, by its content (:func:`comparable`)."""
    if before is None:
        return ApplyResult(kind, name, "created")
    if dry_run:
        same = comparable(after) == comparable(before)
    else:
        same = (after.get("metadata") or {}).get("resourceVersion") == before["metadata"].get(
            "resourceVersion"
        )
    return ApplyResult(kind, name, "unchanged" if same else "configured")


def comparable(obj: Manifest) -> Manifest:
    """An object without the server bookkeeping a dry-run apply returns fresh (managedFields
    timestamps) or leaves untouched (resourceVersion): what remains is what apply changes."""
    o = json.loads(json.dumps(obj))
    meta = o.get("metadata") or {}
    for f in _VOLATILE_META:
        meta.pop(f, None)
    o.pop("status", None)
    return dict(o)


# the API server reaches a pod only through its node's kubelet (exec, logs, cp,
# port-forward). When the kubelet does not answer, the server's refusal comes back in one
# of these shapes (kubectl 1.34 against the kube tier with kwok stopped: `error: Internal
# error occurred: error sending request: Post "https://…/exec/ns/pod/c?…": dial tcp …:
# connect: connection refused`; logs: `Error from server: Get "https://…/containerLogs/…":
# dial tcp …`; older servers and SPDY: `error dialing backend`, `unable to upgrade
# connection`), with a transport failure inside.
_KUBELET_CALL = re.compile(r'"https?://[^"\s]*/(exec|attach|containerlogs|portforward|run)/', re.I)
_KUBELET_BACKEND = (
    "error dialing backend",
    "unable to upgrade connection",
    "error sending request",
)
_TRANSPORT = (
    "dial tcp",
    "connection refused",
    "i/o timeout",
    "no route to host",
    "connection reset",
    "tls handshake",
)


def kubelet_unreachable(stderr: str) -> str | None:
    """The transport failure (``dial tcp …: connection refused``) when ``stderr`` says the
    API server could not reach a pod's node, else None.

    Only kubectl's own verdict counts: the LAST non-empty line, starting ``error:`` or
    ``Error from server``. An exec's stderr also carries the remote command's own output,
    and a command that prints such a line itself (a client of some other API, a test of
    this very message) and then exits non-zero ran: kubectl ends with "command terminated
    with exit code N" after it, so its failure stays the command's, not the node's."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    low = last.lower()
    if not low.startswith(("error:", "error from server")):
        return None
    if not (any(b in low for b in _KUBELET_BACKEND) or _KUBELET_CALL.search(last)):
        return None
    if not any(t in low for t in _TRANSPORT):
        return None
    m = re.search(r"(dial tcp \S+|read tcp \S+|net/http: tls handshake).*", last)
    return (m.group(0) if m else last).strip()


# The copy and the command after it in one exec: the folder is $1, the command the rest of
# the arguments; a failed unpack runs nothing.
_UNPACK_THEN = 'tar -x -f - -C "$1" && shift && exec "$@"'


def tar_pack(local_dir: str, names: Iterable[str], tar: str = "tar") -> tuple[list[str], bytes]:
    """The control host's ``tar`` that packs ``names`` (relative paths, as
    :func:`~mlenv.cluster.treehash.local_listing` keys them) of ``local_dir`` for the
    kubectl copy, and the NUL-separated names it reads on stdin (30,000 files do not
    overflow an argument list).

    Every name starts with ``./``, so a file named ``--checkpoint-action=exec=…`` is a
    file, never an option, in GNU tar and in bsdtar (macOS's tar) alike. GNU tar's
    ``--verbatim-files-from``, which did that before, is GNU-only: bsdtar refused it
    ("Option --verbatim-files-from is not supported") and no kubectl sync from a Mac ran.
    Only long options both tars take."""
    listing = b"".join(b"./" + os.fsencode(n) + b"\0" for n in sorted(names))  # any bytes
    return (
        [
            tar,
            "--create",
            "--file=-",
            f"--directory={os.path.abspath(local_dir)}",
            "--null",
            "--files-from=-",
        ],
        listing,
    )


def write_pack(local_dir: str, names: Sequence[str], path: str) -> None:
    """``names`` of ``local_dir`` packed by :func:`tar_pack` into the file ``path``."""
    cmd, listing = tar_pack(local_dir, names)
    with open(path, "wb") as out:
        done = subprocess.run(cmd, input=listing, stdout=out, stderr=subprocess.PIPE, check=False)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()[-300:]
        raise InfraError(f"tar of {local_dir} failed: {why}")


def classify(stderr: str, kind: str = "", name: str = "") -> ApiError | InfraError:
    """Turn an ``oc``/``kubectl`` error message into the matching exception.

    The message is kubectl's own ``error: …`` / ``Error from server …`` line when there is
    one (after a 409 the last line is advice, "See https://…#conflicts", and the error line
    names the other manager and the field), else the last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    head = next(
        (ln for ln in lines if ln.lower().startswith(("error:", "error from server"))), None
    )
    msg = head or (lines[-1] if lines else "command failed")
    low = stderr.lower()
    node_why = kubelet_unreachable(stderr)
    if node_why is not None:
        what = f"{kind.lower()} {name}" if kind and name else "the pod"
        return NodeUnreachable(
            f"{what}: the API server answered but could not reach the node it runs "
            f"on (exec, logs and copies go through that node's kubelet): {node_why}; "
            "check the node (kubectl get nodes, describe node)"
        )
    # an answer of the API server is never "unreachable", whatever it quotes (an
    # admission webhook's "context deadline exceeded" or "dial tcp …: i/o timeout")
    answered = any(ln.lower().startswith("error from server") for ln in lines)
    if not answered and (
        "unable to connect to the server" in low
        or "connection refused" in low
        or ("connection to the server" in low and "was refused" in low)
        or "no such host" in low
        or "you must be logged in" in low
        or "unauthorized" in low
        or any(s in low for s in _TIMEOUT_MARKERS)
    ):
        return Unreachable(msg)
    if "is invalid" in low:
        return Invalid(msg, kind=kind, name=name)
    if "apply failed with" in low and "conflict" in low:
        return Conflict(msg, kind=kind, name=name)
    # the server's own reason comes first. A Forbidden can quote a "not found" (an
    # admission plugin's "serviceaccount \"sa\" not found"), and a NotFound can name an
    # object called "forbidden-…": retried as NotFound, a Forbidden never ended.
    reason = re.match(r"error from server \((\w+)\)", msg.lower())
    if reason and reason.group(1) in ("forbidden", "notfound"):
        return (Forbidden if reason.group(1) == "forbidden" else NotFound)(
            msg, kind=kind, name=name
        )
    if "forbidden" in low:
        return Forbidden(msg, kind=kind, name=name)
    if (
        "notfound" in low
        or "not found" in low
        or "doesn't have a resource type" in low
        or "no matches for kind" in low
    ):
        return NotFound(msg, kind=kind, name=name)
    return ApiError(msg, kind=kind, name=name)


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


_GC_PAUSE = threading.Lock()
_gc_pausers = 0  # parses under way
_gc_was_on = True  # the collector's state when the first of them began


def parsed_list(text: str) -> Any:
    """``json.loads`` of a List with the cyclic garbage collector paused: parsing creates
    only acyclic objects, millions of them for a pod list at 512 pods (10.8 MB), and the
    collections those allocations set off were a third of the parse (about 50 ms of 150).
    Lists are read from several threads at once: the collector runs again when the last
    of them is done, if it ran before."""
    global _gc_pausers, _gc_was_on
    with _GC_PAUSE:
        if _gc_pausers == 0:
            _gc_was_on = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        return json.loads(text)
    finally:
        with _GC_PAUSE:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_on:
                gc.enable()


def json_documents(text: str) -> list[dict[str, Any]]:
    """The JSON objects in a client's output, one after another (``create -f -`` of a List
    prints each object it made; ``get`` of several prints one List)."""
    dec, i = json.JSONDecoder(), 0
    out: list[dict[str, Any]] = []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        doc, i = dec.raw_decode(text, i)
        if isinstance(doc, dict):
            out.append(doc)


def event_time(e: dict[str, Any]) -> str:
    """When an event last happened, as the server records it. Events written through
    events.k8s.io (the kubelet and controllers today) carry ``eventTime`` and, once repeated,
    ``series.lastObservedTime``; ``lastTimestamp`` is then empty. RFC 3339 strings with or
    without fractions sort as text once the fraction is padded."""
    t = str(
        ((e.get("series") or {}).get("lastObservedTime"))
        or e.get("lastTimestamp")
        or e.get("eventTime")
        or e.get("firstTimestamp")
        or (e.get("metadata") or {}).get("creationTimestamp")
        or ""
    )
    if t.endswith("Z") and "." not in t:
        t = t[:-1] + ".000000Z"
    return t


def event_count(e: dict[str, Any]) -> int:
    """How many times it happened: ``count`` (core/v1) or ``series.count`` (events.k8s.io)."""
    return int(e.get("count") or (e.get("series") or {}).get("count") or 1)


# The kinds read by ``get --raw`` (:func:`raw_list_path`): those whose lists grow with the
# pods (pods, their claims) and the workload objects: (API group, version, resource).
RAW_LISTS: dict[str, tuple[str, str, str]] = {
    "Node": ("", "v1", "nodes"),
    "Pod": ("", "v1", "pods"),
    "PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims"),
    **{
        w.kind: (w.api_version.rpartition("/")[0], w.api_version.rpartition("/")[2], w.resource)
        for w in WORKLOADS
        if w.resource
    },
}


def raw_list_path(kind: str, namespace: str | None, selector: dict[str, str] | None) -> str:
    """The API path of a list of ``kind`` (one of :data:`RAW_LISTS`; every namespace for
    None) with its label selector, for ``get --raw``: kubectl passes the server's compact
    List through, where ``-o json`` decodes it and prints it again, indented. Measured at
    512 pods on the kube tier: the pods in 0.3 s and 10.8 MB against 3.2 s and 26.5 MB
    (each pod's node affinity names every pinned node, so a pod list grows with the square
    of the nodes); kubectl's own ``get pods -o wide`` took 0.8 s. Every value is
    validated, then percent-encoded."""
    from urllib.parse import quote

    group, version, resource = RAW_LISTS[kind]
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespace is not None:
        path += f"/namespaces/{argv.name('Namespace', namespace)}"
    path += f"/{resource}"
    if selector:
        path += "?labelSelector=" + quote(argv.selector(selector), safe="")
    return path


class OcCluster:
    """The real cluster, reached through the ``oc`` binary (or ``kubectl``)."""

    def __init__(
        self,
        binary: str | None = None,
        *,
        exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
        kubeconfig: str | None = None,
        context: str | None = None,
        api_timeout: float = DEFAULT_API_TIMEOUT,
    ) -> None:
        # --kubeconfig/--context reach every call (captured and streamed) as
        # `--flag=VALUE`, validated by mlenv.argv
        self._flags = argv.client_flags(kubeconfig, context)
        check_kubeconfig(kubeconfig)
        # --verbose: each command line, as run, goes here (stderr)
        self.trace: Callable[[str], None] | None = None
        oc, kubectl = shutil.which("oc"), shutil.which("kubectl")
        chosen = binary or oc or kubectl
        if chosen is None:
            raise InfraError(
                "neither oc nor kubectl is on PATH: install the OpenShift client "
                "(https://mirror.openshift.com/pub/openshift-v4/clients/ocp/)"
            )
        self.binary = chosen
        self.exec_timeout = exec_timeout
        # every captured call but exec/rsync carries --request-timeout=api_timeout and
        # its process is killed CALL_SLACK_S later (no 30 s of its own, no retry loop)
        self.api_timeout = api_timeout
        self.server_url = ""  # what the probe found; named in every "cannot reach" line
        self._probing: Future[str] | None = None  # probe_beside's, until it is settled
        self.is_oc = os.path.basename(chosen).startswith("oc")
        self.description = (
            "oc"
            if self.is_oc
            else f"kubectl at {chosen} (oc not found: kubectl runs the shared verbs; "
            "`build` needs oc)"
        )
        # The CLI prints this once per command: a silent switch of client would surprise.
        self.notice = (
            ""
            if self.is_oc
            else (f"notice: oc not found on PATH: kubectl ({chosen}) runs every verb but `build`")
        )

    # -- plumbing ---------------------------------------------------------------------

    def _limit(self, timeout: float | None) -> float:
        return self.exec_timeout if timeout is None else timeout

    def _run(
        self,
        verb: str,
        options: Sequence[str],
        names: Sequence[str] = (),
        *,
        stdin: str | None = None,
        namespace: str | None = None,
        timeout: float = NO_TIMEOUT,
        raw: Sequence[str] | None = None,
        request_timeout: float | None = None,
        probing: bool = False,
    ) -> tuple[int, str, str, bool]:
        """Run ``oc VERB [--namespace=NS] [SUBCOMMAND] OPTIONS… -- NAMES…`` to its end or
        its deadline (``verb`` may be a command path such as ``auth can-i``).

        ``names`` must already be validated (:mod:`mlenv.argv`); they go after ``--``.
        ``raw`` replaces OPTIONS/NAMES for the two verbs whose argv has its own shape
        (``exec POD -- ARGV`` and ``rsync SRC DST``), built by :mod:`mlenv.argv` too.
        The namespace stands right after the verb (where openshift-client's project
        context put it): appended after ARGS it would land behind ``exec POD --`` in the
        container's argv. Returns (rc, stdout, stderr, timed_out).

        a call without ``raw`` carries ``--request-timeout`` (``request_timeout``, else
        the client's ``api_timeout``) and, unless ``timeout`` says otherwise, its process is
        killed :data:`CALL_SLACK_S` after that: kubectl retries discovery of a hanging
        ``/api`` five times, each with the full request timeout.
        """
        if namespace:
            argv.name("Namespace", namespace)
        if raw is not None:
            cmd = list(raw)
        else:
            opts = argv.options_before(options)
            limit = request_timeout or self.api_timeout
            if verb.split()[0] not in ("whoami", "config"):
                opts.append(argv.request_timeout(limit))
            if not math.isfinite(timeout):
                timeout = limit + CALL_SLACK_S
            cmd = argv.kube(verb, opts, names)
            verb, cmd = cmd[0], cmd[1:]  # a subcommand word stays before "--"
        line = [
            self.binary,
            verb,
            *([f"--namespace={namespace}"] if namespace else []),
            *self._flags,
            *cmd,
        ]  # `--flag=VALUE` right after the verb, before any "--"
        if self.trace is not None:
            self.trace(shlex.join(line))
        done = self._call(line, stdin, timeout)
        if not probing:  # the probe's own calls are what the others wait for
            self.probed()
        return done

    @staticmethod
    def _call(line: Sequence[str], stdin: str | None, timeout: float) -> tuple[int, str, str, bool]:
        """One client process, no shell: ``line`` with ``stdin`` (else empty), killed
        ``timeout`` seconds after it started (no limit when not a positive finite number).
        Returns (rc, stdout, stderr, timed_out); a killed call's rc is -1 and its output is
        what it wrote until then.

        Output goes to files, not pipes: a process the client started (an exec credential
        plugin) that outlives a killed client would hold a pipe open, and reading it to its
        end would outlast the deadline."""
        limit = timeout if math.isfinite(timeout) and timeout > 0 else None
        env = {**os.environ, "LC_ALL": "en_US.UTF-8"}  # English messages: classify reads them
        with (
            tempfile.TemporaryFile() as fin,
            tempfile.TemporaryFile() as fout,
            tempfile.TemporaryFile() as ferr,
        ):
            if stdin:
                fin.write(stdin.encode())
                fin.seek(0)
            rc, timed_out = _wait_killing(
                subprocess.Popen(list(line), stdin=fin, stdout=fout, stderr=ferr, env=env), limit
            )
            fout.seek(0)
            ferr.seek(0)
            return (
                rc,
                fout.read().decode("utf-8", errors="ignore"),
                ferr.read().decode("utf-8", errors="ignore"),
                timed_out,
            )

    def _ok(
        self,
        verb: str,
        options: Sequence[str],
        names: Sequence[str] = (),
        *,
        stdin: str | None = None,
        namespace: str | None = None,
        kind: str = "",
        name: str = "",
    ) -> str:
        rc, out, err, stuck = self._run(verb, options, names, stdin=stdin, namespace=namespace)
        if stuck or rc != 0:
            raise self._error(err or out, stuck, kind, name)
        return out

    def _error(
        self, stderr: str, stuck: bool, kind: str = "", name: str = ""
    ) -> ApiError | InfraError:
        """The exception for a failed call; an unreachable or silent server is one line
        naming it (not kubectl's "Unable to connect to the server: context deadline
        exceeded", which names nothing)."""
        e = Unreachable("no answer") if stuck else classify(stderr, kind, name)
        if type(e) is not Unreachable:
            return e
        why = unreachable_reason(stderr, stuck, self.api_timeout) or _one_line(stderr)
        where = f" {self.server_url}" if self.server_url else ""
        return Unreachable(f"cannot reach the API server{where}: {why}")

    def _base(self, namespace: str | None) -> list[str]:
        return [self.binary, *self._flags] + (
            ["-n", argv.name("Namespace", namespace)] if namespace else []
        )

    def _starting(self, cmd: Sequence[str]) -> None:
        """Before a streamed call starts (its output is the user's at once): the probe
        settled (:meth:`probed`), the command line traced."""
        self.probed()
        if self.trace is not None:
            self.trace(shlex.join(cmd))

    # -- reachability -----------------------------------------------------------

    def probe(self, timeout: float, say: Output | None = None, *, slow_after: float = 2.0) -> str:
        """Make sure the API server answers before a verb starts; return its URL.

        One request (``get --raw=/version``, ``--request-timeout`` = ``timeout``) instead of
        each verb meeting a dead server on its own: a refused connection, a server that
        accepts and never answers, or no kubeconfig at all become one line and exit 3
        (NotLoggedIn says how to log in first). After ``slow_after`` seconds without an
        answer ``say`` gets "contacting <server>…". A server that answers anything, even
        403, is reachable.
        """
        # a local read; only a wrapper that contacts the server (gcloud's version-picking
        # kubectl) takes seconds here: bounded, generously. Run beside the request to
        # /version (one client process's time in front of every verb, not two), and read
        # first: a kubeconfig without a context is that error, whatever /version said.
        view_limit = max(30.0, timeout + 5)
        pool = ThreadPoolExecutor(max_workers=1)
        view = pool.submit(
            self._run,
            "config view",
            ["--minify", "--output=jsonpath={.clusters[0].cluster.server}"],
            timeout=view_limit,
            probing=True,
        )
        pool.shutdown(wait=False)

        def named() -> str:
            """The server the kubeconfig names (raises what its read found wrong)."""
            rc, out, err, stuck = view.result()
            server = out.strip()
            if stuck:
                raise Unreachable(
                    f"{self.binary} config view did not answer within {view_limit:g} s"
                )
            if rc != 0:
                low = err.lower()
                if "context" in low and "does not exist" in low:
                    raise KubeconfigError(_one_line(err))
                if not any(s in low for s in _NO_CONTEXT):
                    raise KubeconfigError(f"the kubeconfig cannot be read: {_one_line(err)}")
                if not os.environ.get("KUBERNETES_SERVICE_HOST"):  # in a pod: its account
                    flag = [
                        f.removeprefix("--kubeconfig=")
                        for f in self._flags
                        if f.startswith("--kubeconfig=")
                    ]
                    where = flag[0] if flag else os.environ.get("KUBECONFIG") or "~/.kube/config"
                    raise NotLoggedIn(
                        f"not logged in: {LOGIN_HINT} (no current context in {where})"
                    )
                server = "the in-cluster API server"
            return server or "the default API server (localhost:8080)"

        def slow() -> None:
            assert say is not None
            try:
                say(f"contacting {named()}…")
            except (InfraError, InputError):
                pass  # the probe's own error says it, once it ends

        timer = None
        if say is not None and timeout > slow_after:
            timer = threading.Timer(slow_after, slow)
            timer.daemon = True
            timer.start()
        try:
            # the process is bounded by the same number it says ("no answer within
            # N s"): N, not N + 5 or kubectl's own retries
            rc, out, err, timed_out = self._run(
                "get", ["--raw=/version"], request_timeout=timeout, timeout=timeout, probing=True
            )
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()  # a "contacting" line under way is said before any error
        server = named()
        self.server_url = server
        if rc == 0:
            return server
        low = err.lower()
        if "unauthorized" in low or "must be logged in" in low:
            raise NotLoggedIn(
                f"not logged in to {server} (the credentials were refused): {LOGIN_HINT}"
            )
        why = unreachable_reason(err, timed_out, timeout)
        if why is not None:
            raise Unreachable(f"cannot reach the API server {server}: {why}")
        return server

    def probe_beside(
        self,
        timeout: float,
        say: Output | None = None,
        then: Callable[[bool], None] | None = None,
    ) -> None:
        """:meth:`probe` started in the background, for a verb whose first calls only
        read (``status``): they run beside it instead of after it, one client process's
        time off the verb, and each waits for it before it answers (:meth:`probed`), so
        an unreachable, hanging or refusing server is still the probe's one line (exit 3),
        never the call's own failure. ``then(ok)`` runs when it ends, before any call
        answers."""

        def run() -> str:
            ok = False
            try:
                server = self.probe(timeout, say)
                ok = True
                return server
            finally:
                if then is not None:
                    then(ok)

        pool = ThreadPoolExecutor(max_workers=1)
        self._probing = pool.submit(run)
        pool.shutdown(wait=False)

    def probed(self) -> None:
        """Wait for :meth:`probe_beside`'s probe, if one runs or ran; raise its error."""
        probing = self._probing
        if probing is not None:
            probing.result()

    # -- identity ---------------------------------------------------------------------

    def server(self) -> str:
        """``oc whoami --show-server`` (kubectl: the current context's server); after the
        probe, the server it found (the same kubeconfig read, so one client process
        less before a verb's first real call)."""
        if "://" in self.server_url:
            return self.server_url
        if self.is_oc:
            return self._ok("whoami", ["--show-server"]).strip()
        out = self._ok(
            "config view", ["--minify", "--output=jsonpath={.clusters[0].cluster.server}"]
        ).strip()
        if not out:
            raise Unreachable("kubectl has no current context: set KUBECONFIG or log in")
        return out

    def whoami(self) -> str:
        """``oc whoami`` (kubectl: ``auth whoami``)."""
        if self.is_oc:
            return self._ok("whoami", []).strip()
        return self._ok("auth whoami", ["--output=jsonpath={.status.userInfo.username}"]).strip()

    def can_i(
        self,
        verb: str,
        resource: str,
        namespace: str | None = None,
        *,
        as_user: str | None = None,
        subresource: str | None = None,
    ) -> bool:
        """``auth can-i VERB RESOURCE [--subresource=SUB] [--as=USER]`` (kubectl reads
        ``pods/exec`` as a pod named exec; a subresource needs the flag)."""
        opts = [f"--as={argv.user(as_user)}"] if as_user else []
        if subresource:
            opts.append(f"--subresource={argv.resource(subresource)}")
        rc, out, err, stuck = self._run(
            "auth can-i", opts, [argv.verb(verb), _resource_ref(resource)], namespace=namespace
        )
        if stuck or (rc != 0 and out.strip() != "no"):
            e = self._error(err, stuck)
            # impersonating a service account needs its own permission: say so, not "no"
            if isinstance(e, Unreachable) or (as_user and isinstance(e, Forbidden)):
                raise e
        return out.strip().startswith("yes")

    def can_i_many(self, questions: Sequence[Question]) -> builtins.list[bool]:
        """``create -f - -o json`` of a List of SelfSubjectAccessReviews (one process, each
        ``status.allowed`` read back in order) for the questions :func:`review_attributes`
        can put exactly; the rest, or all when that call fails (Unreachable raises), as
        :meth:`can_i`, side by side."""
        asked = [(i, a) for i, q in enumerate(questions) if (a := review_attributes(q)) is not None]
        answers: dict[int, bool] = {}
        if len(asked) > 1:
            got = self._reviews([a for _, a in asked])
            answers = {i: ok for (i, _), ok in zip(asked, got or [], strict=False)}
        rest = [i for i in range(len(questions)) if i not in answers]

        def ask(i: int) -> bool:
            q = questions[i]
            return self.can_i(q.verb, q.resource, q.namespace, subresource=q.subresource)

        # one `auth can-i` process each: ask them side by side
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers.update(zip(rest, pool.map(ask, rest), strict=True))
        return [answers[i] for i in range(len(questions))]

    def _reviews(self, attrs: Sequence[dict[str, str]]) -> builtins.list[bool] | None:
        """``status.allowed`` of one SelfSubjectAccessReview per ``attrs``, or None when the
        call failed or answered anything but those reviews, in order."""
        body = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": a},
                }
                for a in attrs
            ],
        }
        docs = self._batch("create", ["--output=json", "--filename=-"], [], None, json.dumps(body))
        if docs is None or len(docs) != len(attrs):
            return None
        for d, a in zip(docs, attrs, strict=True):
            echo = (d.get("spec") or {}).get("resourceAttributes") or {}
            if d.get("kind") != "SelfSubjectAccessReview" or any(
                echo.get(k) != v for k, v in a.items()
            ):
                return None
        return [(d.get("status") or {}).get("allowed") is True for d in docs]

    # -- objects ----------------------------------------------------------------------

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
        """``apply --server-side``; the action comes from comparing with the live object
        (resourceVersions for a real apply; content for a dry run, which bumps nothing),
        read here unless the caller passes the read it holds (``live``)."""
        kind, name = manifest["kind"], argv.name(manifest["kind"], manifest["metadata"]["name"])
        before = self.get(kind, name, namespace) if isinstance(live, Unread) else live
        args = [
            "--server-side",
            f"--field-manager={field_manager}",
            "--output=json",
            "--filename=-",
        ]
        if force_conflicts:
            args.append("--force-conflicts")
        if dry_run:
            args.append("--dry-run=server")
        rc, out, err, stuck = self._run(
            "apply", args, stdin=json.dumps(manifest), namespace=namespace
        )
        if stuck or rc != 0:
            raise self._error(err or out, stuck, kind, name)
        after = json.loads(out) if before is not None and out.strip() else {}
        return replace(
            judged(kind, name, before, after, dry_run=dry_run), warnings=server_warnings(err)
        )

    def dry_run_many(
        self, items: Sequence[DryRunItem], *, field_manager: str = FIELD_MANAGER
    ) -> builtins.list[ApplyResult | ApiError]:
        """``apply --server-side --dry-run=server -o json -f -`` of a List, one call per
        namespace and ``force_conflicts`` (cluster-scoped objects in a call of their own): kubectl prints the
        objects the server returned, matched back in order by kind and name, and each
        action judged as :meth:`apply` judges a dry run (:func:`judged`, against the caller's read, or one
        read here). When that call is refused for any object (rc != 0) or answers anything
        else, its items are asked one by one, so every refusal is the one the object meets
        alone. a deploy's dry run was one kubectl process per object (12 for the
        ``local`` example); Unreachable raises."""
        out: dict[int, ApplyResult | ApiError] = {}
        groups: dict[tuple[str | None, bool], builtins.list[int]] = {}
        for i, it in enumerate(items):
            groups.setdefault((it.namespace, it.force_conflicts), []).append(i)
        for (namespace, force), idx in groups.items():
            got = (
                self._dry_run_batch(namespace, [items[i] for i in idx], field_manager, force)
                if len(idx) > 1
                else None
            )
            if got is None:
                got = dry_run_each(self.apply, [items[i] for i in idx], field_manager)
            out.update(zip(idx, got, strict=True))
        return [out[i] for i in range(len(items))]

    def _dry_run_batch(
        self,
        namespace: str | None,
        items: Sequence[DryRunItem],
        field_manager: str,
        force_conflicts: bool,
    ) -> builtins.list[ApplyResult | ApiError] | None:
        """One dry-run apply of ``items`` (one namespace); None when the call failed or
        answered anything but those objects in order (Unreachable raises)."""
        for it in items:  # the names argv would have carried, held to the same grammar
            argv.name(it.manifest["kind"], it.manifest["metadata"]["name"])
        body = {"apiVersion": "v1", "kind": "List", "items": [it.manifest for it in items]}
        opts = [
            "--server-side",
            f"--field-manager={field_manager}",
            "--dry-run=server",
            "--output=json",
            "--filename=-",
            *(["--force-conflicts"] if force_conflicts else []),
        ]
        warned: builtins.list[str] = []
        docs = self._batch("apply", opts, [], namespace, json.dumps(body), warned)
        if docs is None or len(docs) != len(items):
            return None
        for d, it in zip(docs, items, strict=True):
            if (d.get("kind"), (d.get("metadata") or {}).get("name")) != (
                it.manifest["kind"],
                it.manifest["metadata"]["name"],
            ):
                return None  # an answer to something not asked: trust none of it
        results: builtins.list[ApplyResult | ApiError] = []
        for d, it in zip(docs, items, strict=True):
            kind, name = str(it.manifest["kind"]), str(it.manifest["metadata"]["name"])
            before = self.get(kind, name, namespace) if isinstance(it.live, Unread) else it.live
            # kubectl does not say which object a warning was about: each carries the batch's
            results.append(
                replace(judged(kind, name, before, d, dry_run=True), warnings=tuple(warned))
            )
        return results

    def mark_nodes(
        self,
        marks: Sequence[NodeMarks],
        *,
        remove: bool = False,
        by_hostname: Collection[str] = (),
    ) -> builtins.list[str]:
        """``label`` / ``annotate`` / ``taint`` the Nodes, one call per kind of mark (the
        argv :func:`nodemarks.mark_calls` prints). kubectl goes on past a name it cannot
        mark and says so on a line of its own: the lines of every call that failed come
        back for the caller, which reads back what each node carries.

        The label and the note touch different fields and kubectl patches each without a
        resourceVersion, so their calls run at once (bounded); the taint, which is what
        keeps work off a node, comes after them and goes first on removal: a stop part-way
        never leaves a node tainted without the label that lets release find it."""
        said: builtins.list[str] = []
        for phase in nodemarks.mark_phases(
            nodemarks.mark_calls(marks, remove=remove, by_hostname=by_hostname)
        ):
            said += self.run_marks(phase)
        return said

    def run_marks(self, calls: Sequence[MarkCall]) -> builtins.list[str]:
        """The calls at once (bounded), each with a deadline that grows with its names."""
        said: builtins.list[str] = []
        for lines in bounded_map(
            lambda call: self._each(call.words(), None, len(call.nodes)), calls
        ):
            said += lines
        return said

    def tell_nodes(self, tells: Sequence[NodeTell]) -> builtins.list[str]:
        """The Events of ``tells`` in one ``create`` of a List per chunk, then each group's
        condition in one ``patch``: :func:`nodetell.tell_calls`."""
        said: builtins.list[str] = []
        for words, body, nodes in nodetell.tell_calls(tells):
            said += self._each(words, body, len(nodes))
        return said

    def _each(self, words: builtins.list[str], stdin: str | None, names: int) -> builtins.list[str]:
        """Run one call that acts on ``names`` objects in turn; what it said when it failed
        (one line per complaint), nothing when it succeeded. Its deadline grows with its
        names (kubectl reads and writes each in turn); Unreachable raises."""
        verb, rest = words[0], words[1:]
        cut = rest.index("--") if "--" in rest else len(rest)
        rc, out, err, stuck = self._run(
            verb,
            rest[:cut],
            rest[cut + 1 :],
            stdin=stdin,
            timeout=self.api_timeout + CALL_SLACK_S + PER_NAME_S * names,
        )
        if not stuck and rc == 0:
            return []
        e = self._error(err or out, stuck)
        if isinstance(e, Unreachable):
            raise e
        return [ln.strip() for ln in (err or out).splitlines() if ln.strip()] or [str(e)]

    def tell_node(self, tell: NodeTell) -> None:
        """``create`` the Event from stdin, then (``tell.condition``) ``patch`` the Node's
        status: the argv :class:`NodeTell` prints."""
        words, body = tell.event_command()
        rc, out, err, _ = self._run(words[0], words[1:], stdin=body)
        if rc != 0:
            raise classify(err or out, "Event", tell.node)
        if tell.condition:
            words = tell.condition_command()
            cut = words.index("--")
            rc, out, err, _ = self._run(words[0], words[1:cut], words[cut + 1 :])
            if rc != 0:
                raise classify(err or out, "Node", tell.node)

    def get(self, kind: str, name: str, namespace: str | None) -> Manifest | None:
        """``get KIND NAME -o json --ignore-not-found``."""
        out = self._ok(
            "get",
            ["--output=json", "--ignore-not-found"],
            [argv.resource(kind), argv.name(kind, name)],
            namespace=namespace,
            kind=kind,
            name=name,
        )
        if not out.strip():
            return None
        obj: Manifest = json.loads(out)
        return obj

    def get_many(self, refs: Sequence[ObjectRef]) -> dict[ObjectRef, Manifest | None]:
        """``get KIND/NAME KIND/NAME … -o json --ignore-not-found``, one call per namespace
        (cluster-scoped kinds in a call of their own), the List's items matched back by
        kind, name and namespace. When that call fails for any reason but an unreachable
        server (a kind the server does not serve, Forbidden on one kind) the refs of that
        call are read one by one, so each answer, and each refusal a later :meth:`get`
        repeats, is exactly what it is alone; a refused ref is left out. More than
        :data:`NODES_BY_NAME` Nodes are one list of every Node; named refs go
        :data:`GET_NAMES` to a call."""
        groups: dict[str | None, builtins.list[ObjectRef]] = {}
        out: dict[ObjectRef, Manifest | None] = {}
        refs = list(dict.fromkeys(refs))  # once each, in order
        nodes = [r for r in refs if r[0] == "Node"]
        if len(nodes) > NODES_BY_NAME:
            listed = self._nodes_listed(nodes)
            if listed is not None:
                out.update(listed)
                refs = [r for r in refs if r not in listed]
        for ref in refs:
            groups.setdefault(None if ref[0] in CLUSTER_SCOPED_KINDS else ref[2], []).append(ref)
        for namespace, named in groups.items():
            for i in range(0, len(named), GET_NAMES):
                group = named[i : i + GET_NAMES]
                got = self._get_batch(namespace, group) if len(group) > 1 else None
                out.update(read_each(self.get, group) if got is None else got)
        return out

    def _nodes_listed(
        self, refs: builtins.list[ObjectRef]
    ) -> dict[ObjectRef, Manifest | None] | None:
        """The Nodes of ``refs`` from one list of every Node (``get --raw``: one request;
        ``get Node/a Node/b …`` reads each in turn, and 512 of them outlasted a 60 s
        deadline on the kube tier). None when the list is refused (a user who may get the
        named Nodes but not list them): they are read by name then."""
        try:
            every = {str(n["metadata"]["name"]): n for n in self._raw_list("Node", None, None)}
        except ApiError:
            return None
        return {r: every.get(r[1]) for r in refs}

    def _batch(
        self,
        command: str,
        opts: builtins.list[str],
        args: builtins.list[str],
        namespace: str | None,
        stdin: str | None = None,
        warnings: builtins.list[str] | None = None,
    ) -> builtins.list[dict[str, Any]] | None:
        """The objects one batched call printed (a List's items, or the objects one after
        another); None when the call failed or printed no JSON, for the caller to fall back
        to single calls. Unreachable raises: a server that does not answer the batch would
        not answer each call either. The server's warnings go to ``warnings``."""
        rc, out, err, stuck = self._run(command, opts, args, namespace=namespace, stdin=stdin)
        if warnings is not None and not stuck and rc == 0:
            warnings.extend(server_warnings(err))
        if stuck or rc != 0:
            e = self._error(err or out, stuck)
            if isinstance(e, Unreachable):
                raise e
            return None
        try:
            return [
                o
                for doc in json_documents(out)
                for o in ((doc.get("items") or []) if doc.get("kind") == "List" else [doc])
            ]
        except ValueError:
            return None

    def _get_batch(
        self, namespace: str | None, refs: Sequence[ObjectRef]
    ) -> dict[ObjectRef, Manifest | None] | None:
        """One ``get`` of ``refs`` (one namespace); None when the call failed (Unreachable
        raises: a server that does not answer would not answer each ref either)."""
        words = [f"{argv.resource(k)}/{argv.name(k, n)}" for k, n, _ in refs]
        items = self._batch("get", ["--output=json", "--ignore-not-found"], words, namespace)
        if items is None:
            return None
        asked: dict[tuple[str, str], builtins.list[ObjectRef]] = {}
        for ref in refs:
            asked.setdefault((ref[0], ref[1]), []).append(ref)
        answer: dict[ObjectRef, Manifest | None] = dict.fromkeys(refs)
        for obj in items:
            meta = obj.get("metadata") or {}
            mine = asked.get((str(obj.get("kind", "")), str(meta.get("name", ""))))
            if not mine or (namespace and meta.get("namespace") != namespace):
                return None  # an answer to something not asked: trust none of it
            for ref in mine:
                answer[ref] = obj if ref is mine[0] else json.loads(json.dumps(obj))
        return answer

    def list(
        self, kind: str, namespace: str | None, selector: dict[str, str] | None = None
    ) -> builtins.list[Manifest]:
        """``get KIND -l k=v,… -o json``; the kinds of :data:`RAW_LISTS` by ``get --raw``
        (:func:`raw_list_path`)."""
        if kind in RAW_LISTS:
            return self._raw_list(kind, namespace, selector)
        opts = ["--output=json"]
        if namespace is None and kind not in CLUSTER_SCOPED_KINDS:
            opts.append("--all-namespaces")  # as the fake and the protocol mean None
        if selector:
            opts.append(f"--selector={argv.selector(selector)}")
        out = self._ok("get", opts, [argv.resource(kind)], namespace=namespace, kind=kind)
        items: builtins.list[Manifest] = parsed_list(out).get("items", []) if out.strip() else []
        return items

    def _raw_list(
        self, kind: str, namespace: str | None, selector: dict[str, str] | None
    ) -> builtins.list[Manifest]:
        """``kind``'s objects as the server's List (:func:`raw_list_path`), each with the
        kind and apiVersion ``-o json`` would print."""
        group, version, _ = RAW_LISTS[kind]
        out = self._ok("get", [f"--raw={raw_list_path(kind, namespace, selector)}"], kind=kind)
        items: builtins.list[Manifest] = parsed_list(out).get("items") or [] if out.strip() else []
        for item in items:
            item.setdefault("apiVersion", f"{group}/{version}" if group else version)
            item.setdefault("kind", kind)
        return items

    def list_many(
        self, kinds: Sequence[str], namespace: str, selector: dict[str, str] | None = None
    ) -> dict[str, builtins.list[Manifest]]:
        """The kinds of :data:`RAW_LISTS` each by its own ``get --raw``, every other kind
        in one ``get K1,K2,… -l k=v,… -o json`` (the List's items by kind), all at once;
        when that one call fails (a kind not served, Forbidden on one) each of its kinds
        by :meth:`list`, so an error is its own kind's."""
        asked = list(dict.fromkeys(kinds))
        rest = [k for k in asked if k not in RAW_LISTS]
        calls: builtins.list[builtins.list[str]] = [[k] for k in asked if k in RAW_LISTS]
        if rest:
            calls.append(rest)

        def read(group: builtins.list[str]) -> dict[str, builtins.list[Manifest]]:
            if len(group) == 1:
                return {group[0]: self.list(group[0], namespace, selector)}
            return self._list_batch(group, namespace, selector)

        out: dict[str, builtins.list[Manifest]] = {}
        for got in bounded_map(read, calls):
            out.update(got)
        return {k: out[k] for k in asked}

    def _list_batch(
        self, kinds: builtins.list[str], namespace: str, selector: dict[str, str] | None
    ) -> dict[str, builtins.list[Manifest]]:
        opts = ["--output=json"]
        if selector:
            opts.append(f"--selector={argv.selector(selector)}")
        words = ",".join(argv.resource(k) for k in kinds)
        items = self._batch("get", opts, [words], namespace)
        if items is not None and all(str(o.get("kind", "")) in kinds for o in items):
            out: dict[str, builtins.list[Manifest]] = {k: [] for k in kinds}
            for o in items:
                out[str(o["kind"])].append(o)
            return out
        return {k: self.list(k, namespace, selector) for k in kinds}

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None,
        *,
        cascade: Literal["background", "foreground", "orphan"] = "background",
    ) -> bool:
        """``delete KIND NAME --cascade=… --ignore-not-found``."""
        out = self._ok(
            "delete",
            [f"--cascade={cascade}", "--ignore-not-found", "--wait=false", "--output=name"],
            [argv.resource(kind), argv.name(kind, name)],
            namespace=namespace,
            kind=kind,
            name=name,
        )
        return bool(out.strip())

    def events(
        self,
        namespace: str,
        kind: str | None = None,
        name: str | None = None,
        *,
        warnings: bool = False,
    ) -> builtins.list[Event]:
        """``get events`` filtered by involved object (and type), oldest first."""
        sel = {}
        if kind:
            sel["involvedObject.kind"] = argv.resource(kind)
        if name:
            sel["involvedObject.name"] = argv.name(kind or "object", name)
        if warnings:
            sel["type"] = "Warning"
        opts = ["--output=json"] + ([f"--field-selector={argv.field_selector(sel)}"] if sel else [])
        items = json.loads(self._ok("get", opts, ["events"], namespace=namespace) or "{}").get(
            "items", []
        )
        items.sort(key=event_time)
        return [
            Event(
                str((e.get("involvedObject") or {}).get("kind", "")),
                str((e.get("involvedObject") or {}).get("name", "")),
                str(e.get("type", "")),
                str(e.get("reason", "")),
                str(e.get("message", "")),
                event_count(e),
                str((e.get("involvedObject") or {}).get("uid", "")),
            )
            for e in items
        ]

    # -- pods -------------------------------------------------------------------------

    def exec(
        self,
        pod: str,
        namespace: str,
        command: Sequence[str],
        *,
        stdin: str | None = None,
        check: bool = True,
        timeout: float | None = None,
    ) -> ExecResult:
        """``exec --namespace=NS [-i] POD -- ARGV``, captured, killed after ``timeout``."""
        raw = argv.kube_exec(pod, command, ["-i"] if stdin is not None else [])[1:]
        limit = self._limit(timeout)
        rc, out, err, timed_out = self._run(
            "exec", (), stdin=stdin, namespace=namespace, timeout=limit, raw=raw
        )
        if timed_out:
            raise ExecTimeout(f"exec of {' '.join(list(command)[:3])}", pod, limit)
        res = ExecResult(tuple(command), rc, out, err)
        if rc != 0 and (
            "error from server" in err.lower()
            or "unable to connect" in err.lower()
            or kubelet_unreachable(err) is not None
        ):
            raise self._error(err, False, "Pod", pod)
        if check and rc != 0:
            raise ExecFailed(pod, res)
        return res

    def exec_stream(
        self,
        pod: str,
        namespace: str,
        command: Sequence[str],
        out: Output,
        *,
        timeout: float | None = None,
    ) -> int:
        """``exec POD -- ARGV`` with output streamed line by line; the exit code passes through."""
        cmdline = [*self._base(namespace), *argv.kube_exec(pod, command)]
        self._starting(cmdline)
        proc = subprocess.Popen(
            cmdline, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        fired = threading.Event()

        def kill() -> None:
            fired.set()
            proc.kill()

        timer = (
            threading.Timer(timeout, kill)
            if timeout is not None and math.isfinite(timeout)
            else None
        )
        if timer is not None:
            timer.daemon = True
            timer.start()
        # kubectl's refusal, when the server could not reach the pod's node, is the last
        # line: a line that looks like one is held back until another follows it (then it
        # was the command's own output, and is printed), so it is said once, as the error
        held = ""
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if held:
                    out(held.rstrip("\n"))
                    held = ""
                if kubelet_unreachable(line) is not None:
                    held = line
                    continue
                out(line.rstrip("\n"))
            rc = proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
        if fired.is_set():
            raise ExecTimeout(f"exec of {' '.join(list(command)[:3])}", pod, float(timeout or 0))
        if held and rc != 0:
            raise classify(held, "Pod", pod)
        if held:
            out(held.rstrip("\n"))
        return rc

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
        """Copy ``local_dir`` into ``POD:REMOTE``, adding and updating files only.

        oc: ``oc rsync --no-perms --exclude=… -- DIR/ POD:REMOTE`` (never ``--delete``:
        deletions are :mod:`~mlenv.cluster.sync`'s explicit, protected list), then ``then``
        by its own exec. kubectl: a tar stream (:func:`write_pack`) unpacked by the pod's
        ``tar -x``, and ``then`` in the same exec (``sh -c`` with every value a positional
        argument, never part of the script).
        """
        limit = self._limit(timeout)
        argv.abs_path(remote_dir, "remote directory")
        if self.is_oc:
            opts = ["--no-perms", *(f"--exclude={x}" for x in exclude)]
            src = f"{os.path.abspath(local_dir).rstrip('/')}/"
            raw = argv.kube("rsync", opts, [src, f"{argv.name('Pod', pod)}:{remote_dir}"])[1:]
            rc, out, err, timed_out = self._run(
                "rsync", (), namespace=namespace, timeout=limit, raw=raw
            )
            if timed_out:
                raise ExecTimeout(f"rsync of {local_dir}", pod, limit)
            if rc != 0:
                raise classify(err or out, "Pod", pod)
            return self.exec(pod, namespace, then, timeout=timeout).stdout if then else ""
        unpack = ["tar", "-x", "-f", "-", "-C", remote_dir]
        if then:
            unpack = ["sh", "-c", _UNPACK_THEN, "sh", remote_dir, *then]
        remote = self._exec_i(pod, namespace, unpack)  # every value checked before any work
        listing = treehash.local_listing(local_dir)  # links go as links, like oc rsync
        with self.packs(local_dir, list(listing)) as packs:
            archive, _ = packs.archive(listing)
            out = self._stream_into(archive, remote, pod, limit, f"of {local_dir}")
        return out if then else ""

    @property
    def one_stream_copy(self) -> bool:
        """kubectl copies by a tar stream of what the pod lacks, planned inside one exec
        (:meth:`copy_planned`); ``oc rsync`` plans for itself."""
        return not self.is_oc

    def packs(self, local_dir: str, names: Sequence[str]) -> AbstractContextManager[TreePacks]:
        """The tree's tar files for :meth:`copy_planned`, by the control host's tar
        (:func:`write_pack`)."""
        return TreePacks(local_dir, names, write_pack)

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
        """kubectl: one exec of :data:`~mlenv.cluster.treehash.COPY_SCRIPT` (the folder
        and a random mark its arguments), talked to while it runs: its listing, up to the
        mark, goes to ``choose``; the names chosen (:func:`~mlenv.cluster.treehash.
        names_header`) and their tar from ``packs`` go back on its stdin; what it prints
        after is those names' listing once unpacked. Not for oc (:attr:`one_stream_copy`
        is False: its caller plans, then :meth:`rsync`)."""
        if self.is_oc:
            raise InfraError("copy_planned is kubectl's one stream: with oc, plan and rsync")
        limit = self._limit(timeout)
        argv.abs_path(remote_dir, "remote directory")
        tag = f"mlenv-{secrets.token_hex(8)}"
        mark = f"\n{tag}\n".encode()
        script = [*treehash.POD_PYTHON, treehash.COPY_SCRIPT, remote_dir, tag]
        remote = self._exec_i(pod, namespace, script)
        self._starting(remote)
        with tempfile.TemporaryFile() as ferr:
            proc = subprocess.Popen(
                remote, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=ferr
            )
            assert proc.stdin is not None and proc.stdout is not None
            with _killed_after(proc, None if math.isinf(limit) else limit) as fired:
                try:
                    before = _read_to(proc.stdout, mark)
                    if before is not None:
                        names = list(choose(before.decode(errors="replace")))
                        _send(proc.stdin, packs.archive(names) if names else None)
                    out = proc.stdout.read()
                    rc = proc.wait()
                except BaseException:
                    proc.kill()
                    proc.wait()
                    raise
            if fired.is_set():
                raise ExecTimeout(f"copy (tar stream) into {remote_dir}", pod, limit)
            ferr.seek(0)
            err = ferr.read().decode(errors="replace")
        if rc != 0:
            raise classify(err or out.decode(errors="replace"), "Pod", pod)
        if before is None:
            raise InfraError(f"{pod}: the copy's stream ended before its listing: {out[-200:]!r}")
        return out.decode(errors="replace")

    def _exec_i(self, pod: str, namespace: str, command: Sequence[str]) -> builtins.list[str]:
        """``exec -i POD -- COMMAND`` in ``namespace``, every value checked."""
        return [*self._base(namespace), *argv.kube_exec(pod, command, ["-i"])]

    def _stream_into(
        self, archive: str, remote: builtins.list[str], pod: str, limit: float, what: str
    ) -> str:
        """The tar file ``archive`` (:func:`write_pack`) as the stdin of ``remote``
        (:meth:`_exec_i`); its output. ``what``: the copy, in a timeout's message."""
        self._starting(remote)
        try:
            with open(archive, "rb") as stream:
                proc = subprocess.run(
                    remote,
                    stdin=stream,
                    capture_output=True,
                    check=False,
                    timeout=None if math.isinf(limit) else limit,
                )
        except subprocess.TimeoutExpired:
            raise ExecTimeout(f"copy (tar stream) {what}", pod, limit) from None
        if proc.returncode != 0:
            raise classify(proc.stderr.decode(errors="replace"), "Pod", pod)
        return proc.stdout.decode(errors="replace")

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
        """``logs POD [-f] [--tail=N] [--previous]``."""
        opts = [] if tail is None else [f"--tail={argv.count(tail, '--tail')}"]
        if previous:
            opts.append("--previous")
        if not follow:
            text = self._ok(
                "logs", opts, [argv.name("Pod", pod)], namespace=namespace, kind="Pod", name=pod
            )
            if out is not None:
                for line in text.splitlines():
                    out(line)
            return text
        cmdline = [
            *self._base(namespace),
            *argv.kube("logs", ["-f", *opts], [argv.name("Pod", pod)]),
        ]
        self._starting(cmdline)
        proc = subprocess.Popen(
            cmdline, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            if out is not None:
                out(line.rstrip("\n"))
        if proc.wait() != 0:
            raise InfraError(f"logs -f {pod} ended with exit {proc.returncode}")
        return ""

    def interactive(self, pod: str, namespace: str, command: Sequence[str]) -> int:
        """``oc rsh POD CMD`` / ``kubectl exec -it POD -- CMD`` with the terminal attached."""
        # rsh parses flags only before the pod name (cobra SetInterspersed(false)): the
        # validated pod name comes first and ends the options; a `--` there would reach the
        # shell as its first argument
        # a terminal only when there is one: from a script (`mlenv shell x -- cmd | ...`)
        # a forced one made kubectl say "Unable to use a TTY - input is not a terminal"
        tty = _stdin_is_tty()
        if self.is_oc:
            line = ["rsh", *([] if tty else ["-T"]), argv.name("Pod", pod), *command]
        else:
            line = argv.kube_exec(pod, command, ["-it"] if tty else ["-i"])
        self._starting([*self._base(namespace), *line])
        return subprocess.call([*self._base(namespace), *line])

    def port_forward(self, pod: str, namespace: str, ports: Sequence[tuple[int, int]]) -> int:
        """``port-forward pod/POD L:R …`` on localhost only, until interrupted."""
        line = [
            *self._base(namespace),
            *argv.kube(
                "port-forward",
                ["--address=127.0.0.1"],
                [f"pod/{argv.name('Pod', pod)}", *(argv.port_pair(a, b) for a, b in ports)],
            ),
        ]
        self._starting(line)
        return subprocess.call(line)

    def start_build(self, name: str, namespace: str, out: Output) -> int:
        """``oc start-build NAME --follow --wait``."""
        argv.name("BuildConfig", name)
        if not self.is_oc:
            raise InfraError("build needs oc: BuildConfigs are OpenShift objects (kubectl found)")
        proc = subprocess.Popen(
            [
                *self._base(namespace),
                *argv.kube("start-build", ["--follow", "--wait"], [argv.name("BuildConfig", name)]),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            out(line.rstrip("\n"))
        return proc.wait()

    # -- time -------------------------------------------------------------------------

    def monotonic(self) -> float:
        """Wall-clock monotonic time."""
        return time.monotonic()

    def pause(self, seconds: float) -> None:
        """Sleep between polls."""
        time.sleep(seconds)
