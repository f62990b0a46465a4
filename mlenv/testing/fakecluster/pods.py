"""What the fake does inside pods: an in-memory filesystem per volume (PVC-backed volumes
are shared by every pod that mounts the claim, as RWX storage is); exec of the tree
checksum, listing and removal scripts and of scripted responses (per pod first, longest
prefix first, one that hangs until the call's timeout), and a rank started detached
(``run-torchrun --detach``: it runs as the scripted ``run-torchrun`` response says, and
``run-follow``/``run-state``/``run-stop`` answer as in a pod); rsync with rsync's exclude rules
(``/x`` at the top only, ``x`` at any depth, excluded paths neither copied nor deleted);
logs (the pod's events), interactive sessions, port-forwards and builds, recorded in
``calls``."""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from mlenv.cluster import devloop, fetch, treehash
from mlenv.cluster.api import (
    ApiError,
    ExecFailed,
    ExecResult,
    ExecTimeout,
    Manifest,
    NotFound,
    Output,
)
from mlenv.cluster.packs import TreePacks
from mlenv.errors import InfraError
from mlenv.testing.fakecluster.controllers import Controllers
from mlenv.testing.fakecluster.state import _key

POD = ("python", "-m", "mlenv.pod")


def _arg(args: Sequence[str], flag: str) -> str:
    """The value after ``flag`` in ``args`` ("" when absent)."""
    return args[args.index(flag) + 1] if flag in args[:-1] else ""


def _rsync_excluded(rel: str, patterns: Sequence[str]) -> bool:
    """rsync's exclude rules: ``/p`` matches the top-level entry only, ``p`` any path
    component at any depth (a matched directory takes its subtree with it), ``p/`` only
    directories."""
    parts = rel.split("/")
    for pat in patterns:
        dirs_only = pat.endswith("/")
        pat = pat.rstrip("/")
        candidates = parts[:-1] if dirs_only else parts
        if pat.startswith("/"):
            if candidates[:1] and fnmatch.fnmatchcase(candidates[0], pat[1:]):
                return True
        elif any(fnmatch.fnmatchcase(p, pat) for p in candidates):
            return True
    return False


def _read_tree(root: str) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → content), nothing filtered: the fake's
    rsync must apply its own exclude rules, not the checksum's."""
    out: dict[str, bytes] = {}
    for d, dirs, files in os.walk(root):
        for f in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if os.path.islink(p):  # rsync -a and tar copy a link as a link
                out[rel] = _LINK + os.readlink(p).encode()
                continue
            with open(p, "rb") as fh:
                out[rel] = fh.read()
    return out


# How the fake's volumes hold a symbolic link: a marker no real file content starts with.
_LINK = b"\0mlenv-fake-symlink\0"


def _write_tar(local_dir: str, names: Sequence[str], path: str) -> None:
    """A tar of ``names`` of ``local_dir`` in ``path``, as kubectl's client packs it."""
    import tarfile

    with tarfile.open(path, "w") as tar:
        for rel in names:
            tar.add(os.path.join(local_dir, rel), arcname=f"./{rel}", recursive=False)


def _listed(data: bytes) -> str:
    """One LIST_SCRIPT value: sha256 of a file, ``symlink:TARGET`` of a link."""
    if data.startswith(_LINK):
        return treehash.LINK_PREFIX + data[len(_LINK) :].decode()
    return hashlib.sha256(data).hexdigest()


