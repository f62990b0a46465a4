"""``mlenv recheck RUN`` on Slurm: the suite once more on each node the run drained,
on that node, recorded as a later run of the same cluster.

Slurm starts no job on a ``DRAIN`` node, whatever ``--nodelist`` or ``--reservation``
says, so the drain is traded, for the re-check's length, for a reservation that keeps
every other job off the node as well. Per node, in this order:

1. a reservation ``mlenv-recheck-node-<hash>`` of the node alone, for the invoking user,
   ``Flags=MAINT,IGNORE_JOBS``, ``StartTime=now``, ``Duration=UNLIMITED`` (Slurm 22.05
   makes that 365 days): from here slurmctld itself keeps every other user's job, and
   every job of ours that does not name the reservation, off the node, whatever happens
   to this process or the control host;
2. ``RESUME`` (the node is idle but reserved);
3. the acceptance job rendered for one node, ``sbatch --reservation=<it>
   --nodelist=<node> --nodes=1``; followed, judged and imported into the cluster's
   history like ``mlenv acceptance``'s runs: the later run ``release --after`` needs;
4. ``DRAIN`` again with the quarantine's own reason (a PASS only makes evidence; the
   node is freed by ``mlenv release RUN --after RUN2``, as on Kubernetes);
5. the reservation deleted, last.

Each step is written to ``<report dir>/recheck/<node>.json`` before it is taken, and the
file is locked (``flock``) while this process works on the node. Ctrl-C, SIGTERM and
SIGHUP stop a re-check through steps 4-5. One stopped where those cannot run (SIGKILL,
a lost control host, scontrol failing) leaves the file and the reservation; the next
``mlenv recheck`` or ``mlenv release`` of the run finds the file unlocked and finishes
it (cancels the job left in the reservation, drains the node with the quarantine's
reason, deletes the reservation) before anything else. So the node is never resumed
without its reservation. A reservation of the node that exists while the file is locked (or that
this history does not know) is a re-check in progress: refused in one line.

Every scontrol/scancel/squeue/sbatch argv comes from :func:`mlenv.argv.slurm`, the node
a validated host name, the reservation name made here from a hash of it, the user a
validated login name, the reason a validated note.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mlenv import argv, contract
from mlenv.errors import EXIT_ERROR, EXIT_FAIL, EXIT_OK, InfraError

if TYPE_CHECKING:
    from mlenv.config.model import Cluster

Say = Callable[[str], None]

STATE_DIR = "recheck"
RESERVATION_PREFIX = "mlenv-recheck-node-"
# After scancel: how long the job left in a reservation may take to end (KillWait, the
# epilog) before the reservation can be deleted (slurmctld refuses while it is in use).
DRAIN_JOBS_WAIT_S = 120.0
POLL_S = 1.0


def reservation_name(node: str) -> str:
    """``mlenv-recheck-node-<10 hex of sha256(node)>``: one per node (a second re-check of
    the node finds it), a plain Slurm name whatever the node is called."""
    digest = hashlib.sha256(argv.slurm_node(node).encode()).hexdigest()[:10]
    return argv.slurm_name(f"{RESERVATION_PREFIX}{digest}", "reservation")


def _user() -> str:
    """The invoking user's login name (the only user the reservation admits)."""
    uid = os.getuid()
    try:
        return argv.ssh_user(pwd.getpwuid(uid).pw_name)
    except KeyError:
        raise InfraError(f"uid {uid} has no login name: the reservation names its user") from None


def create_argv(name: str, node: str, user: str) -> list[str]:
    """``scontrol -- create reservation …``: the node alone, for ``user``, from now, with no
    end of its own (UNLIMITED; 22.05 makes it 365 days), MAINT (maintenance: Slurm's
    special accounting, and it may take a node another reservation holds) and
    IGNORE_JOBS (a job still ending on the node does not stop it)."""
    return argv.slurm(
        "scontrol",
        [],
        [
            "create",
            "reservation",
            f"ReservationName={argv.slurm_name(name, 'reservation')}",
            f"Users={argv.ssh_user(user)}",
            f"Nodes={argv.slurm_node(node)}",
            "StartTime=now",
            "Duration=UNLIMITED",
            "Flags=MAINT,IGNORE_JOBS",
        ],
    )


def delete_argv(name: str) -> list[str]:
    """``scontrol -- delete ReservationName=…``."""
    return argv.slurm(
        "scontrol", [], ["delete", f"ReservationName={argv.slurm_name(name, 'reservation')}"]
    )


def show_argv(name: str) -> list[str]:
    """``scontrol --oneliner -- show reservation NAME``."""
    return argv.slurm(
        "scontrol", ["--oneliner"], ["show", "reservation", argv.slurm_name(name, "reservation")]
    )


