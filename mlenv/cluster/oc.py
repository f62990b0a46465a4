"""OcCluster: the :class:`~mlenv.cluster.api.Cluster` on openshift-client (``oc``).

openshift-client drives the ``oc`` binary; when ``oc`` is missing we point it at
``kubectl`` for the verbs the two share (get, apply, delete, exec, logs, port-forward,
auth can-i) and say so in :attr:`OcCluster.description`. OpenShift-only verbs have a
kubectl path (rsync through a tar stream) or a clear error (start-build).

Commands are argument lists; manifests go through stdin as JSON, never through a shell.
Streaming verbs (exec for launch, logs -f, rsh, port-forward, build logs) run the same
binary with :mod:`subprocess` because openshift-client captures output until exit.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Literal

from mlenv.cluster import treehash
from mlenv.cluster.api import (
    DEFAULT_EXEC_TIMEOUT,
    FIELD_MANAGER,
    NO_TIMEOUT,
    ApiError,
    ApplyResult,
    Conflict,
    Event,
    ExecFailed,
    ExecResult,
    ExecTimeout,
    Forbidden,
    Invalid,
    KubeconfigError,
    Manifest,
    NotFound,
    Output,
    Unreachable,
)
from mlenv.errors import InfraError

REQUEST_TIMEOUT = "30s"

# Runs in the pod on the kubectl path: delete files under ROOT not in the JSON list on stdin.
_PRUNE = r"""
import json, os, sys
root = sys.argv[1]; keep = set(json.load(sys.stdin)); skip = {"__pycache__", ".git"}
for d, dirs, files in os.walk(root):
    dirs[:] = [x for x in dirs if x not in skip and not (d == root and x == "results")]
    for f in files:
        rel = os.path.relpath(os.path.join(d, f), root)
        if rel not in keep:
            os.remove(os.path.join(d, f))