class Pods(Controllers):
    """exec, rsync, logs and the other pod verbs of :class:`mlenv.cluster.api.ClusterClient`."""

    def _running_pod(self, pod: str, namespace: str) -> Manifest:
        self._check_reachable()
        obj = self.objects.get(_key("Pod", namespace, pod))
        if obj is None:
            raise NotFound(f'pods "{pod}" not found', kind="Pod", name=pod)
        if (obj.get("status") or {}).get("phase") != "Running":
            raise ApiError(
                f"pod {pod} is not running (phase "
                f"{(obj.get('status') or {}).get('phase')}): cannot exec into it",
                kind="Pod",
                name=pod,
            )
        return obj

    def _volume_for(self, pod: Manifest, path: str) -> tuple[str, str]:
        """(volume id, path inside that volume) for an absolute path in the pod."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        best = ("", "/")
        for c in pod["spec"].get("containers") or []:
            for m in c.get("volumeMounts") or []:
                mp = m["mountPath"].rstrip("/") or "/"
                if (path == mp or path.startswith(mp + "/")) and len(mp) > len(best[1]):
                    best = (m["name"], mp)
        vname, mp = best
        rel = path[len(mp) :].strip("/") if mp != "/" else path.strip("/")
        claim = (vols.get(vname, {}).get("persistentVolumeClaim") or {}).get("claimName")
        vid = f"pvc:{ns}/{claim}" if claim else f"pod:{ns}/{name}:{mp}"
        return vid, rel

    def pod_files(self, pod: str, namespace: str, root: str) -> dict[str, bytes]:
        """The files under ``root`` in a pod (relative path → content); for tests too."""
        vid, rel = self._volume_for(self._running_pod(pod, namespace), root.rstrip("/"))
        pre = f"{rel}/" if rel else ""
        return {
            p[len(pre) :]: base64.b64decode(d)
            for p, d in self.volumes.get(vid, {}).items()
            if p.startswith(pre)
        }

    def write_pod_file(self, pod: str, namespace: str, path: str, data: bytes) -> None:
        """Create a file in a pod (as a process in it would)."""
        vid, rel = self._volume_for(self._running_pod(pod, namespace), path)
        self.volumes.setdefault(vid, {})[rel] = base64.b64encode(data).decode()

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
        """Run the commands the fake understands: the tree checksum and scripted ones
        (``pod_exec_responses[pod]`` before ``exec_responses``, longest prefix first)."""
        obj = self._running_pod(pod, namespace)
        self._require("create", "pods/exec", "Pod", pod)
        args = tuple(argv)
        self.calls.append(["exec", pod, *args])
        limit = self.exec_timeout if timeout is None else timeout
        res = self._run_in(obj, pod, args, stdin, limit)
        if check and res.returncode != 0:
            raise ExecFailed(pod, res)
        return res

    def _run_in(
        self, obj: Manifest, pod: str, args: tuple[str, ...], stdin: str | None, limit: float
    ) -> ExecResult:
        """What ``args`` does in the running pod ``obj`` (not recorded as a call)."""
        # the stdlib scripts, as the product runs them (treehash.POD_PYTHON)
        py = args[len(treehash.POD_PYTHON) :] if args[:4] == treehash.POD_PYTHON else ()
        if len(py) == 2 and py[0] == treehash.SCRIPT:
            vid, rel = self._volume_for(obj, py[1].rstrip("/"))
            pre = f"{rel}/" if rel else ""
            files = [
                (p[len(pre) :], base64.b64decode(d))
                for p, d in self.volumes.get(vid, {}).items()
                if p.startswith(pre)
            ]
            res = ExecResult(args, 0, treehash.digest_files(files) + "\n")
        elif len(py) == 2 and py[0] in (treehash.LIST_SCRIPT, treehash.REMOVE_SCRIPT):
            res = self._tree_script(obj, py[0], py[1], stdin)
        elif len(py) >= 2 and py[0] in (fetch.RUNS_SCRIPT, fetch.PACK_SCRIPT):
            res = self._read_only_script(obj, args)
        elif len(args) == 5 and args[:3] == ("sh", "-c", devloop.GPU_SCRIPT):
            res = self._gpu_script(obj, pod, args, stdin, limit)
        elif args[:3] == POD and args[3:5] == ("run-torchrun", "--detach"):
            res = self._start_detached(pod, args, limit)
        elif args[:3] == POD and args[3:4] in (("run-follow",), ("run-state",), ("run-stop",)):
            res = self._detached_verb(pod, args, limit)
        else:
            res = ExecResult(
                args,
                127,
                "",
                f'exec: "{args[0] if args else ""}": executable file not found in $PATH (fake)',
            )
            line = " ".join(args)
            resp = self._scripted(pod, line)
            if resp is not None:
                if resp.get("hang"):
                    if math.isinf(limit):
                        raise InfraError(
                            f"fake: exec in {pod} hangs and has no timeout: it would never return"
                        )
                    self.clock += limit
                    raise ExecTimeout(f"exec of {' '.join(args[:3])}", pod, limit)
                res = ExecResult(
                    args,
                    int(resp.get("rc", 0)),
                    str(resp.get("stdout", "")),
                    str(resp.get("stderr", "")),
                )
        return res

    def _gpu_script(
        self, obj: Manifest, pod: str, args: tuple[str, ...], stdin: str | None, limit: float
    ) -> ExecResult:
        """gpu-info's one exec: each of its commands as the fake answers that command alone,
        framed as the script frames them (output and errors together, then ``MARK STATUS``)."""
        out = []
        for argv in devloop.GPU_COMMANDS:
            one = self._run_in(obj, pod, tuple(argv), stdin, limit)
            out.append(f"{one.stdout}{one.stderr}\n{args[4]} {one.returncode}\n")
        return ExecResult(args, 0, "".join(out), "")

    def _scripted(self, pod: str, line: str) -> dict[str, Any] | None:
        """The scripted response for the command line ``line`` in ``pod``: the pod's own
        table first, then the shared one, the longest matching prefix in each."""
        for table in (self.pod_exec_responses.get(pod, {}), self.exec_responses):
            match = [(p, r) for p, r in table.items() if line.startswith(p)]
            if match:
                return max(match, key=lambda x: len(x[0]))[1]
        return None

    def _start_detached(self, pod: str, args: tuple[str, ...], limit: float) -> ExecResult:
        """``run-torchrun --detach``: the rank runs as the scripted response of the same
        command without ``--detach`` says (its output and status; "hang": it runs until
        stopped), and the start returns at once as the pod's does."""
        line = " ".join(args)
        for table in (self.pod_exec_responses.get(pod, {}), self.exec_responses):
            for prefix, said in table.items():  # a pod that answers --detach itself (an old mlenv)
                if "--detach" in prefix and line.startswith(prefix):
                    return ExecResult(
                        args,
                        int(said.get("rc", 0)),
                        str(said.get("stdout", "")),
                        str(said.get("stderr", "")),
                    )
        rid = _arg(args, "--run-id")
        key = f"{pod}/{rid}"
        if key in self.detached:
            return ExecResult(args, 0, "", f"mlenv.pod: run {rid} was already started here\n")
        resp = self._scripted(pod, " ".join(a for a in args if a != "--detach"))
        if resp is None:
            return ExecResult(
                args, 127, "", 'exec: "python": executable file not found in $PATH (fake)'
            )
        hangs = bool(resp.get("hang"))
        self.detached[key] = {
            "output": "" if hangs else f"{resp.get('stdout', '')}{resp.get('stderr', '')}",
            "rc": None if hangs else int(str(resp.get("rc", 0))),
        }
        return ExecResult(args, 0, "", f"mlenv.pod: run {rid} started detached\n")

    def _detached_verb(self, pod: str, args: tuple[str, ...], limit: float) -> ExecResult:
        """run-follow (frames from ``--offset``, the pod's framing; a run still going
        hangs until the call's timeout; ``follow_drops`` cuts a stream half-way),
        run-state and run-stop (a running rank ends with 130, as a stopped one does)."""
        from mlenv import contract

        rid = _arg(args, "--run-id")
        run = self.detached.get(f"{pod}/{rid}")
        verb = args[3]
        if verb == "run-state":
            if run is None:
                return ExecResult(args, 0, "none\n")
            if run["rc"] is None:
                return ExecResult(args, 0, "running 4242\n")
            lines = [ln for ln in str(run["output"]).splitlines() if ln.strip()]
            last = lines[-1].strip() if lines else ""
            return ExecResult(args, 0, f"exited {run['rc']} {last}".rstrip() + "\n")
        if verb == "run-stop":
            if run is None:
                return ExecResult(args, 0, "no such run\n")
            if run["rc"] is not None:
                return ExecResult(args, 0, "already ended\n")
            run["output"] = f"{run['output']}interrupted\n"
            run["rc"] = 130
            return ExecResult(args, 0, "stopped (SIGINT to process group 4242)\n")
        if run is None:
            return ExecResult(args, 0, f"{contract.FOLLOW_EXIT}{contract.FOLLOW_NONE}\n")
        offset = int(_arg(args, "--offset") or 0)
        data = str(run["output"]).encode()
        got, _ = contract.follow_lines(data[offset:], offset, final=run["rc"] is not None)
        lines = [f"{contract.FOLLOW_OUT}{end} {text}" for end, text in got]
        if self.follow_drops.get(pod, 0) > 0:
            self.follow_drops[pod] -= 1
            half = lines[: (len(lines) + 1) // 2]
            return ExecResult(
                args, 1, "".join(f"{ln}\n" for ln in half), "error: lost connection to pod\n"
            )
        if run["rc"] is None:
            if math.isinf(limit):
                raise InfraError(f"fake: the run in {pod} never ends and the follow has no timeout")
            self.clock += limit
            raise ExecTimeout(f"exec of {' '.join(args[:3])}", pod, limit)
        lines.append(f"{contract.FOLLOW_EXIT}{run['rc']}")
        return ExecResult(args, 0, "".join(f"{ln}\n" for ln in lines))

    def _read_only_script(self, obj: Manifest, args: tuple[str, ...]) -> ExecResult:
        """the fetch scripts, run for real (this interpreter) over a copy of the
        volume's files under their first argument: what they print is what a pod would."""
        import subprocess
        import sys
        import tempfile

        n = len(treehash.POD_PYTHON)
        script, root, rest = args[n], args[n + 1], args[n + 2 :]
        vid, rel = self._volume_for(obj, root.rstrip("/"))
        pre = f"{rel}/" if rel else ""
        with tempfile.TemporaryDirectory(prefix="fake-pod-") as tmp:
            for p, d in self.volumes.get(vid, {}).items():
                if not p.startswith(pre):
                    continue
                dest = os.path.join(tmp, p[len(pre) :])
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                data = base64.b64decode(d)
                if data.startswith(_LINK):
                    os.symlink(data[len(_LINK) :].decode(), dest)
                else:
                    with open(dest, "wb") as fh:
                        fh.write(data)
            done = subprocess.run(
                [sys.executable, *treehash.POD_PYTHON[1:], script, tmp, *rest],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
        return ExecResult(args, done.returncode, done.stdout, done.stderr)

    def _tree_script(self, obj: Manifest, script: str, root: str, stdin: str | None) -> ExecResult:
        """What LIST_SCRIPT / REMOVE_SCRIPT do in a real pod, on the fake's volume."""
        vid, rel = self._volume_for(obj, root.rstrip("/"))
        vol = self.volumes.setdefault(vid, {})
        pre = f"{rel}/" if rel else ""
        args = (*treehash.POD_PYTHON, script, root)
        if script == treehash.LIST_SCRIPT:
            listing = {
                p[len(pre) :]: _listed(base64.b64decode(d))
                for p, d in vol.items()
                if p.startswith(pre)
                and not any(x in ("__pycache__", ".git") for x in p[len(pre) :].split("/")[:-1])
            }
            return ExecResult(args, 0, json.dumps(listing, sort_keys=True))
        n = 0
        for rp in json.loads(stdin or "[]"):
            if rp.startswith("/") or ".." in rp.split("/"):
                continue
            if vol.pop(f"{pre}{rp}", None) is not None:
                n += 1
        return ExecResult(args, 0, f"{n}\n")

    def exec_stream(
        self,
        pod: str,
        namespace: str,
        argv: Sequence[str],
        out: Output,
        *,
        timeout: float | None = None,
    ) -> int:
        """Like :meth:`exec` (no limit unless ``timeout``), passing each line to ``out``."""
        res = self.exec(
            pod, namespace, argv, check=False, timeout=math.inf if timeout is None else timeout
        )
        for line in (res.stdout + res.stderr).splitlines():
            out(line)
        return res.returncode

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
        """Copy a local tree into the pod's volume with rsync's exclude semantics, adding
        and updating only (as the real clients do: nothing in the pod is deleted); then run
        ``then`` as :meth:`exec` would, in the same call."""
        obj = self._running_pod(pod, namespace)
        self._require("create", "pods/exec", "Pod", pod)
        self.calls.append(["rsync", pod, local_dir, remote_dir, *then])
        if pod not in self.rsync_failures:
            self._copy_into(obj, local_dir, remote_dir, exclude)
        return self._then(obj, pod, then, timeout)

    def _copy_into(
        self, obj: Manifest, local_dir: str, remote_dir: str, exclude: Sequence[str]
    ) -> None:
        vid, rel = self._volume_for(obj, remote_dir.rstrip("/"))
        vol = self.volumes.setdefault(vid, {})
        pre = f"{rel}/" if rel else ""
        files = {
            f"{pre}{p}": d
            for p, d in _read_tree(local_dir).items()
            if not _rsync_excluded(p, exclude)
        }
        for p, d in files.items():
            vol[p] = base64.b64encode(d).decode()

    def packs(self, local_dir: str, names: Sequence[str]) -> TreePacks:
        """The tree's tar files as kubectl's client packs them (``./NAME`` entries, links
        as links), each written by the tarfile module, all removed on the way out."""
        return TreePacks(local_dir, names, _write_tar)

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
        """As kubectl does it: the pod's listing to ``choose``, the tar of the names it
        chose unpacked, those names listed again, in one call (sync calls it only where
        ``one_stream_copy``)."""
        import tarfile

        obj = self._running_pod(pod, namespace)
        self._require("create", "pods/exec", "Pod", pod)
        listing = (*treehash.POD_PYTHON, treehash.LIST_SCRIPT, remote_dir)
        names: Sequence[str] = list(choose(self._then(obj, pod, listing, timeout)))
        self.calls.append(["copy_planned", pod, remote_dir, str(len(names))])
        if not names:
            return "{}"
        archive, names = packs.archive(names)
        if pod not in self.rsync_failures:
            vid, rel = self._volume_for(obj, remote_dir.rstrip("/"))
            vol = self.volumes.setdefault(vid, {})
            pre = f"{rel}/" if rel else ""
            with tarfile.open(archive) as tar:
                for m in tar.getmembers():
                    name = m.name.removeprefix("./")
                    if m.issym():
                        data = _LINK + m.linkname.encode()
                    elif m.isfile():
                        fh = tar.extractfile(m)
                        assert fh is not None
                        data = fh.read()
                    else:
                        continue
                    vol[f"{pre}{name}"] = base64.b64encode(data).decode()
        landed = json.loads(self._then(obj, pod, listing, timeout) or "{}")
        return json.dumps({n: landed[n] for n in names if n in landed})

    def _then(self, obj: Manifest, pod: str, then: Sequence[str], timeout: float | None) -> str:
        """``rsync``'s command after the copy: in the copy's own call, as kubectl runs it."""
        if not then:
            return ""
        limit = self.exec_timeout if timeout is None else timeout
        res = self._run_in(obj, pod, tuple(then), None, limit)
        if res.returncode != 0:
            raise ExecFailed(pod, res)
        return res.stdout

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
        """The fake container log: the events of the pod, one per line (the last ``tail``);
        ``previous``: a crash-looping pod's (``crash_loops``) last run's log."""
        self._check_reachable()
        if _key("Pod", namespace, pod) not in self.objects:
            raise NotFound(f'pods "{pod}" not found', kind="Pod", name=pod)
        if previous and pod not in self.crash_loops:
            raise ApiError(f'previous terminated container "worker" in pod "{pod}" not found')
        lines = (
            self.crash_loops[pod][1].splitlines(keepends=True)
            if previous
            else [f"[fake] {e.reason}: {e.message}\n" for e in self.events(namespace, "Pod", pod)]
        )
        text = "".join(lines if tail is None else lines[len(lines) - tail :] if tail else [])
        self.calls.append(
            [
                "logs",
                pod,
                *(["-f"] if follow else []),
                *([f"--tail={tail}"] if tail is not None else []),
                *(["--previous"] if previous else []),
            ]
        )
        if out is not None:
            for line in text.splitlines():
                out(line)
        return text

    def interactive(self, pod: str, namespace: str, argv: Sequence[str]) -> int:
        """Record an interactive session (there is no terminal in a fake)."""
        self._running_pod(pod, namespace)
        self.calls.append(["interactive", pod, *argv])
        return 0

    def port_forward(self, pod: str, namespace: str, ports: Sequence[tuple[int, int]]) -> int:
        """Record a port-forward and return as if interrupted at once."""
        self._running_pod(pod, namespace)
        self.calls.append(["port-forward", pod, *(f"{a}:{b}" for a, b in ports)])
        return 0

    def start_build(self, name: str, namespace: str, out: Output) -> int:
        """Run the scripted build of a BuildConfig that must exist."""
        self._check_reachable()
        if _key("BuildConfig", namespace, name) not in self.objects:
            raise NotFound(
                f'buildconfigs.build.openshift.io "{name}" not found', kind="BuildConfig", name=name
            )
        self.calls.append(["start-build", name])
        b = self.builds.get(name, {"rc": 0, "log": f"build {name}-1 started\nPush successful\n"})
        for line in str(b["log"]).splitlines():
            out(line)
        if int(b["rc"]) == 0:
            self._push_build(self.objects[_key("BuildConfig", namespace, name)])
        return int(b["rc"])