def cancel_argv(name: str) -> list[str]:
    """``scancel --reservation=NAME``: every job in it (only the invoking user's can be)."""
    return argv.slurm("scancel", [f"--reservation={argv.slurm_name(name, 'reservation')}"])


def jobs_argv(name: str) -> list[str]:
    """``squeue`` of the jobs in the reservation (ids only)."""
    return argv.slurm(
        "squeue",
        ["--noheader", f"--reservation={argv.slurm_name(name, 'reservation')}", "--format=%i"],
    )


def sbatch_options(name: str, node: str) -> list[str]:
    """What the re-check adds to the acceptance job's sbatch: in the reservation, on the node."""
    return [
        f"--reservation={argv.slurm_name(name, 'reservation')}",
        f"--nodelist={argv.slurm_node(node)}",
        "--nodes=1",
    ]


class Ops(Protocol):
    """The Slurm reads and writes a re-check makes: the real clients
    (:class:`SlurmOps`), or a scripted fake in the unit tests."""

    def user(self) -> str: ...

    def reservation(self, name: str) -> dict[str, str] | None: ...

    def create_reservation(self, name: str, node: str, user: str) -> None: ...

    def delete_reservation(self, name: str) -> None: ...

    def cancel_jobs_in(self, name: str) -> None: ...

    def jobs_in(self, name: str) -> list[str]: ...

    def node(self, node: str) -> tuple[str, str] | None: ...

    def drain(self, node: str, reason: str) -> None: ...

    def resume(self, node: str) -> None: ...

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SlurmOps:
    """:class:`Ops` through the real Slurm clients."""

    def user(self) -> str:
        return _user()

    def reservation(self, name: str) -> dict[str, str] | None:
        from mlenv.platforms.slurm import _check, _run, parse_record

        r = _run(show_argv(name))
        if r.returncode != 0 and "not found" in (r.stderr + r.stdout):
            return None
        text = _check(r)
        return parse_record(text.splitlines()[0]) if text.strip() else None

    def create_reservation(self, name: str, node: str, user: str) -> None:
        from mlenv.platforms.slurmnodes import run

        run(create_argv(name, node, user))

    def delete_reservation(self, name: str) -> None:
        from mlenv.platforms.slurmnodes import run

        run(delete_argv(name))

    def cancel_jobs_in(self, name: str) -> None:
        from mlenv.platforms.slurmnodes import run

        run(cancel_argv(name))

    def jobs_in(self, name: str) -> list[str]:
        from mlenv.platforms.slurm import _check, _run

        return _check(_run(jobs_argv(name))).split()

    def node(self, node: str) -> tuple[str, str] | None:
        from mlenv.platforms.slurmnodes import node_state

        return node_state(node)

    def drain(self, node: str, reason: str) -> None:
        from mlenv.platforms.slurmnodes import drain_argv, run

        run(drain_argv(node, reason))

    def resume(self, node: str) -> None:
        from mlenv.platforms.slurmnodes import resume_argv, run

        run(resume_argv(node))

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


# --- the state file -----------------------------------------------------------------------


