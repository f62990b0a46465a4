"""Run one job in every worker pod (the ssh-less torchrun launch) with a constant number
of exec streams, whatever the pod count.

One ``kubectl exec`` stream per pod held for the whole run was 254 API connections at
once from one laptop at 256 pods, and a dropped stream killed that pod's rank. Instead:

1. each pod's rank is started detached (``run-torchrun --detach``, mlenv/pod/detach.py):
   a short exec per pod, at most ``MLENV_FANOUT`` at once (mlenv/cluster/pool.py); it
   returns once the rank's supervisor has written its pid. A retried start of the same
   run id starts nothing twice;
2. pod 0's output (it is the rank that reports) is followed through one exec
   (``run-follow``) by byte offset: a stream that drops is re-opened where it was, no
   line lost or repeated, for up to :data:`RECONNECT_WINDOW_S` without one that works;
3. the other pods are asked how their run stands (``run-state``) every :data:`POLL_S`
   through the same pool (a rank that ended early is said at once), and once more when
   pod 0's run has ended; a rank still running :data:`STRAGGLER_GRACE_S` after pod 0's
   ended is stopped. At most 1 + the bound streams are open at any time;
4. Ctrl-C, SIGTERM (raised here as KeyboardInterrupt) or the run's ``timeout``: every
   pod's run is stopped (``run-stop``, a short exec per pod through the pool) and pod 0 is
   followed to its end for :data:`STOP_GRACE_S` (its rank finalises the report).

Every pod must be Running: a static rendezvous waits for all ``MLENV_NNODES`` nodes, so
a missing pod would hang the rest.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mlenv import contract
from mlenv.cluster.api import NO_TIMEOUT, ClusterClient, ExecResult, ExecTimeout, Output
from mlenv.cluster.pods import worker_pods
from mlenv.cluster.pool import bounded_map
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.errors import InfraError, MlenvError
from mlenv.render.names import workload

POD = ("python", "-m", "mlenv.pod")
START_TIMEOUT_S = 120.0  # one short exec: a cold Python and the rank's pid file
START_TRIES = 3
STATE_TIMEOUT_S = 60.0
POLL_S = 30.0  # between rounds asking the other pods (at 2048 pods a round is 128 batches)
STRAGGLER_GRACE_S = 60.0  # the after-verdict grace of the pod launcher (contract)
STOP_GRACE_S = 60.0  # the launcher stops torchrun's group within 15 s; rank 0 then reports
RECONNECT_WINDOW_S = 120.0
RECONNECT_MAX_WAIT_S = 15.0
# what an mlenv older than the detached start answers (argparse's exit 2)
_NO_DETACH = "unrecognized arguments: --detach"


@dataclass(frozen=True)
class PodOutcome:
    """How the command ended in one pod other than pod 0."""

    pod: str
    returncode: int  # -1 when the exec itself failed (timeout, pod gone)
    detail: str  # last output line, or the error


@dataclass
class FanOutReport:
    """Pod 0's exit code and what happened everywhere else."""

    pods: list[str]
    returncode: int
    others: list[PodOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[PodOutcome]:
        """The other pods that did not exit 0."""
        return [o for o in self.others if o.returncode != 0]


def _tail(res: ExecResult) -> str:
    lines = (res.stderr or res.stdout).strip().splitlines()
    return lines[-1] if lines else ""


def pod_words(verb: str, run_id: str, *extra: str) -> list[str]:
    """``python -m mlenv.pod VERB --run-id ID EXTRA…`` (exec runs no shell)."""
    return [*POD, verb, "--run-id", run_id, *extra]


def detached(argv: Sequence[str]) -> list[str]:
    """``argv`` (``python -m mlenv.pod run-torchrun …``) with ``--detach`` after the verb."""
    words = list(argv)
    at = words.index("run-torchrun") + 1
    return [*words[:at], "--detach", *words[at:]]


def _require_all_running(cfg: ClusterConfig, client: ClusterClient) -> list[str]:
    ns = cfg.namespace
    pods = worker_pods(cfg, client)
    wl = workload(cfg)
    sts = client.get(wl.kind, wl.name, ns)
    want = wl.desired(sts)
    down = [f"{p.name} ({p.phase})" for p in pods if p.phase != "Running"]
    if sts is None or not pods:
        raise InfraError(f"no pods of {cfg.name} in {ns}: deploy first")
    if down or len(pods) < want:
        raise InfraError(
            f"{len(pods) - len(down)}/{want} pods Running"
            + (f" (not running: {', '.join(down)})" if down else "")
            + ": the torchrun rendezvous needs every pod; see `mlenv status`"
        )
    return [p.name for p in pods]


def run_everywhere(
    cfg: ClusterConfig,
    client: ClusterClient,
    argv: Sequence[str],
    out: Output,
    *,
    run_id: str,
    timeout: float | None = None,
    warn: Output | None = None,
    poll_s: float = POLL_S,
    bound: int | None = None,
) -> FanOutReport:
    """Start ``argv`` (``run-torchrun --run-id RUN_ID …``) detached in every worker pod,
    follow pod 0's output to ``out`` and return its exit code and the others' outcomes.

    ``timeout`` bounds the run (None: no limit, a training run takes what it takes);
    ``warn`` hears what is not the job's output (a stream re-opened, a rank that ended
    early). Raises InfraError when not every pod of the workload is Running, and
    ExecTimeout when pod 0's run outlives ``timeout`` (every rank is stopped first).
    """
    names = _require_all_running(cfg, client)
    run = DetachedRun(client, cfg.namespace, names, run_id, out, warn or out, bound, timeout)
    return run.run(argv, timeout, poll_s)


@dataclass
class DetachedRun:
    """One run of the launch across ``pods`` (pod 0 first)."""

    client: ClusterClient
    namespace: str
    pods: list[str]
    run_id: str
    out: Output
    warn: Output
    bound: int | None = None
    timeout: float | None = None  # the run's, for the streamed launch of older pods
    offset: int = 0  # bytes of pod 0's output shown so far
    ended: dict[str, PodOutcome] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- start -------------------------------------------------------------------------

    def run(self, argv: Sequence[str], timeout: float | None, poll_s: float) -> FanOutReport:
        try:
            first = self.start(argv)
            if first is not None:
                return first
            deadline = None if timeout is None else self.client.monotonic() + timeout
            poller = _Poller(self, poll_s)
            poller.start()
            try:
                rc = self.follow(deadline, timeout)
            finally:
                poller.halt()
        except KeyboardInterrupt:
            self.stop_all()
            self._last_lines()
            raise
        except ExecTimeout:
            self.stop_all()
            raise
        return FanOutReport(self.pods, rc, self.settle())

    def start(self, argv: Sequence[str]) -> FanOutReport | None:
        """Start every pod's rank; None when all started, else pod 0's refusal as its
        report (its own words shown, as its stream showed them). InfraError when another
        pod could not start its rank (every started one is stopped: the rendezvous
        would wait for it)."""
        words = detached(argv)

        def one(pod: str) -> ExecResult | MlenvError:
            got: ExecResult | MlenvError = InfraError("not tried")
            for attempt in range(START_TRIES):
                if attempt:
                    self.client.pause(attempt)
                try:
                    got = self.client.exec(
                        pod, self.namespace, words, check=False, timeout=START_TIMEOUT_S
                    )
                except MlenvError as e:
                    got = e
                # the exec failed, not the start (which answers 0, 2 or 3): tried again,
                # which starts nothing twice (a started run's folder is there)
                if isinstance(got, ExecResult) and got.returncode != 1:
                    return got
            return got

        got = dict(
            zip(
                self.pods,
                bounded_map(one, self.pods, bound=self.bound, progress=self.out, what="started"),
                strict=True,
            )
        )
        failed = {
            p: r for p, r in got.items() if not isinstance(r, ExecResult) or r.returncode != 0
        }
        if not failed:
            return None
        if len(failed) == len(self.pods) and all(
            isinstance(r, ExecResult) and _NO_DETACH in r.stderr for r in failed.values()
        ):
            # the pods' mlenv predates the detached start (an image older than this CLI)
            self.warn(
                "warning: the pods' mlenv cannot start a rank detached (an older image): "
                "one exec stream per pod for the whole run, as before"
            )
            return _streamed(self, argv)
        self.stop_all([p for p in self.pods if p not in failed])
        pod0 = got[self.pods[0]]
        if isinstance(pod0, ExecResult) and pod0.returncode != 0:
            for line in (pod0.stdout + pod0.stderr).splitlines():
                self.out(line)
            others = [
                PodOutcome(p, r.returncode, _tail(r))
                if isinstance(r, ExecResult)
                else PodOutcome(p, -1, str(r))
                for p, r in failed.items()
                if p != self.pods[0]
            ]
            return FanOutReport(self.pods, pod0.returncode, others)
        why = [
            f"{p}: "
            + ((_tail(r) or f"exit {r.returncode}") if isinstance(r, ExecResult) else str(r))
            for p, r in failed.items()
        ]
        raise InfraError(
            f"{len(failed)} of {len(self.pods)} pod(s) could not start their rank of run "
            f"{self.run_id} (the started ones were stopped: the rendezvous needs every pod): "
            + "; ".join(why[:5])
            + (f"; and {len(why) - 5} more" if len(why) > 5 else "")
        )

    # -- pod 0 -------------------------------------------------------------------------

    def follow_once(self, timeout: float) -> str | None:
        """One follow exec of pod 0 from the offset shown so far; the exit status it
        ended with, or None when the stream ended without one (dropped)."""
        status: list[str] = []

        def sink(line: str) -> None:
            kind, text, end = contract.follow_frame(line)
            if kind == "out":
                if end > self.offset:  # never a line twice, whatever a re-opened stream sends
                    self.offset = end
                    self.out(text)
            elif kind == "exit":
                status.append(text)
            elif line.strip():
                self.warn(f"{self.pods[0]}: {line}")

        self.client.exec_stream(
            self.pods[0],
            self.namespace,
            pod_words("run-follow", self.run_id, "--offset", str(self.offset)),
            sink,
            timeout=timeout,
        )
        return status[-1] if status else None

    def follow(
        self, deadline: float | None, timeout: float | None, window: float = RECONNECT_WINDOW_S
    ) -> int:
        """Pod 0's output to its end; its exit status. A dropped stream is re-opened (for
        up to ``window`` seconds without one that shows anything)."""
        pod0 = self.pods[0]
        failing_since: float | None = None
        wait = 1.0
        while True:
            left = math.inf if deadline is None else deadline - self.client.monotonic()
            if left <= 0:
                raise ExecTimeout(f"exec of {' '.join(POD)}", pod0, float(timeout or 0))
            shown, opened = self.offset, self.client.monotonic()
            try:
                status = self.follow_once(NO_TIMEOUT if math.isinf(left) else left)
                why = "the stream ended"
            except ExecTimeout:
                raise ExecTimeout(f"exec of {' '.join(POD)}", pod0, float(timeout or 0)) from None
            except MlenvError as e:
                status, why = None, str(e)
            if status is not None:
                return self._status(pod0, status)
            now = self.client.monotonic()
            # a stream that showed output, or stayed open a while (an idle run's stream cut
            # by a proxy now and then), worked: only streams failing one after another count
            if self.offset > shown or now - opened >= RECONNECT_MAX_WAIT_S or failing_since is None:
                failing_since, wait = now, 1.0
            if now - failing_since > window:
                raise InfraError(
                    f"lost {pod0}'s output for {window:g} s ({why}); its run {self.run_id} may "
                    "go on in the pods"
                )
            self.warn(
                f"warning: {pod0}: output stream dropped ({why}); re-opening it at byte {self.offset}"
            )
            self.client.pause(wait)
            wait = min(wait * 2, RECONNECT_MAX_WAIT_S)

    def _status(self, pod: str, status: str) -> int:
        if status.lstrip("-").isdigit():
            return int(status)
        if status == contract.FOLLOW_NONE:
            raise InfraError(f"no run {self.run_id} in pod {pod} (did the pod restart?)")
        raise InfraError(
            f"pod {pod}: run {self.run_id} ended without an exit status (its supervisor was "
            "killed, or the pod restarted)"
        )

    def _last_lines(self) -> None:
        """After a stop: pod 0's output to its end (its rank's report), for STOP_GRACE_S."""
        try:
            self.follow(self.client.monotonic() + STOP_GRACE_S, STOP_GRACE_S, window=STOP_GRACE_S)
        except MlenvError as e:
            self.warn(f"warning: {self.pods[0]}: {e}")

    # -- the others --------------------------------------------------------------------

    def poll(self, pods: list[str], cancel: threading.Event | None = None) -> list[str]:
        """Ask ``pods`` how their run stands (recording those that ended); the ones still
        running (or not asked: ``cancel`` set)."""

        def one(pod: str) -> PodOutcome | None:
            if cancel is not None and cancel.is_set():
                return None
            try:
                res = self.client.exec(
                    pod,
                    self.namespace,
                    pod_words("run-state", self.run_id),
                    check=False,
                    timeout=STATE_TIMEOUT_S,
                )
            except MlenvError:
                return None  # asked again next round
            word, _, rest = res.stdout.strip().partition(" ")
            if res.returncode != 0 or word in ("running", "starting", ""):
                return None
            if word == "exited":
                rc, _, line = rest.partition(" ")
                return PodOutcome(pod, int(rc) if rc.lstrip("-").isdigit() else -1, line)
            if word == contract.FOLLOW_NONE:
                return PodOutcome(pod, -1, f"no run {self.run_id} in this pod (did it restart?)")
            return PodOutcome(
                pod, -1, f"ended without an exit status (killed?): {rest}".rstrip(": ")
            )

        got = bounded_map(one, pods, bound=self.bound)
        with self._lock:
            for o in got:
                if o is not None and o.pod not in self.ended:
                    self.ended[o.pod] = o
        return [p for p, o in zip(pods, got, strict=True) if o is None]

    def settle(self, grace: float = STRAGGLER_GRACE_S, poll_s: float = 2.0) -> list[PodOutcome]:
        """Once pod 0's run ended: every other pod's outcome; a rank still running
        ``grace`` seconds later is stopped."""
        end = self.client.monotonic() + grace
        todo = [p for p in self.pods[1:] if p not in self.ended]
        while todo:
            todo = self.poll(todo)
            if not todo or self.client.monotonic() >= end:
                break
            self.client.pause(poll_s)
        if todo:
            self.stop_all(todo)
            for p in todo:
                self.ended[p] = PodOutcome(
                    p, -1, f"still running {grace:g} s after {self.pods[0]}'s run ended: stopped"
                )
        return [self.ended[p] for p in self.pods[1:]]

    def stop_all(self, pods: list[str] | None = None) -> None:
        """``run-stop`` in every pod (a short exec each, through the pool); never raises."""

        def one(pod: str) -> None:
            try:
                res = self.client.exec(
                    pod,
                    self.namespace,
                    pod_words("run-stop", self.run_id),
                    check=False,
                    timeout=STATE_TIMEOUT_S,
                )
                if res.returncode != 0:
                    self.warn(f"warning: could not stop run {self.run_id} in {pod}: {_tail(res)}")
            except MlenvError as e:
                self.warn(f"warning: could not stop run {self.run_id} in {pod}: {e}")

        bounded_map(one, self.pods if pods is None else pods, bound=self.bound)


def next_wait(interval: float, round_s: float) -> float:
    """Seconds before the next round asking the other pods: ``interval``, or twice the
    last round's length when that is longer (thousands of pods make a round long: asking
    then stays a third of the time at most, not back to back)."""
    return max(interval, 2 * round_s)


class _Poller(threading.Thread):
    """Asks the other pods how their run stands every ``interval`` seconds while pod 0 is
    followed, and says at once when one's rank ended with a failure."""

    def __init__(self, run: DetachedRun, interval: float) -> None:
        super().__init__(name="mlenv-launch-poll", daemon=True)
        self.launch, self.interval = run, interval
        self.done = threading.Event()

    def run(self) -> None:
        todo, wait = self.launch.pods[1:], self.interval
        while todo and not self.done.wait(wait):
            began = time.monotonic()
            left = self.launch.poll(todo, self.done)
            wait = next_wait(self.interval, time.monotonic() - began)
            for p in todo:
                o = self.launch.ended.get(p)
                if p not in left and o is not None and o.returncode != 0:
                    self.launch.warn(
                        f"warning: {p}'s rank ended while the run goes on, status "
                        f"{o.returncode}: {o.detail}"
                    )
            todo = left

    def halt(self) -> None:
        """Stop asking; a round in flight asks nobody more (its execs end at their timeout)."""
        self.done.set()
        self.join(timeout=STATE_TIMEOUT_S + 5)


def _streamed(run: DetachedRun, argv: Sequence[str]) -> FanOutReport:
    """The launch as it was before the detached start: ``argv`` in every pod through an
    exec each, held for the whole run, pod 0's streamed (for pods whose mlenv is older)."""
    from concurrent.futures import ThreadPoolExecutor

    limit = NO_TIMEOUT if run.timeout is None else run.timeout

    def one(pod: str) -> PodOutcome:
        try:
            res = run.client.exec(pod, run.namespace, argv, check=False, timeout=limit)
        except MlenvError as e:
            return PodOutcome(pod, -1, str(e))
        return PodOutcome(pod, res.returncode, _tail(res))

    with ThreadPoolExecutor(max_workers=max(1, len(run.pods) - 1)) as pool:
        futures = [pool.submit(one, name) for name in run.pods[1:]]
        rc = run.client.exec_stream(run.pods[0], run.namespace, argv, run.out, timeout=limit)
        others = [f.result() for f in futures]
    return FanOutReport(run.pods, rc, others)