"""


def check_kubeconfig() -> None:
    """Every file named by ``KUBECONFIG`` must exist and be readable (exit 2 otherwise)."""
    for path in [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]:
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError as e:
            raise KubeconfigError(f"kubeconfig {path} (from KUBECONFIG) is unreadable: "
                                  f"{e.strerror}") from None


# Server-populated fields that differ between two reads of an object the apply did not change.
_VOLATILE_META = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")


def comparable(obj: Manifest) -> Manifest:
    """An object without the server bookkeeping a dry-run apply returns fresh (managedFields
    timestamps) or leaves untouched (resourceVersion): what remains is what apply changes."""
    o = json.loads(json.dumps(obj))
    meta = o.get("metadata") or {}
    for f in _VOLATILE_META:
        meta.pop(f, None)
    o.pop("status", None)
    return dict(o)


def classify(stderr: str, kind: str = "", name: str = "") -> ApiError | InfraError:
    """Turn an ``oc``/``kubectl`` error message into the matching exception."""
    msg = stderr.strip().splitlines()[-1] if stderr.strip() else "command failed"
    low = stderr.lower()
    if ("unable to connect to the server" in low or "connection refused" in low
            or "no such host" in low or "you must be logged in" in low
            or "unauthorized" in low or "i/o timeout" in low):
        return Unreachable(msg)
    if "is invalid" in low:
        return Invalid(msg, kind=kind, name=name)
    if "apply failed with" in low and "conflict" in low:
        return Conflict(msg, kind=kind, name=name)
    if ("notfound" in low or "not found" in low or "doesn't have a resource type" in low
            or "no matches for kind" in low):
        return NotFound(msg, kind=kind, name=name)
    if "forbidden" in low:
        return Forbidden(msg, kind=kind, name=name)
    return ApiError(msg, kind=kind, name=name)


class OcCluster:
    """The real cluster, reached through openshift-client and the ``oc`` binary."""

    def __init__(self, binary: str | None = None, *,
                 exec_timeout: float = DEFAULT_EXEC_TIMEOUT) -> None:
        check_kubeconfig()
        oc, kubectl = shutil.which("oc"), shutil.which("kubectl")
        chosen = binary or oc or kubectl
        if chosen is None:
            raise InfraError("neither oc nor kubectl is on PATH: install the OpenShift client "
                             "(https://mirror.openshift.com/pub/openshift-v4/clients/ocp/)")
        self.binary = chosen
        self.exec_timeout = exec_timeout
        self.is_oc = os.path.basename(chosen).startswith("oc")
        self.description = ("oc (openshift-client)" if self.is_oc else
                            f"kubectl at {chosen} (oc not found: openshift-client drives kubectl "
                            "for the shared verbs; `build` needs oc)")
        # The CLI prints this once per command: a silent switch of client would surprise.
        self.notice = "" if self.is_oc else (
            f"notice: oc not found on PATH: using kubectl ({chosen}) for the verbs it shares "
            "with oc (sync copies through a tar stream; `build` needs oc)")

    # -- plumbing ---------------------------------------------------------------------

    def _limit(self, timeout: float | None) -> float:
        return self.exec_timeout if timeout is None else timeout

    def _run(self, verb: str, args: Sequence[str], *, stdin: str | None = None,
             namespace: str | None = None,
             timeout: float = NO_TIMEOUT) -> tuple[int, str, str, bool]:
        """Invoke ``oc VERB [--namespace=NS] ARGS`` through openshift-client.

        The namespace goes through openshift-client's project context, which places it right
        after the verb: appended after ARGS it would land behind ``exec POD --`` in the
        container's argv. Returns (rc, stdout, stderr, timed_out).
        """
        import openshift_client as oc

        cmd = list(args) + [f"--request-timeout={REQUEST_TIMEOUT}"] if verb not in (
            "exec", "rsync", "whoami", "config") else list(args)
        with contextlib.ExitStack() as stack:
            stack.enter_context(oc.client_path(self.binary))
            if namespace:
                stack.enter_context(oc.project(namespace))
            if math.isfinite(timeout):
                stack.enter_context(oc.timeout(timeout))
            r = oc.invoke(verb, cmd, stdin_str=stdin, no_namespace=not namespace,
                          auto_raise=False)
        timed_out = any(bool(getattr(a, "timeout", False)) for a in r.actions())
        return int(r.status()), str(r.out()), str(r.err()), timed_out

    def _ok(self, verb: str, args: Sequence[str], *, stdin: str | None = None,
            namespace: str | None = None, kind: str = "", name: str = "") -> str:
        rc, out, err, _ = self._run(verb, args, stdin=stdin, namespace=namespace)
        if rc != 0:
            raise classify(err or out, kind, name)
        return out

    def _base(self, namespace: str | None) -> list[str]:
        return [self.binary] + (["-n", namespace] if namespace else [])

    # -- identity ---------------------------------------------------------------------

    def server(self) -> str:
        """``oc whoami --show-server`` (kubectl: the current context's server)."""
        if self.is_oc:
            return self._ok("whoami", ["--show-server"]).strip()
        out = self._ok("config", ["view", "--minify", "-o",
                                  "jsonpath={.clusters[0].cluster.server}"]).strip()
        if not out:
            raise Unreachable("kubectl has no current context: set KUBECONFIG or log in")
        return out

    def whoami(self) -> str:
        """``oc whoami`` (kubectl: ``auth whoami``)."""
        if self.is_oc:
            return self._ok("whoami", []).strip()
        return self._ok("auth", ["whoami", "-o", "jsonpath={.status.userInfo.username}"]).strip()

    def can_i(self, verb: str, resource: str, namespace: str | None = None, *,
              as_user: str | None = None) -> bool:
        """``auth can-i VERB RESOURCE [--as=USER]``."""
        args = ["can-i", verb, resource] + ([f"--as={as_user}"] if as_user else [])
        rc, out, err, _ = self._run("auth", args, namespace=namespace)
        if rc != 0 and out.strip() != "no":
            e = classify(err)
            # impersonating a service account needs its own permission: say so, not "no"
            if isinstance(e, Unreachable) or (as_user and isinstance(e, Forbidden)):
                raise e
        return out.strip().startswith("yes")

    # -- objects ----------------------------------------------------------------------

    def apply(self, manifest: Manifest, namespace: str | None, *,
              field_manager: str = FIELD_MANAGER, force_conflicts: bool = False,
              dry_run: bool = False) -> ApplyResult:
        """``apply --server-side``; the action comes from comparing with the live object
        (resourceVersions for a real apply; content for a dry run, which bumps nothing)."""
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        before = self.get(kind, name, namespace)
        args = ["--server-side", f"--field-manager={field_manager}", "-o", "json", "-f", "-"]
        if force_conflicts:
            args.append("--force-conflicts")
        if dry_run:
            args.append("--dry-run=server")
        out = self._ok("apply", args, stdin=json.dumps(manifest), namespace=namespace,
                       kind=kind, name=name)
        if before is None:
            return ApplyResult(kind, name, "created")
        after = json.loads(out) if out.strip() else {}
        if dry_run:
            same = comparable(after) == comparable(before)
        else:
            same = (after.get("metadata") or {}).get("resourceVersion") == \
                before["metadata"].get("resourceVersion")
        return ApplyResult(kind, name, "unchanged" if same else "configured")

    def get(self, kind: str, name: str, namespace: str | None) -> Manifest | None:
        """``get KIND NAME -o json --ignore-not-found``."""
        out = self._ok("get", [kind, name, "-o", "json", "--ignore-not-found"],
                       namespace=namespace, kind=kind, name=name)
        if not out.strip():
            return None
        obj: Manifest = json.loads(out)
        return obj

    def list(self, kind: str, namespace: str | None,
             selector: dict[str, str] | None = None) -> builtins.list[Manifest]:
        """``get KIND -l k=v,… -o json``."""
        args = [kind, "-o", "json"]
        if selector:
            args += ["-l", ",".join(f"{k}={v}" for k, v in sorted(selector.items()))]
        out = self._ok("get", args, namespace=namespace, kind=kind)
        items: builtins.list[Manifest] = json.loads(out).get("items", []) if out.strip() else []
        return items

    def delete(self, kind: str, name: str, namespace: str | None, *,
               cascade: Literal["background", "foreground", "orphan"] = "background") -> bool:
        """``delete KIND NAME --cascade=… --ignore-not-found``."""
        out = self._ok("delete", [kind, name, f"--cascade={cascade}", "--ignore-not-found",
                                  "--wait=false", "-o", "name"],
                       namespace=namespace, kind=kind, name=name)
        return bool(out.strip())

    def events(self, namespace: str, kind: str | None = None,
               name: str | None = None) -> builtins.list[Event]:
        """``get events`` filtered by involved object, oldest first."""
        sel = []
        if kind:
            sel.append(f"involvedObject.kind={kind}")
        if name:
            sel.append(f"involvedObject.name={name}")
        args = ["events", "-o", "json"] + (["--field-selector", ",".join(sel)] if sel else [])
        items = json.loads(self._ok("get", args, namespace=namespace) or "{}").get("items", [])
        items.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return [Event(str((e.get("involvedObject") or {}).get("kind", "")),
                      str((e.get("involvedObject") or {}).get("name", "")),
                      str(e.get("type", "")), str(e.get("reason", "")),
                      str(e.get("message", "")), int(e.get("count") or 1)) for e in items]

    # -- pods -------------------------------------------------------------------------

    def exec(self, pod: str, namespace: str, argv: Sequence[str], *,
             stdin: str | None = None, check: bool = True,
             timeout: float | None = None) -> ExecResult:
        """``exec --namespace=NS [-i] POD -- ARGV``, captured, killed after ``timeout``."""
        args = (["-i"] if stdin is not None else []) + [pod, "--", *argv]
        limit = self._limit(timeout)
        rc, out, err, timed_out = self._run("exec", args, stdin=stdin, namespace=namespace,
                                            timeout=limit)
        if timed_out:
            raise ExecTimeout(f"exec of {' '.join(list(argv)[:3])}", pod, limit)
        res = ExecResult(tuple(argv), rc, out, err)
        if rc != 0 and ("error from server" in err.lower() or "unable to connect" in err.lower()):
            raise classify(err, "Pod", pod)
        if check and rc != 0:
            raise ExecFailed(pod, res)
        return res

    def exec_stream(self, pod: str, namespace: str, argv: Sequence[str], out: Output, *,
                    timeout: float | None = None) -> int:
        """``exec POD -- ARGV`` with output streamed line by line; the exit code passes through."""
        proc = subprocess.Popen([*self._base(namespace), "exec", pod, "--", *argv],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        fired = threading.Event()

        def kill() -> None:
            fired.set()
            proc.kill()

        timer = threading.Timer(timeout, kill) if timeout is not None and \
            math.isfinite(timeout) else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out(line.rstrip("\n"))
            rc = proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
        if fired.is_set():
            raise ExecTimeout(f"exec of {' '.join(list(argv)[:3])}", pod, float(timeout or 0))
        return rc

    def rsync(self, local_dir: str, pod: str, namespace: str, remote_dir: str, *,
              delete: bool = True, exclude: Sequence[str] = (),
              timeout: float | None = None) -> None:
        """``oc rsync DIR/ POD:REMOTE --delete``; with kubectl a tar stream plus a prune
        (which leaves the same paths alone as :mod:`~mlenv.cluster.treehash` skips)."""
        limit = self._limit(timeout)
        if self.is_oc:
            args = [f"{local_dir.rstrip('/')}/", f"{pod}:{remote_dir}", "--no-perms"]
            args += ["--delete"] if delete else []
            args += [f"--exclude={x}" for x in exclude]
            rc, out, err, timed_out = self._run("rsync", args, namespace=namespace,
                                                timeout=limit)
            if timed_out:
                raise ExecTimeout(f"rsync of {local_dir}", pod, limit)
            if rc != 0:
                raise classify(err or out, "Pod", pod)
            return
        files = sorted(treehash.local_files(local_dir))
        if delete:
            self.exec(pod, namespace, ["python3", "-c", _PRUNE, remote_dir],
                      stdin=json.dumps(files), timeout=limit)
        tar = subprocess.run(["tar", "-C", local_dir, "-cf", "-", *files], capture_output=True,
                             check=True)
        try:
            proc = subprocess.run([*self._base(namespace), "exec", "-i", pod, "--", "tar", "-C",
                                   remote_dir, "-xf", "-"], input=tar.stdout, capture_output=True,
                                  check=False, timeout=None if math.isinf(limit) else limit)
        except subprocess.TimeoutExpired:
            raise ExecTimeout(f"copy (tar stream) of {local_dir}", pod, limit) from None
        if proc.returncode != 0:
            raise classify(proc.stderr.decode(errors="replace"), "Pod", pod)

    def logs(self, pod: str, namespace: str, *, follow: bool = False,
             out: Output | None = None) -> str:
        """``logs POD [-f]``."""
        if not follow:
            text = self._ok("logs", [pod], namespace=namespace, kind="Pod", name=pod)
            if out is not None:
                for line in text.splitlines():
                    out(line)
            return text
        proc = subprocess.Popen([*self._base(namespace), "logs", "-f", pod],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if out is not None:
                out(line.rstrip("\n"))
        if proc.wait() != 0:
            raise InfraError(f"logs -f {pod} ended with exit {proc.returncode}")
        return ""

    def interactive(self, pod: str, namespace: str, argv: Sequence[str]) -> int:
        """``oc rsh`` / ``kubectl exec -it`` with the terminal attached."""
        verb = ["rsh", pod] if self.is_oc else ["exec", "-it", pod, "--"]
        return subprocess.call([*self._base(namespace), *verb, *argv])

    def port_forward(self, pod: str, namespace: str, ports: Sequence[tuple[int, int]]) -> int:
        """``port-forward pod/POD L:R …`` on localhost only, until interrupted."""
        return subprocess.call([*self._base(namespace), "port-forward", "--address", "127.0.0.1",
                                f"pod/{pod}", *(f"{a}:{b}" for a, b in ports)])

    def start_build(self, name: str, namespace: str, out: Output) -> int:
        """``oc start-build NAME --follow --wait``."""
        if not self.is_oc:
            raise InfraError("build needs oc: BuildConfigs are OpenShift objects (kubectl found)")
        proc = subprocess.Popen([*self._base(namespace), "start-build", name, "--follow",
                                 "--wait"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
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
