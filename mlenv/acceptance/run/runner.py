"""Run the checks on every rank under deadlines; gather results on rank 0 via the store.

Per check, every rank: apply injected faults (tests only), run setup/run/teardown in a
worker thread bounded by the deadline, post its results under ``res/<i>/<rank>``.
Rank 0 waits (up to the deadline) for every rank's post, turns each rank that never
posted into an ERROR naming the rank and its host and what its process is doing
(died: the process is gone; hung: alive but silent, stopped, blocked or frozen; lost:
no heartbeat and its host does not answer), writes results.jsonl line by line, prints a console line, and posts
``go/<i>``: go on, or abort with a reason when the process group can no longer be
trusted or the environment check found a GPU that another job holds (nothing measured
on it would be this node's figure; the rest is SKIP "not measured: GPU 0 (host) busy"). The other ranks wait for that decision, so all agree on what runs next.
A SIGTERM (the launcher stops every rank once one exits) is turned into a report too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from mlenv.acceptance.core.base import Check, RunContext
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.run.world import (
    GONE,
    HEARTBEAT_PERIOD_S,
    UNKNOWN,
    HeartbeatWatch,
    Liveness,
    PortCheck,
    SideChannel,
    probe,
)

# Words in an exception that mean the process group itself failed (peer gone, timeout),
# not that the check found a problem: after one, later collectives cannot be trusted.
_DIST_FAILURE_WORDS = (
    "timed out",
    "timeout",
    "connection closed",
    "connection reset",
    "broken pipe",
    "peer",
    "nccl",
    "gloo",
    "process group",
    "socket",
)


class Terminated(BaseException):
    """SIGTERM/SIGINT arrived (a BaseException so no check's ``except Exception`` eats it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


@dataclass
class Outcome:
    """What rank 0 gathered (other ranks: empty), and why the run stopped early if it did."""

    results: list[CheckResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    aborted: bool = False
    interrupted: str | None = None  # the signal someone stopped the run with (verdict INTERRUPTED)
    silent: list[int] = field(
        default_factory=list
    )  # ranks that never posted (dead, hung): none will say goodbye


def is_dist_failure(e: BaseException) -> bool:
    """True when ``e`` looks like a failed collective / peer, not a check's own finding."""
    try:
        import torch.distributed as dist

        if isinstance(e, dist.DistError):
            return True
    except ImportError:  # pragma: no cover - torch is always there when checks run
        pass
    text = f"{type(e).__name__} {e}".lower()
    return any(w in text for w in _DIST_FAILURE_WORDS)


class Runner:
    """Runs ``checks`` in order on this rank; rank 0 also gathers and reports."""

    def __init__(
        self,
        ctx: RunContext,
        chan: SideChannel,
        hosts: list[str],
        checks: list[type[Check]],
        emit: Callable[[list[CheckResult]], None] | None = None,
        stale_s: float = 15.0,
        poll_s: float = 0.05,
        progress: Callable[[str], None] | None = None,
        progress_every_s: float = 30.0,
        stop_reason: Callable[[], str] | None = None,
    ) -> None:
        self.ctx = ctx
        self.chan = chan
        self.hosts = hosts
        self.checks = checks
        # Called once per check with every rank's results, so the caller can judge
        # them together (peer outliers need all ranks) before printing a line.
        self.emit = emit or (lambda rs: None)
        # Rank 0's "still running" lines for long checks (training runs for minutes and
        # would otherwise look hung); None elsewhere.
        self.progress = progress
        self.progress_every_s = progress_every_s
        # Rank 0: why the run cannot go on although the group is sound ("" when it can): the
        # report folder is full. Asked after each check, the one point every rank waits at.
        self.stop_reason = stop_reason or (lambda: "")
        self.stale_s = stale_s
        self.poll_s = poll_s
        self.watch = HeartbeatWatch(chan, ctx.world_size, stale_s) if ctx.rank == 0 else None
        self._posted: dict[int, list[CheckResult]] = {}
        self._looked: dict[
            int, tuple[float, Liveness]
        ] = {}  # rank 0: the last look at each rank's process
        self._verbs: dict[
            int, str
        ] = {}  # rank 0: what became of a rank that never posted (died, hung, lost)
        self._ports: PortCheck | None = (
            None  # rank 0: which ranks' lifeline ports answered at the start
        )

    # -- one check on this rank -------------------------------------------------------

    def _error(
        self,
        name: str,
        reason: str,
        details: dict[str, object] | None = None,
        rank: int | None = None,
    ) -> CheckResult:
        r = self.ctx.rank if rank is None else rank
        return CheckResult(
            name=name,
            status=Status.ERROR,
            scope="rank",
            node=self.hosts[r],
            rank=r,
            reasons=[reason],
            details=dict(details or {}),
        )

    def _apply_faults(self, name: str) -> None:
        if self.ctx.fault("kill", name) is not None:
            os._exit(1)  # hard, like a segfault or the OOM killer: no cleanup, no report
        if self.ctx.fault("hang", name) is not None:
            while True:  # like a wedged driver: alive (heartbeat beats) but never reports
                time.sleep(3600)

    def run_one(self, cls: type[Check]) -> tuple[list[CheckResult], bool]:
        """Run one check here under the deadline: (results, process group broken?)."""
        box: dict[str, object] = {}
        name = cls.name

        def body() -> None:
            check = cls()
            try:
                if self.ctx.is_cuda:
                    # The current CUDA device is per thread: without this every check
                    # thread would run its events, syncs and object collectives on
                    # cuda:0 whatever this rank's device is.
                    import torch

                    torch.cuda.set_device(torch.device(self.ctx.device))
                check.setup(self.ctx)
                box["results"] = check.run(self.ctx)
            except BaseException as e:  # anything a check raises is the check's ERROR
                box["exc"] = e
                box["tb"] = traceback.format_exc()
            finally:
                try:
                    check.teardown(self.ctx)
                except Exception as e:
                    box.setdefault("exc", e)
                    box.setdefault("tb", traceback.format_exc())

        t0 = time.monotonic()
        th = threading.Thread(target=body, name=f"check-{name}", daemon=True)
        th.start()
        # Join in short steps: a long join would delay the SIGTERM handler.
        said = polled = t0
        while th.is_alive() and time.monotonic() - t0 < self.ctx.deadline_s:
            th.join(0.1)
            now = time.monotonic()
            if self.watch is not None and now - polled >= HEARTBEAT_PERIOD_S:
                polled = now  # rank 0: while it runs the check itself, it still sees whose heartbeat stops
                with contextlib.suppress(
                    Exception
                ):  # the gather that follows meets any store failure
                    self.watch.poll()
            if self.progress is not None and now - said >= self.progress_every_s and th.is_alive():
                self.progress(
                    f"… {name} still running ({now - t0:.0f} s of its {self.ctx.deadline_s:g} s deadline)"
                )
                said = now
        dt = time.monotonic() - t0
        if th.is_alive():
            return [
                self._error(
                    name,
                    f"{name} did not finish within the deadline of {self.ctx.deadline_s:g} s "
                    f"on rank {self.ctx.rank} ({self.ctx.host})",
                )
            ], True
        exc = box.get("exc")
        if isinstance(exc, BaseException):
            broke = is_dist_failure(exc)
            kind = "collective failed" if broke else "check raised"
            # The reason is one line (a CUDA/NCCL message runs to many); the whole
            # message and the stack stay in the details, i.e. results.json and the log.
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
            r = self._error(
                name,
                f"{name} {kind} on rank {self.ctx.rank} ({self.ctx.host}): "
                f"{type(exc).__name__}: {first}",
                {"traceback": str(box.get("tb", "")), "message": str(exc)},
            )
            r.duration_s = dt
            return [r], broke
        results = list(box.get("results") or [])  # type: ignore[call-overload]
        for r in results:
            if r.scope == "rank":
                r.rank = self.ctx.rank if r.rank is None else r.rank
                r.node = self.ctx.host if r.node is None else r.node
            if not r.duration_s:
                r.duration_s = dt
        return results, False

    # -- rank 0: gather -----------------------------------------------------------------

    def _collect(self, i: int, pending: set[int]) -> None:
        for r in sorted(pending):
            raw = self.chan.get_now(f"res/{i}/{r}")
            if raw is not None:
                self._posted[r] = [CheckResult.from_dict(d) for d in json.loads(raw)]
                pending.discard(r)

    def look(self, rank: int, fresh_s: float = 1.0) -> Liveness:
        """What ``rank``'s process is doing (:func:`world.probe`), looked at again at most every
        ``fresh_s``; a process found gone, or that cannot be looked at, stays so."""
        seen = self._looked.get(rank)
        now = time.monotonic()
        if seen is not None and (seen[1].final or now - seen[0] < fresh_s):
            return seen[1]
        life = probe(
            self.chan.life(rank), port_ok=self._ports.ok(rank) if self._ports is not None else True
        )
        self._looked[rank] = (now, life)
        return life

    def _lost(self, stale: list[int]) -> list[int]:
        """Of the ranks whose heartbeat stopped, those not worth waiting for: their process
        is gone, or cannot be looked at (host down). A stopped or frozen one may come back:
        it is waited for until the deadline, then named hung."""
        return [r for r in stale if self.look(r).final]

    def _missing(self, name: str, r: int) -> CheckResult:
        """The ERROR of rank ``r`` that never posted its results of ``name``."""
        assert self.watch is not None
        where = f"rank {r} ({self.hosts[r]})"
        quiet = self.watch.quiet_for(r)
        stale = quiet > self.stale_s
        life = self.look(r, fresh_s=0.0)
        self._verbs[r] = {GONE: "died"}.get(
            life.kind, "lost" if life.kind == UNKNOWN and stale else "hung"
        )
        if life.kind == GONE:
            silent = f"no result and no heartbeat for {quiet:.0f} s" if stale else "no result"
            why = f"{where} died during {name}: {silent} (killed or crashed; {life.text})"
        elif life.kind == UNKNOWN and stale:
            why = (
                f"{where} lost during {name}: no result and no heartbeat for {quiet:.0f} s, and {life.text}: "
                "dead or frozen"
            )
        elif stale or life.halted:
            why = (
                f"{where} hung during {name}: no result within the deadline of {self.ctx.deadline_s:g} s and "
                f"no heartbeat for {quiet:.0f} s; {life.text}"
            )
        else:
            why = (
                f"{where} did not report {name} within the deadline of {self.ctx.deadline_s:g} s "
                "(hung: alive but stuck)"
            )
        return self._error(name, why, rank=r)

    def gather(self, i: int, name: str, started: float) -> tuple[list[CheckResult], list[int]]:
        """Every rank's results of check ``i``; ranks that never posted become ERRORs.

        Waits until every rank posted, or every rank still missing is gone (its heartbeat
        stopped and its process exited, or its host does not answer), or the deadline.
        Returns (results in rank order, ranks that never posted).
        """
        assert self.watch is not None
        pending = set(range(self.ctx.world_size)) - set(self._posted)
        end = max(started + self.ctx.deadline_s, time.monotonic() + 1.0)
        while pending:
            self._collect(i, pending)
            self.watch.poll()
            lost = self._lost(self.watch.stale(sorted(pending)))
            if not pending or set(lost) >= pending or time.monotonic() >= end:
                break
            time.sleep(self.poll_s)
        out: list[CheckResult] = []
        for r in range(self.ctx.world_size):
            out += self._posted[r] if r in self._posted else [self._missing(name, r)]
        return out, sorted(pending)

    def _silent_after_signal(self, pending: set[int], window_s: float = 3.0) -> dict[int, Liveness]:
        """Ranks (of ``pending``) that stopped beating without saying goodbye, sampled over
        ``window_s``, with what their process is doing (gone, stopped, …).

        A rank the launcher terminated posts ``term/<rank>`` from its handler; a rank that
        crashed or was killed posts nothing and its heartbeat stops; so does a stopped one.
        """
        watch = HeartbeatWatch(self.chan, self.ctx.world_size, window_s)
        end = time.monotonic() + window_s + 0.2
        while time.monotonic() < end:
            watch.poll()
            time.sleep(0.1)
        stale = watch.stale(sorted(pending))
        return {
            r: self.look(r, fresh_s=0.0) for r in stale if self.chan.get_now(f"term/{r}") is None
        }

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Run every check; rank 0 returns the gathered results."""
        out = Outcome()
        i = -1
        if (
            self.ctx.rank == 0 and self.ctx.world_size > 1
        ):  # every rank posted its life with its hello
            self._ports = PortCheck(
                {
                    r: life
                    for r in range(1, self.ctx.world_size)
                    if (life := self.chan.life(r)) is not None
                }
            )
        try:
            for i, cls in enumerate(self.checks):
                self._posted = {}
                started = time.monotonic()
                self._apply_faults(cls.name)
                own, broke = self.run_one(cls)
                if self.ctx.rank != 0:
                    self.chan.set(
                        f"res/{i}/{self.ctx.rank}", json.dumps([r.to_dict() for r in own])
                    )
                    go = self.chan.wait_for(f"go/{i}", self.ctx.deadline_s + 60.0, self.poll_s)
                    if go is None or go.startswith("abort"):
                        out.aborted = True
                        return out
                    continue
                self._posted[0] = own
                results, missing = self.gather(i, cls.name, started)
                self.emit(results)
                out.results += results
                busy = busy_reason(results)
                stop = self.stop_reason()
                if stop and not missing and not broke:  # the other ranks leave cleanly
                    self.chan.set(f"go/{i}", f"abort:{stop}")
                    out.aborted = True
                    out.notes.append(f"run stopped after {cls.name}: {stop}")
                    self._skip_rest(out, i + 1, stop)
                    return out
                if busy and not missing and not broke:
                    # Not a broken group: the other ranks leave cleanly, nothing is measured.
                    self.chan.set(f"go/{i}", f"abort:{busy}")
                    out.aborted = True
                    self._skip_rest(out, i + 1, busy, prefix="not measured")
                    return out
                reason = ""
                if missing:
                    who = ", ".join(
                        f"rank {r} ({self.hosts[r]}) {self._verbs.get(r, 'lost')}" for r in missing
                    )
                    reason = f"{who} during {cls.name}"
                elif broke or any(
                    r.status == Status.ERROR and "collective failed" in " ".join(r.reasons)
                    for r in results
                ):
                    reason = f"a collective failed during {cls.name}"
                self.chan.set(f"go/{i}", f"abort:{reason}" if reason else "go")
                if reason:
                    out.aborted = True
                    out.silent = missing
                    out.notes.append(
                        f"run stopped after {cls.name}: {reason}; the process group cannot be trusted"
                    )
                    self._skip_rest(out, i + 1, reason)
                    return out
        except Terminated as t:
            if self.ctx.rank != 0:
                raise
            signal.signal(
                signal.SIGTERM, signal.SIG_IGN
            )  # finish the report; the launcher waits 30 s
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self._terminated(out, i, t.signum)
        return out

    def _terminated(self, out: Outcome, i: int, signum: int) -> None:
        """Rank 0 was stopped during check ``i``: keep what was posted, name who is gone.

        A SIGINT is a person at this rank's terminal; a SIGTERM is the CLI stopping the run
        (it leaves ``rundir.INTERRUPT_FILE`` first: verdict INTERRUPTED) or the launcher
        stopping every rank after one exited (ERROR)."""
        from mlenv.acceptance.records.rundir import interrupted_by

        why = "SIGINT" if signum == signal.SIGINT else interrupted_by(self.ctx.report_dir)
        out.interrupted = why
        name = self.checks[i].name if 0 <= i < len(self.checks) else "start-up"
        pending = set(range(1, self.ctx.world_size)) - set(self._posted)
        try:
            self._collect(i, pending)
            silent = self._silent_after_signal(pending)
        except Exception:  # the store itself is gone: name nobody rather than guess
            silent = {}
        dead = [k for k, life in silent.items() if life.kind == GONE]
        lost = [k for k, life in silent.items() if life.kind == UNKNOWN]
        hung = [k for k in silent if k not in dead and k not in lost]
        got: list[CheckResult] = list(self._posted.get(0, [])) or [
            self._stopped(name, 0, why)
            if why
            else self._error(
                name,
                f"rank 0 ({self.hosts[0]}) was stopped by signal {signum} during {name} "
                "(launchers stop every rank once one exits)",
            )
        ]
        for k in range(1, self.ctx.world_size):
            if k in self._posted:
                got += self._posted[k]
            elif k in dead:
                got.append(
                    self._error(
                        name,
                        f"rank {k} ({self.hosts[k]}) died during {name} "
                        f"(exited or killed without reporting; {silent[k].text})",
                        rank=k,
                    )
                )
            elif k in silent:
                verb = "hung" if k in hung else "lost"
                got.append(
                    self._error(
                        name,
                        f"rank {k} ({self.hosts[k]}) {verb} during {name}: no heartbeat and "
                        f"no result; {silent[k].text}",
                        rank=k,
                    )
                )
            elif why:
                got.append(self._stopped(name, k, why))
            else:
                got.append(
                    self._error(
                        name,
                        f"rank {k} ({self.hosts[k]}) was stopped during {name} before reporting",
                        rank=k,
                    )
                )
        self.emit(got)
        out.results += got
        said = [
            f"{', '.join(f'rank {k} ({self.hosts[k]})' for k in ks)} {verb} during {name}"
            for ks, verb in ((dead, "died"), (hung, "hung"), (lost, "lost"))
            if ks
        ]
        if why:
            reason = f"interrupted by {why} during {name}"
        else:
            reason = "; ".join(said) if said else f"the launcher stopped the run during {name}"
        out.aborted = True
        if said or not why:
            out.notes.append(f"run terminated (signal {signum}): {reason}")
        self._skip_rest(out, i + 1, reason)

    def _stopped(self, name: str, rank: int, why: str) -> CheckResult:
        """A rank stopped on purpose before it reported: not measured, not broken."""
        return CheckResult(
            name=name,
            status=Status.SKIP,
            scope="rank",
            node=self.hosts[rank],
            rank=rank,
            reasons=[
                f"not finished: the run was interrupted ({why}) during {name} "
                f"before rank {rank} ({self.hosts[rank]}) reported"
            ],
        )

    def _skip_rest(self, out: Outcome, start: int, reason: str, prefix: str = "not run") -> None:
        for cls in self.checks[start:]:
            r = CheckResult(
                name=cls.name, status=Status.SKIP, scope="world", reasons=[f"{prefix}: {reason}"]
            )
            self.emit([r])
            out.results.append(r)


def busy_reason(results: list[CheckResult]) -> str:
    """``GPU 0 (host) busy; GPU 3 (host2) busy`` from results that found a busy GPU, or ''.

    The environment check sets ``details['gpu_busy']`` (see checks/environment.py).
    """
    seen: list[str] = []
    for r in results:
        b = r.details.get("gpu_busy") if isinstance(r.details, dict) else None
        if isinstance(b, dict):
            label = f"GPU {b.get('index')} ({r.node or r.rank}) busy"
            if label not in seen:
                seen.append(label)
    return "; ".join(seen)


def install_signal_handlers(chan: SideChannel | None, rank: int) -> None:
    """SIGTERM/SIGINT → :class:`Terminated` on rank 0; other ranks say so, then exit.

    The ``term/<rank>`` marker lets rank 0 tell a rank the launcher stopped from one
    that died on its own.
    """

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if rank == 0:
            raise Terminated(signum)
        try:
            if chan is not None:
                chan.set(f"term/{rank}", str(signum))
        except Exception:  # the store is gone with rank 0: nothing to tell
            pass
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
