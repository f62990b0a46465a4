"""A pod's rank of the ssh-less launch, started detached and followed by byte offset.

``mlenv launch --torchrun`` held one ``kubectl exec`` stream per pod for the whole run
(254 at once at 256 pods), and a dropped stream killed that pod's rank. Now a short exec
per pod (``run-torchrun --detach``) starts the rank under a supervisor and returns; the
operator follows pod 0's output alone (``run-follow``), asks the others how they ended
(``run-state``) and stops them all on Ctrl-C (``run-stop``).

Everything about one run lives in ``<state dir>/runs/<run id>/``:

- ``output``: the supervised process's stdout and stderr (``run-torchrun`` itself and the
  torchrun it starts), appended as they come;
- ``pid``: the supervised process's pid, written by that process once it runs: this is
  what "started" means. It leads its own session and process group (no terminal, stdin
  from /dev/null, output to the file: nothing the exec's end does reaches it);
- ``exit``: its exit status, written (atomically) as it ends.

Starting is idempotent: the run's folder is created with ``mkdir``, which one caller wins;
a retried start of the same run id finds it and only waits for the pid. ``run-follow``
prints each line of ``output`` from a byte offset as a frame that carries the offset
after it, then one frame with the exit status, so a follower whose stream dropped
re-opens it where it was: no line lost or repeated. Stdlib only (runs in the pods).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from mlenv.contract import FOLLOW_EXIT, FOLLOW_LOST, FOLLOW_NONE, FOLLOW_OUT, follow_lines
from mlenv.errors import EXIT_ERROR, InfraError, Interrupted

RUNS = "runs"
OUTPUT, PID, EXIT = "output", "pid", "exit"
# how long a start waits for the supervised process to write its pid (a cold Python
# importing the package on a loaded node takes seconds)
START_WAIT_S = 60.0
# how often a follower looks for new output and for the exit file
FOLLOW_POLL_S = 0.2
READ_CHUNK = 1 << 20

# The frames of ``run-follow`` (mlenv.contract.FOLLOW_OUT: the operator reads them back)
FRAME_OUT, FRAME_EXIT = FOLLOW_OUT, FOLLOW_EXIT
LOST, NONE = FOLLOW_LOST, FOLLOW_NONE


def run_dir(state_dir: str, run_id: str) -> str:
    """``<state dir>/runs/<run id>`` (the run id is checked by the caller: a plain name)."""
    return os.path.join(state_dir, RUNS, run_id)


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(text)
    os.replace(tmp, path)


def read_pid(d: str) -> int | None:
    """The supervised process's pid once it wrote it, else None."""
    try:
        with open(os.path.join(d, PID), encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def read_exit(d: str) -> int | None:
    """The run's exit status once it ended, else None."""
    try:
        with open(os.path.join(d, EXIT), encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def alive(pid: int, run_id: str, proc: str = "/proc") -> bool:
    """Whether ``pid`` is still this run's supervised process: not gone, not a zombie
    (the pod's init may never reap it) and not a recycled pid (its command line names
    the run id). Without /proc, whether the pid exists."""
    base = os.path.join(proc, str(pid))
    if not os.path.isdir(proc):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        with open(os.path.join(base, "stat"), "rb") as f:
            stat = f.read()
        with open(os.path.join(base, "cmdline"), "rb") as f:
            cmdline = f.read().split(b"\0")
    except OSError:
        return False
    state = stat.rsplit(b")", 1)[-1].split()[:1]
    return state != [b"Z"] and run_id.encode() in cmdline


@dataclass(frozen=True)
class Started:
    """What a start found: the supervised process's pid, and whether this call started it."""

    pid: int
    fresh: bool


def start(
    state_dir: str,
    run_id: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    wait_s: float = START_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Started:
    """Start ``argv`` (the supervised ``run-torchrun``) detached for ``run_id``, or find it
    started; return once its pid file is written. InfraError (exit 3) when it ends or
    does not say its pid within ``wait_s``, naming the output's last line."""
    runs = os.path.join(state_dir, RUNS)
    os.makedirs(runs, mode=0o700, exist_ok=True)
    d = run_dir(state_dir, run_id)
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        return Started(_wait_pid(d, run_id, None, wait_s, sleep), fresh=False)
    fd = os.open(os.path.join(d, OUTPUT), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session and group: the exec's end never reaches it
        )
    except OSError as e:
        _write_atomic(os.path.join(d, EXIT), f"{EXIT_ERROR}\n")
        raise InfraError(f"run {run_id}: could not start {argv[0]}: {e.strerror}") from None
    finally:
        os.close(fd)
    return Started(_wait_pid(d, run_id, proc, wait_s, sleep), fresh=True)


def _wait_pid(
    d: str,
    run_id: str,
    proc: subprocess.Popen[bytes] | None,
    wait_s: float,
    sleep: Callable[[float], None],
) -> int:
    end = time.monotonic() + wait_s
    while True:
        pid = read_pid(d)
        if pid is not None:
            return pid
        rc = proc.poll() if proc is not None else read_exit(d)
        if rc is not None:
            # ended before it said its pid (it could not import the package, say): its
            # status stays for the follower, and the start says why
            if proc is not None and read_exit(d) is None:
                _write_atomic(os.path.join(d, EXIT), f"{rc}\n")
            raise InfraError(
                f"run {run_id} ended (status {rc}) before it started: {last_line(d) or 'no output'}"
            )
        if time.monotonic() >= end:
            raise InfraError(
                f"run {run_id} did not start within {wait_s:g} s (no pid in {d}): "
                f"{last_line(d) or 'no output'}"
            )
        sleep(0.05)


def last_line(d: str, limit: int = 4096) -> str:
    """The output's last non-empty line (what a pod's failure is named by)."""
    try:
        with open(os.path.join(d, OUTPUT), "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            tail = f.read()
    except OSError:
        return ""
    lines = [ln.strip() for ln in tail.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# -- the supervised process --------------------------------------------------------------


@contextlib.contextmanager
def supervised(d: str) -> Iterator[Callable[[int], None]]:
    """In the supervised process: write the pid file (the run has started), turn SIGTERM
    and SIGHUP into :class:`Interrupted` as Ctrl-C is (the launcher then stops torchrun's
    group and the job's report is finalised), and write the exit file when the block
    ends. Yields the setter of the status the exit file will hold."""
    status = [EXIT_ERROR]  # an exception nobody mapped is an error, never a pass

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise Interrupted("SIGINT" if signum == signal.SIGINT else "SIGTERM")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    _write_atomic(os.path.join(d, PID), f"{os.getpid()}\n")

    def set_status(rc: int) -> None:
        status[0] = rc

    try:
        yield set_status
    finally:
        _write_atomic(os.path.join(d, EXIT), f"{status[0]}\n")
        for s, h in old.items():
            signal.signal(s, h)


# -- following ---------------------------------------------------------------------------


def follow(
    state_dir: str,
    run_id: str,
    offset: int,
    write: Callable[[str], None],
    *,
    poll_s: float = FOLLOW_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    is_alive: Callable[[int, str], bool] = alive,
) -> None:
    """Write the run's output from byte ``offset`` as frames (one ``write`` per line,
    without its newline), then the exit frame once the run has ended and everything
    before it was written."""
    d = run_dir(state_dir, run_id)
    if not os.path.isdir(d):
        write(f"{FRAME_EXIT}{NONE}")
        return
    pos, pending = offset, b""
    path = os.path.join(d, OUTPUT)
    while True:
        # the exit file first: output written before it is then all in the file
        rc = read_exit(d)
        pid = read_pid(d)
        gone = rc is None and pid is not None and not is_alive(pid, run_id)
        if gone:
            rc = read_exit(d)  # it may have ended between the two looks
        with open(path, "rb") as f:
            f.seek(pos + len(pending))
            while chunk := f.read(READ_CHUNK):
                pending += chunk
                lines, used = follow_lines(pending, pos, final=False)
                for end, text in lines:
                    write(f"{FRAME_OUT}{end} {text}")
                pos, pending = pos + used, pending[used:]
        if rc is not None or gone:
            for end, text in follow_lines(pending, pos, final=True)[0]:
                write(f"{FRAME_OUT}{end} {text}")
            write(f"{FRAME_EXIT}{rc if rc is not None else LOST}")
            return
        sleep(poll_s)


# -- state and stop ----------------------------------------------------------------------


def state(state_dir: str, run_id: str, is_alive: Callable[[int, str], bool] = alive) -> str:
    """One line: ``exited STATUS LAST-LINE``, ``running PID``, ``starting``,
    ``lost LAST-LINE`` (the supervisor died without a status) or ``none``."""
    d = run_dir(state_dir, run_id)
    if not os.path.isdir(d):
        return NONE
    rc = read_exit(d)
    if rc is not None:
        return f"exited {rc} {last_line(d)}".rstrip()
    pid = read_pid(d)
    if pid is None:
        return "starting"
    if is_alive(pid, run_id):
        return f"running {pid}"
    rc = read_exit(d)
    return f"exited {rc} {last_line(d)}".rstrip() if rc is not None else f"{LOST} {last_line(d)}"


def stop(
    state_dir: str,
    run_id: str,
    *,
    wait_s: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
    is_alive: Callable[[int, str], bool] = alive,
) -> str:
    """SIGINT to the run's supervised process group (it stops torchrun's group as a
    Ctrl-C at a launcher does, and the job's report is finalised); one line saying what
    was found. A run still starting gets ``wait_s`` to say its pid."""
    d = run_dir(state_dir, run_id)
    if not os.path.isdir(d):
        return "no such run"
    end = time.monotonic() + wait_s
    while (pid := read_pid(d)) is None and read_exit(d) is None and time.monotonic() < end:
        sleep(0.05)
    if read_exit(d) is not None:
        return "already ended"
    if pid is None or not is_alive(pid, run_id):
        return "not running"
    try:
        os.killpg(pid, signal.SIGINT)
    except ProcessLookupError:
        return "not running"
    return f"stopped (SIGINT to process group {pid})"