@dataclass
class State:
    """``<report dir>/recheck/<node>.json``: where one node's re-check stands."""

    path: Path
    doc: dict[str, Any]

    @property
    def node(self) -> str:
        return str(self.doc["node"])

    @property
    def reservation(self) -> str:
        return str(self.doc["reservation"])

    @property
    def reason(self) -> str:
        return str(self.doc["reason"])

    def step(self, step: str, **more: Any) -> None:
        """Record ``step`` (and ``more``) before it is taken; written atomically."""
        self.doc.update(step=step, at=_now(), **more)
        self.doc.setdefault("steps", []).append(step)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.doc, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def done(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _now() -> str:
    from mlenv.quarantine import now_iso

    return now_iso()


def state_path(report_dir: Path, node: str) -> Path:
    return report_dir / STATE_DIR / f"{argv.slurm_node(node)}.json"


def read_state(report_dir: Path, node: str) -> State | None:
    """The node's re-check state left in ``report_dir`` (None: there is none)."""
    path = state_path(report_dir, node)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise InfraError(
            f"{path}: unreadable re-check state ({type(e).__name__}: {e}); node {node} may be "
            f"resumed in reservation {reservation_name(node)}: drain it and delete the "
            "reservation by hand"
        ) from None
    if not isinstance(doc, dict) or doc.get("node") != node:
        raise InfraError(f"{path}: not a re-check state of node {node}")
    doc["reservation"] = reservation_name(node)  # never a name read back from a file
    doc["reason"] = argv.note(str(doc.get("reason") or ""))
    return State(path, doc)


@contextlib.contextmanager
def node_lock(report_dir: Path, node: str) -> Iterator[None]:
    """This process's hold on the node's re-check (``<node>.lock`` beside the state file,
    ``flock``: a killed process lets go of it). Held elsewhere: InfraError, in progress."""
    path = state_path(report_dir, node).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = os.read(fd, 200).decode("utf-8", "replace").strip()
            raise InfraError(
                f"a re-check of node {node} is in progress (reservation "
                f"{reservation_name(node)}; {held or 'another mlenv process'}): nothing started"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"mlenv pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(fd)


# --- the steps ------------------------------------------------------------------------------


def _drained(state: str) -> bool:
    return "DRAIN" in state.upper()


def ours(reason: str, run_id: str) -> bool:
    """Whether a drain reason is the quarantine's of ``run_id`` (as release reads it)."""
    return reason.startswith(f"mlenv {run_id}:")


def restore(ops: Ops, st: State, say: Say) -> None:
    """Steps 4-5 for a re-check stopped anywhere (or ended): the jobs left in the
    reservation cancelled, the node drained with the quarantine's reason (unless someone
    drained it meanwhile: theirs is kept), the reservation deleted, the state file gone.
    A step that fails leaves the file for the next ``recheck``/``release``."""
    name, node = st.reservation, st.node
    if ops.reservation(name) is not None:
        if ops.jobs_in(name):
            ops.cancel_jobs_in(name)
            end = ops.now() + DRAIN_JOBS_WAIT_S
            while ops.jobs_in(name):
                if ops.now() > end:
                    raise InfraError(
                        f"node {node}: the re-check's job in reservation {name} has not ended "
                        f"{DRAIN_JOBS_WAIT_S:.0f} s after scancel; the node stays reserved "
                        "(no other job can start there); run mlenv recheck or release again"
                    )
                ops.sleep(POLL_S)
    now = ops.node(node)
    if now is None:
        raise InfraError(f"node {node}: Slurm does not know it any more; reservation {name} kept")
    state, reason = now
    if not _drained(state):
        st.step("draining")
        ops.drain(node, st.reason)
    elif not ours(reason, str(st.doc.get("quarantined_by"))):
        say(f"node {node}: drained meanwhile by someone else (Reason={reason}): left as it is")
    st.step("drained")
    if ops.reservation(name) is not None:
        ops.delete_reservation(name)
    st.done()


def finish_interrupted(ops: Ops, report_dir: Path, node: str, say: Say) -> bool:
    """A re-check of ``node`` stopped before its end (its state file is there): finished
    (:func:`restore`). Call with :func:`node_lock` held. True when there was one."""
    st = read_state(report_dir, node)
    if st is None:
        return False
    say(
        f"node {node}: finishing the re-check stopped at step {st.doc.get('step')!r} "
        f"({st.doc.get('at')}): reservation {st.reservation}"
        + (f", job {st.doc['job_id']}" if st.doc.get("job_id") else "")
    )
    restore(ops, st, say)
    say(f"node {node}: drained again ({st.reason}); reservation {st.reservation} deleted")
    return True


# (node, reservation, on_job(job id, run id)) → (the node's status in the run, run id)
Suite = Callable[[str, str, Callable[[str, str], None]], tuple[str | None, str]]


def recheck_node(
    ops: Ops,
    report_dir: Path,
    node: str,
    reason: str,
    suite: Suite,
    say: Say,
    *,
    quarantined_by: str,
    held: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> tuple[str, str]:
    """Steps 1-5 on one node; (its status in the re-check run, that run's id).
    InfraError when it could not be re-checked; the node is drained again either way.
    ``held``: a block no signal may cut (restoring the drain)."""
    name = reservation_name(node)
    with node_lock(report_dir, node):
        with held():
            finish_interrupted(ops, report_dir, node, say)
        if ops.reservation(name) is not None:
            raise InfraError(
                f"a re-check of node {node} is in progress (reservation {name} exists, "
                f"not started from {report_dir}): nothing started (wait for it, or, if it "
                f"is left over, drain the node and `scontrol delete ReservationName={name}`)"
            )
        now = ops.node(node)
        if now is None:
            raise InfraError(f"node {node} not re-checked: Slurm does not know it")
        state, current = now
        if not _drained(state) or not ours(current, quarantined_by):
            raise InfraError(
                f"node {node} not re-checked: its drain is no longer run {quarantined_by}'s "
                f"(State={state}, Reason={current}); left as it is"
            )
        user = ops.user()
        st = State(
            state_path(report_dir, node),
            {
                "node": node,
                "reservation": name,
                "reason": reason,
                "user": user,
                "quarantined_by": quarantined_by,
                "started_at": _now(),
            },
        )
        created = finished = False
        status: str | None = None
        rid = ""
        try:
            with held():  # a signal while slurmctld creates it: the reservation is known
                st.step("reserving")
                ops.create_reservation(name, node, user)
                created = True
            st.step("resuming")
            ops.resume(node)
            st.step("resumed")

            def on_job(job: str, run_id: str) -> None:
                st.step("running", job_id=job, run_id=run_id)

            status, rid = suite(node, name, on_job)
            finished = True
        finally:
            with held():
                if created:
                    restore(ops, st, say)
                    if not finished:
                        say(
                            f"node {node}: re-check stopped; drained again ({reason}), "
                            f"reservation {name} deleted"
                        )
                else:  # the reservation was refused: nothing was changed
                    st.done()
    return status or "UNKNOWN", rid


# --- the suite in the reservation -----------------------------------------------------------


def run_suite(
    cfg: Cluster,
    root: Path,
    say: Say,
    *,
    profile: str,
    suite_args: list[str],
    history_root: Path,
    quarantined_by: str,
) -> Suite:
    """The acceptance job for one node, in the reservation: submitted, followed, judged,
    copied back and imported into ``history_root``."""
    from mlenv.platforms import slurm

    def suite(node: str, name: str, on_job: Callable[[str, str], None]) -> tuple[str | None, str]:
        rid = contract.new_run_id()
        say(f"re-check of node {node} (quarantined by run {quarantined_by}): run {rid}")
        sub = slurm.submit(
            cfg,
            root,
            say,
            nodes=1,
            profile=profile,
            suite_args=suite_args,
            run_id=rid,
            sbatch_options=sbatch_options(name, node),
            check_nodes=False,
        )
        on_job(sub.job_id, rid)
        limit = min(slurm.time_limit_s(cfg) + slurm.STARTUP_SLACK_S, 7 * 86400)
        out = slurm.follow(sub, say, timeout_s=limit)
        doc = slurm.judge(cfg, sub, out)
        dest = slurm.copy_back(root, cfg, sub, out.info)
        _import(cfg, dest, rid, history_root, say)
        say(f"re-check run {rid}: {doc.get('verdict')}")
        return contract.node_status(doc, node), rid

    return suite


def _import(cfg: Cluster, folder: Path, rid: str, history_root: Path, say: Say) -> None:
    """The run into the cluster's history under ``history_root`` (as ``mlenv history
    --fetch`` imports a scheduled run): release --after finds it there by its id."""
    from mlenv.acceptance.records import history

    rec: Any = None
    with contextlib.suppress(OSError, ValueError):
        rec = json.loads((folder / history.RECORD_FILE).read_text(encoding="utf-8"))
    if not isinstance(rec, dict) or rec.get("run_id") != rid or rec.get("cluster") != cfg.name:
        rec = history.record_from_folder(folder, cfg.name)
    if rec is None:
        raise InfraError(f"re-check run {rid}: no readable results.json in {folder}")
    added, _ = history.import_records(cfg.name, [(rec, folder)], history_root)
    if added:
        say(f"history: run {rid} added to {history.history_path(history_root, cfg.name)}")


# --- the verb ---------------------------------------------------------------------------------


def recheck(
    ops: Ops,
    report_dir: Path,
    run_id: str,
    nodes: dict[str, str],
    suite: Suite,
    say: Say,
    warn: Say,
    *,
    held: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> int:
    """Every node (name → the quarantine's drain reason) in turn; the exit code over all."""
    failed: list[str] = []
    errors: list[str] = []
    for node, reason in nodes.items():
        try:
            status, rid = recheck_node(
                ops, report_dir, node, reason, suite, say, quarantined_by=run_id, held=held
            )
        except InfraError as e:
            warn(f"error: {e}")
            errors.append(node)
            continue
        if status == "PASS":
            say(
                f"node {node}: PASS in re-check run {rid}, drained again until released; "
                f"release it with: mlenv release {run_id} --after {rid}"
            )
        else:
            say(f"node {node}: {status} in re-check run {rid}; it stays quarantined")
            failed.append(node)
    say(
        f"re-check of run {run_id}'s quarantine: {len(nodes) - len(failed) - len(errors)} "
        f"node(s) passed, {len(failed)} did not, {len(errors)} not re-checked"
    )
    if errors:
        return EXIT_ERROR
    return EXIT_FAIL if failed else EXIT_OK


def finish_all(ops: Ops, report_dir: Path, nodes: list[str], say: Say) -> None:
    """``release``: the re-checks of ``nodes`` that were stopped, finished first (the node
    drained with our reason again, so release judges it as quarantine left it); a
    re-check still running refuses the release (InfraError)."""
    for node in nodes:
        if not state_path(report_dir, node).is_file():
            continue
        with node_lock(report_dir, node):
            finish_interrupted(ops, report_dir, node, say)
