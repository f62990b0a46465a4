"""The kube tier's kubelet: each pod's containers run, are probed and restarted as a kubelet
does it, and the pod's status says so.

kwok moves a pod to Running once the pod-root controller (podroots.py) has prepared its
root and network; from then on this module owns the pod's container state:

- **Start.** Each container's ``command`` and ``args`` run inside the pod (confine.sh: the
  pod's root, network and identity) under a shim (container.py) that writes the
  container's record and its output, in the CRI log format, to the file kwok's ``Logs``
  serves to ``kubectl logs`` (the last run's to ``--previous``). A container without a
  ``command`` would run its image's entry point, which the tier does not know: it is held
  as running, and its log says so.
- **Probes.** startup, liveness and readiness probes (``exec``, ``tcpSocket`` to the pod's
  address, ``httpGet``), with initialDelaySeconds, periodSeconds, timeoutSeconds,
  successThreshold and failureThreshold and their API defaults. Liveness and readiness
  wait for the startup probe. A container is ready when its readiness probe says so (or,
  without one, once started); the pod is Ready when all are. A startup or liveness probe
  past its failureThreshold kills the container (SIGTERM, SIGKILL after the pod's grace
  period within the tier's cap), which is then restarted per its policy.
- **Restarts.** A container that ends is restarted per ``restartPolicy`` (Always,
  OnFailure, Never): the first time at once, then after a back-off that starts at 10 s and
  doubles up to 300 s, as the kubelet's; while it waits its state is ``waiting``
  ``CrashLoopBackOff`` with the last run in ``lastState.terminated``. A pod whose
  containers all ended and will not restart is ``Succeeded`` or ``Failed``.
- **Events.** Unhealthy (a probe past its threshold), Killing, BackOff, as the kubelet
  reports them.

The pod's status is patched (``pods/status``) only when it changes. A restart of the
controller adopts running containers from their records. Back-off may be shortened for
one namespace with the annotation BACKOFF_ANNOTATION (tests that need several restarts).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]

HERE = Path(__file__).resolve().parent
SHIM = HERE / "container.py"
CONTAINERS_DIR = "containers"
TICK_S = 0.25
BACKOFF_S = 10.0
BACKOFF_MAX_S = 300.0
# a container that ran this long without ending starts its back-off again from the start
BACKOFF_RESET_S = 600.0
BACKOFF_ANNOTATION = "kube-tier.mlenv.dev/backoff-s"
PROBE_WORKERS = 8
# probe fields' defaults (core/v1 Probe)
PROBE_DEFAULTS = {
    "initialDelaySeconds": 0,
    "periodSeconds": 10,
    "timeoutSeconds": 1,
    "successThreshold": 1,
    "failureThreshold": 3,
}
HELD_LINE = (
    "kube tier: {ns}/{pod} container {ctr} has no command: it would run its image's entry "
    "point, which the tier does not know; held as running"
)


def stamp(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def probe_field(probe: Obj, key: str) -> int:
    try:
        return int(probe.get(key, PROBE_DEFAULTS[key]))
    except (TypeError, ValueError):
        return PROBE_DEFAULTS[key]


def container_port(container: Obj, port: Any) -> int | None:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    text = str(port)
    if text.isdigit():
        return int(text)
    for p in container.get("ports") or []:
        if p.get("name") == text:
            return int(p["containerPort"])
    return None


@dataclass
class ProbeState:
    kind: str  # startup, liveness, readiness
    spec: Obj
    due: float
    successes: int = 0
    failures: int = 0
    running: Future[tuple[bool, str]] | None = None


@dataclass
class Ctr:
    spec: Obj
    env: dict[str, str]
    record: Path
    log: Path
    restarts: int = 0
    state: str = "waiting"  # waiting, running, terminated
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: float = 0.0
    last: Obj | None = None  # the last run's terminated state
    backoff: float = 0.0  # the next back-off's length (0: none yet)
    restart_due: float = 0.0
    started: bool = False  # the startup probe succeeded (or there is none)
    ready: bool = False
    held: bool = False  # no command: held as running
    shim: subprocess.Popen[bytes] | None = None
    probes: list[ProbeState] = field(default_factory=list)
    killing: bool = False

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def owner(self) -> Path:
        """The file naming the pod (uid) whose container the record is."""
        return self.record.parent / f"{self.name}.uid"


@dataclass
class PodRun:
    ns: str
    name: str
    uid: str
    folder: Path
    ip: str
    policy: str
    grace: float
    ctrs: list[Ctr]
    obj: Obj
    patched: str = ""  # the last status sent, as JSON
    done: bool = False


class Kubelet:
    """The containers of every prepared pod; :meth:`run` is the kubelet's loop (a thread
    of the pod-root controller)."""

    def __init__(
        self,
        tier: Path,
        kubectl: Callable[..., subprocess.CompletedProcess[str]],
        say: Callable[[str], None],
        grace_cap: Callable[[str], float],
        annotations: Callable[[str], dict[str, str] | None],
    ) -> None:
        self.tier = tier
        self.kubectl = kubectl
        self.say = say
        self.grace_cap = grace_cap
        self.annotations = annotations
        self.lock = threading.Lock()
        self.pods: dict[Key, PodRun] = {}
        self.pool = ThreadPoolExecutor(max_workers=PROBE_WORKERS, thread_name_prefix="probe")
        self.confine = str(tier / "bin" / "confine.sh")

    # -- what the controller tells it -------------------------------------------------

    def start(self, pod: Obj, folder: Path, ip: str, envs: dict[str, dict[str, str]]) -> None:
        """A prepared pod: run its containers (or adopt those a controller before this one
        started, from their records)."""
        meta, spec = pod["metadata"], pod["spec"]
        key = (meta["namespace"], meta["name"])
        with self.lock:
            if key in self.pods and self.pods[key].uid == meta.get("uid"):
                return
        cdir = folder / CONTAINERS_DIR
        cdir.mkdir(exist_ok=True)
        grace = float(spec.get("terminationGracePeriodSeconds", 30))
        known = {
            str(cs.get("name")): cs
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
        }
        run = PodRun(
            ns=key[0],
            name=key[1],
            uid=str(meta.get("uid", "")),
            folder=folder,
            ip=ip,
            policy=str(spec.get("restartPolicy") or "Always"),
            grace=min(grace, self.grace_cap(key[0])),
            ctrs=[],
            obj=pod,
        )
        for c in spec["containers"]:
            ctr = Ctr(
                spec=c,
                env=envs.get(c["name"], {}),
                record=cdir / f"{c['name']}.json",
                log=cdir / f"{c['name']}.log",
                restarts=int((known.get(c["name"]) or {}).get("restartCount", 0)),
            )
            run.ctrs.append(ctr)
            rec = self._read(ctr.record)
            if rec is not None and self._owner(ctr) == run.uid:
                self._adopt(run, ctr, rec)
            else:
                self._launch(run, ctr)
        with self.lock:
            self.pods[key] = run

    def update(self, pod: Obj) -> None:
        """The pod as the watch last showed it."""
        meta = pod["metadata"]
        with self.lock:
            run = self.pods.get((meta["namespace"], meta["name"]))
            if run is not None and run.uid == meta.get("uid"):
                run.obj = pod

    def forget(self, ns: str, name: str) -> None:
        """The pod is deleted: nothing of it is restarted or probed again (the controller
        ends its processes)."""
        with self.lock:
            run = self.pods.pop((ns, name), None)
        if run is not None:
            for ctr in run.ctrs:
                if ctr.shim is not None and ctr.shim.poll() is None:
                    threading.Thread(target=ctr.shim.wait, daemon=True).start()

    def managed(self, ns: str, name: str, uid: str) -> bool:
        with self.lock:
            run = self.pods.get((ns, name))
            return run is not None and run.uid == uid

    # -- containers --------------------------------------------------------------------

    @staticmethod
    def _owner(ctr: Ctr) -> str:
        try:
            return ctr.owner.read_text().strip()
        except OSError:
            return ""

    @staticmethod
    def _read(path: Path) -> Obj | None:
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    def _confine_env(self, ctr: Ctr) -> dict[str, str]:
        """The environment of a process confine.sh runs in the container (its command, an
        exec probe), as kwok's exec gives it."""
        return {**ctr.env, "MLENV_KUBE_TIER": str(self.tier), "PATH": str(self.tier / "shims")}

    def _launch(self, run: PodRun, ctr: Ctr) -> None:
        command = [str(a) for a in ctr.spec.get("command") or []]
        args = [str(a) for a in ctr.spec.get("args") or []]
        now = time.time()
        ctr.started_at, ctr.state, ctr.reason, ctr.message = now, "running", "", ""
        ctr.started = not ctr.spec.get("startupProbe")
        ctr.ready = False
        ctr.killing = False
        ctr.probes = [
            ProbeState(
                kind,
                ctr.spec[f"{kind}Probe"],
                now + probe_field(ctr.spec[f"{kind}Probe"], "initialDelaySeconds"),
            )
            for kind in ("startup", "liveness", "readiness")
            if isinstance(ctr.spec.get(f"{kind}Probe"), dict)
        ]
        if not command:
            ctr.held = True
            with ctr.log.open("a") as f:
                line = HELD_LINE.format(ns=run.ns, pod=run.name, ctr=ctr.name)
                f.write(f"{stamp()} stdout F {line}\n")
            return
        ctr.record.unlink(missing_ok=True)
        env = {**self._confine_env(ctr), "LANG": "C.UTF-8"}
        ctr.shim = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                str(SHIM),
                str(ctr.record),
                str(ctr.log),
                "--",
                self.confine,
                *command,
                *args,
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        # the record names the pod: a pod of the same name later adopts nothing of this one
        ctr.owner.write_text(run.uid)
        self.say(f"{run.ns}/{run.name}: container {ctr.name} started (shim {ctr.shim.pid})")

    def _adopt(self, run: PodRun, ctr: Ctr, rec: Obj) -> None:
        ctr.state, ctr.started_at = "running", float(rec.get("started", time.time()))
        ctr.started = True  # it ran before this controller: its probes say the rest
        ctr.probes = [
            ProbeState(kind, ctr.spec[f"{kind}Probe"], time.time())
            for kind in ("liveness", "readiness")
            if isinstance(ctr.spec.get(f"{kind}Probe"), dict)
        ]
        ctr.ready = not ctr.probes

    def _exited(self, ctr: Ctr) -> Obj | None:
        """The container's end, from its record (None while it runs)."""
        if ctr.held:
            return None
        if ctr.shim is not None and ctr.shim.poll() is None:
            return None
        rec = self._read(ctr.record)
        if rec is not None and "exit_code" in rec:
            return rec
        if ctr.shim is None:  # adopted: its shim is not our child
            shim = int((rec or {}).get("shim", 0))
            if shim and Path(f"/proc/{shim}").exists():
                return None
        # the shim is gone without saying how the container ended
        return {
            "exit_code": 137,
            "started": ctr.started_at,
            "finished": time.time(),
            "reason": "Error",
            "message": "the container's shim ended",
        }

    def _kill(self, run: PodRun, ctr: Ctr, why: str) -> None:
        rec = self._read(ctr.record) or {}
        pid = int(rec.get("pid", 0))
        ctr.killing = True
        self._event(run, "Normal", "Killing", f"Container {ctr.name} {why}, will be restarted")
        if pid <= 0:
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except OSError:
            return

        def hard() -> None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

        t = threading.Timer(run.grace, hard)
        t.daemon = True
        t.start()

    def _backoff_s(self, ns: str) -> float:
        notes = self.annotations(ns) or {}
        try:
            return max(0.0, float(notes.get(BACKOFF_ANNOTATION, BACKOFF_S)))
        except ValueError:
            return BACKOFF_S

    def _step(self, run: PodRun, ctr: Ctr, now: float) -> None:
        if ctr.state == "running":
            end = self._exited(ctr)
            if end is not None:
                self._ended(run, ctr, end, now)
            else:
                self._probe(run, ctr, now)
        elif ctr.state == "waiting" and ctr.reason == "CrashLoopBackOff" and now >= ctr.restart_due:
            self._restart(run, ctr)

    def _ended(self, run: PodRun, ctr: Ctr, end: Obj, now: float) -> None:
        code = int(end.get("exit_code", 0))
        ctr.last = {
            "terminated": {
                "exitCode": code,
                "reason": str(end.get("reason") or ("Completed" if code == 0 else "Error")),
                "startedAt": stamp(float(end.get("started", ctr.started_at))),
                "finishedAt": stamp(float(end.get("finished", now))),
                **({"message": str(end["message"])} if end.get("message") else {}),
            }
        }
        ctr.ready, ctr.probes, ctr.shim = False, [], None
        self.say(f"{run.ns}/{run.name}: container {ctr.name} ended, exit {code}")
        restart = run.policy == "Always" or (run.policy == "OnFailure" and code != 0)
        if not restart:
            ctr.state, ctr.reason = "terminated", ""
            return
        ran = float(end.get("finished", now)) - float(end.get("started", ctr.started_at))
        if ran >= BACKOFF_RESET_S:
            ctr.backoff = 0.0
        if ctr.backoff <= 0.0:
            # the kubelet's first restart is at once; the next ones wait
            ctr.backoff = self._backoff_s(run.ns)
            self._restart(run, ctr)
            return
        ctr.state, ctr.reason = "waiting", "CrashLoopBackOff"
        ctr.message = (
            f"back-off {int(ctr.backoff)}s restarting failed container={ctr.name} "
            f"pod={run.name}_{run.ns}({run.uid})"
        )
        ctr.restart_due = now + ctr.backoff
        self._event(
            run,
            "Warning",
            "BackOff",
            f"Back-off restarting failed container {ctr.name} in pod {run.name}_{run.ns}({run.uid})",
        )
        ctr.backoff = min(ctr.backoff * 2, BACKOFF_MAX_S)

    def _restart(self, run: PodRun, ctr: Ctr) -> None:
        ctr.restarts += 1
        if ctr.log.exists():
            # `kubectl logs --previous`: the run before this one
            shutil.copyfile(ctr.log, ctr.log.with_suffix(".previous.log"))
            ctr.log.write_bytes(b"")
        self._launch(run, ctr)

    # -- probes ------------------------------------------------------------------------

    def _probe(self, run: PodRun, ctr: Ctr, now: float) -> None:
        if ctr.killing:
            return
        for p in ctr.probes:
            if p.running is not None:
                if not p.running.done():
                    continue
                ok, why = p.running.result()
                p.running = None
                self._judge(run, ctr, p, ok, why)
                if ctr.killing:
                    return
            if now < p.due:
                continue
            if p.kind != "startup" and not ctr.started:
                continue
            if p.kind == "startup" and ctr.started:
                continue
            p.due = now + probe_field(p.spec, "periodSeconds")
            p.running = self.pool.submit(self._probe_once, run, ctr, p.spec)
        if not any(p.kind == "readiness" for p in ctr.probes):
            ctr.ready = ctr.started

    def _judge(self, run: PodRun, ctr: Ctr, p: ProbeState, ok: bool, why: str) -> None:
        if ok:
            p.successes, p.failures = p.successes + 1, 0
        else:
            p.successes, p.failures = 0, p.failures + 1
        need = 1 if p.kind in ("startup", "liveness") else probe_field(p.spec, "successThreshold")
        if p.kind == "startup":
            if ok and p.successes >= need:
                ctr.started = True
        elif p.kind == "readiness":
            if ok and p.successes >= need:
                ctr.ready = True
        threshold = probe_field(p.spec, "failureThreshold")
        if not ok and p.failures >= threshold:
            label = p.kind.capitalize()
            if p.failures == threshold:
                self._event(run, "Warning", "Unhealthy", f"{label} probe failed: {why}")
            if p.kind == "readiness":
                ctr.ready = False
            else:
                self._kill(run, ctr, f"failed {p.kind} probe")

    def _probe_once(self, run: PodRun, ctr: Ctr, probe: Obj) -> tuple[bool, str]:
        timeout = max(1, probe_field(probe, "timeoutSeconds"))
        try:
            if isinstance(probe.get("exec"), dict):
                cmd = [str(a) for a in probe["exec"].get("command") or []]
                res = subprocess.run(
                    [self.confine, *cmd],
                    env=self._confine_env(ctr),
                    capture_output=True,
                    timeout=timeout,
                    check=False,
                )
                out = (res.stdout + res.stderr).decode(errors="replace").strip()[-200:]
                return res.returncode == 0, out or f"exit {res.returncode}"
            if isinstance(probe.get("tcpSocket"), dict):
                port = container_port(ctr.spec, probe["tcpSocket"].get("port"))
                if port is None:
                    return False, f"no port {probe['tcpSocket'].get('port')!r}"
                with socket.create_connection((run.ip, port), timeout=timeout):
                    return True, ""
            if isinstance(probe.get("httpGet"), dict):
                get = probe["httpGet"]
                port = container_port(ctr.spec, get.get("port"))
                if port is None:
                    return False, f"no port {get.get('port')!r}"
                conn = http.client.HTTPConnection(run.ip, port, timeout=timeout)
                try:
                    conn.request("GET", str(get.get("path") or "/"))
                    status = conn.getresponse().status
                finally:
                    conn.close()
                return 200 <= status < 400, f"HTTP probe failed with statuscode: {status}"
        except subprocess.TimeoutExpired:
            return False, f"command timed out after {timeout}s"
        except OSError as e:
            return False, f"dial tcp {run.ip}: {e}"
        return False, "a probe of no known kind"

    # -- status ------------------------------------------------------------------------

    def _event(self, run: PodRun, kind: str, reason: str, message: str) -> None:
        now = stamp()
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{run.name}.", "namespace": run.ns},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": run.name,
                "namespace": run.ns,
                "uid": run.uid,
            },
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        res = self.kubectl("create", "-f", "-", stdin=json.dumps(ev))
        if res.returncode != 0:
            self.say(f"{run.ns}/{run.name}: event {reason} not written: {res.stderr.strip()}")

    def status(self, run: PodRun) -> Obj:
        """The pod's status as this kubelet sees it (the fields it owns)."""
        statuses = []
        for ctr in run.ctrs:
            if ctr.state == "running":
                state: Obj = {"running": {"startedAt": stamp(ctr.started_at)}}
            elif ctr.state == "waiting":
                state = {
                    "waiting": {
                        "reason": ctr.reason,
                        **({"message": ctr.message} if ctr.message else {}),
                    }
                }
            else:
                state = dict(ctr.last or {"terminated": {"exitCode": 0, "reason": "Completed"}})
            image = str(ctr.spec.get("image", ""))
            cs: Obj = {
                "name": ctr.name,
                "image": image,
                "imageID": f"{image}@sha256:{'0' * 64}",
                "containerID": f"kube-tier://{run.uid}/{ctr.name}/{ctr.restarts}",
                "ready": ctr.ready and ctr.state == "running",
                "started": ctr.state == "running" and ctr.started,
                "restartCount": ctr.restarts,
                "state": state,
            }
            if ctr.last is not None:
                cs["lastState"] = ctr.last
            statuses.append(cs)
        ready = all(cs["ready"] for cs in statuses)
        over = all(c.state == "terminated" for c in run.ctrs)
        phase = "Running"
        if over:
            codes = [int((c.last or {}).get("terminated", {}).get("exitCode", 0)) for c in run.ctrs]
            phase = "Succeeded" if not any(codes) else "Failed"
        conditions = []
        for cond in (run.obj.get("status") or {}).get("conditions") or []:
            cond = dict(cond)
            if cond.get("type") in ("Ready", "ContainersReady"):
                want = "True" if ready and not over else "False"
                if cond.get("status") != want:
                    cond["status"] = want
                    cond["lastTransitionTime"] = stamp()
                if want == "False":
                    cond["reason"] = "PodCompleted" if over else "ContainersNotReady"
                    if not over:
                        waiting = [
                            c.name for c in run.ctrs if not (c.ready and c.state == "running")
                        ]
                        cond["message"] = f"containers with unready status: [{' '.join(waiting)}]"
                else:
                    cond.pop("reason", None)
                    cond.pop("message", None)
            conditions.append(cond)
        return {"phase": phase, "conditions": conditions, "containerStatuses": statuses}

    def _publish(self, run: PodRun) -> None:
        body = self.status(run)
        # times of conditions that did not change are the object's own: compare the rest
        key = json.dumps(
            [
                body["phase"],
                [(c.get("type"), c.get("status")) for c in body["conditions"]],
                body["containerStatuses"],
            ],
            sort_keys=True,
        )
        if key == run.patched:
            return
        res = self.kubectl(
            "patch",
            "pod",
            f"--namespace={run.ns}",
            run.name,
            "--subresource=status",
            "--type=merge",
            "--patch",
            json.dumps({"status": body}),
        )
        if res.returncode == 0:
            run.patched = key
        elif "NotFound" not in res.stderr:
            self.say(f"{run.ns}/{run.name}: status not patched: {res.stderr.strip()}")
        if body["phase"] != "Running":
            run.done = True

    # -- the loop ----------------------------------------------------------------------

    def tick(self) -> None:
        now = time.time()
        with self.lock:
            runs = list(self.pods.values())
        for run in runs:
            if run.done or (run.obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            for ctr in run.ctrs:
                self._step(run, ctr, now)
            # kwok's pod-ready stage moves it to Running: the kubelet's status comes after,
            # so kwok's start does not overwrite it
            if (run.obj.get("status") or {}).get("phase") not in (None, "Pending"):
                self._publish(run)

    def run(self) -> None:
        while True:
            try:
                self.tick()
            except (OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
                self.say(f"kubelet: {type(e).__name__}: {e}")
            time.sleep(TICK_S)
