"""Run the acceptance suite on this machine: N ranks through the DeepSpeed launcher.

``mlenv acceptance --local`` is a thin front for :func:`run_local`: this module owns the
launcher command line, the ranks' environment, the process group it starts and stops,
and the recovery of a report when rank 0 died before writing ``results.json`` (the
results gathered so far are kept, the verdict is ERROR).
"""

from __future__ import annotations

import ast
import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any, Literal, TextIO

from mlenv.acceptance.core.cpus import threads_per_rank
from mlenv.acceptance.records.rundir import hung_note
from mlenv.acceptance.run.world import HALTED, proc_stat
from mlenv.contract import EXIT_ERROR, RESULTS_JSONL, read_results
from mlenv.errors import InfraError, Interrupted

STARTUP_SLACK_S = 120.0  # launcher + torch import + rendezvous, on a busy 2-core machine


def gpu_count() -> int:
    """GPUs on this machine (nvidia-smi; importing torch here would slow every CLI call).
    The same count pod-init uses for the hostfile's slots, minus its /dev fallback: a
    machine without nvidia-smi runs CPU ranks here."""
    from mlenv.pod.hostfile import count_gpus

    if shutil.which("nvidia-smi") is None:
        return 0
    return count_gpus(os.environ, dev_glob="/nonexistent")


def _deepspeed_cmd() -> list[str]:
    """The DeepSpeed launcher next to this interpreter, else ``python -m deepspeed.launcher.runner``."""
    exe = Path(sys.executable).with_name("deepspeed")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("deepspeed")
    return [found] if found else [sys.executable, "-m", "deepspeed.launcher.runner"]


def build_command(
    nproc: int, gpus: int, port: int, report_dir: Path, suite_args: list[str]
) -> list[str]:
    """The launcher command line (an argument list, never a shell string).

    ``--num_accelerators N`` sets the slots per host even on CPU, where DeepSpeed would
    otherwise count NUMA nodes; a hostfile path that does not exist keeps the launch
    local even on a machine with ``/job/hostfile``.
    """
    flag = "--num_gpus" if gpus else "--num_accelerators"
    return [
        *_deepspeed_cmd(),
        "--hostfile",
        str(report_dir / ".no-hostfile"),
        flag,
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
        "--module",
        "mlenv.acceptance",
        *suite_args,
    ]


def extensions_dir() -> str:
    """Where DeepSpeed builds its CPU op: outside the checkout (it survives a clean clone) and
    one folder per Python environment, since the op links that environment's torch and two
    venvs sharing a folder rebuild over each other's lock (the Makefile uses the same path)."""
    return str(Path.home() / ".cache" / "mlenv" / "torch_extensions" / sys.prefix.replace("/", "_"))


def launch_env(nproc: int, gpus: int) -> dict[str, str]:
    """The ranks' environment: CPU accelerator without GPUs, extension cache outside the checkout."""
    env = dict(os.environ)
    if not gpus:
        env["DS_ACCELERATOR"] = "cpu"
        # N ranks on C cores: more threads than cores makes every rank slower. C is the
        # cores this process may run on (a cpuset), not the machine's (core/cpus.py).
        env.setdefault("OMP_NUM_THREADS", str(threads_per_rank(nproc, {})))
    env.setdefault("TORCH_EXTENSIONS_DIR", extensions_dir())
    # this venv's bin folder first, so an op that is still built at start is built
    # with this venv's ninja whether mlenv came from `make` (.venv/bin not on PATH: the
    # system's ninja) or from an activated venv; two ninjas rebuilt the op (30-50 s) at
    # every switch. Not for an interpreter outside a venv (its bin is /usr/bin or so).
    if sys.prefix != sys.base_prefix:
        bindir = str(Path(sys.executable).parent)
        parts = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bindir]
        env["PATH"] = os.pathsep.join([bindir, *parts])
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def validate(
    profile: str,
    checks: str,
    baseline: str | None,
    options: Path | None,
    deadline_s: float | None = None,
) -> int:
    """Check flags and files before launching anything; returns the number of checks.
    ``deadline_s`` (the per-check deadline, 0 or None: the profile's): every check must fit."""
    from mlenv.acceptance.core import profiles
    from mlenv.acceptance.core.profiles import check_deadlines
    from mlenv.acceptance.core.registry import load, select_checks
    from mlenv.acceptance.judging import baselines

    overrides = profiles.load_options_file(options) if options else {}
    profiles.resolve(profile, overrides)  # every check's options, typed and located (InputError)
    if baseline:
        baselines.resolve(baseline, [])
    load()
    selected = select_checks(checks)
    if deadline_s is not None:
        check_deadlines(selected, overrides, profile, deadline_s or profiles.DEADLINES[profile])
    return len(selected)


def recover(
    report_dir: Path,
    launcher_rc: int | None,
    run_id: str = "unknown",
    interrupted: str | None = None,
    hung: str | None = None,
) -> dict[str, Any]:
    """Finalise a report from ``results.jsonl`` when rank 0 died before ``results.json``
    (``launcher_rc`` None: no launcher to ask, ``mlenv finalize`` after a SIGKILL; ``run_id``:
    the id the run was started with, when run.json is gone too; ``interrupted``: the signal
    someone stopped the run with, verdict INTERRUPTED; ``hung``: ``rank 0 (host) hung: …``,
    why rank 0 could not finalise it, from :class:`RankWatch` or a rank's
    ``rundir.HUNG_FILE``: the first reason, naming the check it hung in)."""
    from mlenv.acceptance.reports import RunMeta, finalize
    from mlenv.acceptance.reports.document import now_iso
    from mlenv.acceptance.reports.jsonl import read_partial

    results, notes = read_partial(report_dir / RESULTS_JSONL)
    meta = RunMeta.read(report_dir) or RunMeta(
        run_id=run_id,
        started=now_iso(),
        profile="",
        checks=[],
        world={"nodes": None, "ranks": None, "hosts": []},
    )
    done = {r.name for r in results}
    missing = [c for c in meta.checks if c not in done]
    if launcher_rc is None:
        why = f"the run was not finalised (its processes were killed); {len(results)} result(s) kept from results.jsonl"
    else:
        why = (
            f"the run ended (launcher exit {launcher_rc}) before rank 0 wrote results.json; "
            f"{len(results)} result(s) kept from results.jsonl"
        )
    if hung:
        who, _, what = hung.partition(": ")
        why = (
            f"{who}{f' during {missing[0]}' if missing else ''}: {what}; the run was stopped and its report "
            f"finalised without rank 0, {len(results)} result(s) kept from results.jsonl"
        )
    if missing:
        why += f"; not measured: {', '.join(missing)}"
    return finalize(
        report_dir,
        meta,
        results,
        notes=[] if interrupted else [why, *notes],
        interrupted=interrupted,
    )


def stop(proc: subprocess.Popen[str]) -> None:
    """End the launcher's whole process group (we started it in its own session), then
    every process left in it: nothing of the run outlives the CLI. A SIGCONT follows the
    SIGTERM: a stopped rank would hold the SIGTERM pending, and the launcher wait for it."""
    for sig, wait in ((signal.SIGTERM, 35.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
            os.killpg(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    end_group(proc.pid)


def end_group(pgid: int, grace_s: float = 10.0) -> None:
    """Wait up to ``grace_s`` for the processes of group ``pgid`` (ranks still writing the
    report after the launcher left), then SIGKILL what is left."""
    end = time.monotonic() + grace_s
    while True:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        if not _live_members(
            pgid
        ):  # zombies only, not yet reaped by init: nothing left to wait for
            return
        if time.monotonic() >= end:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            return
        time.sleep(0.1)


def _live_members(pgid: int) -> bool:
    """Whether group ``pgid`` has a process that is not a zombie (True where ``/proc`` cannot tell)."""
    try:
        entries = [d for d in Path("/proc").iterdir() if d.name.isdigit()]
    except OSError:
        return True
    for d in entries:
        try:
            raw = (d / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # gone meanwhile
        rest = raw[raw.rindex(")") + 2 :].split()
        if int(rest[2]) == pgid and rest[0] not in "ZX":
            return True
    return False


@dataclass
class _Rank:
    """A rank process of the run, as :class:`RankWatch` last saw it."""

    pid: int
    start: int
    host: str
    state: str = ""  # its /proc state letter; "" once it is gone
    halted_since: float | None = None  # stopped (T, t) or blocked (D) since (monotonic)
    halted: str = ""  # how: world.HALTED's words for its state then
    halted_for: float = 0.0  # for how long, when last seen


class RankWatch:
    """The CLI's eye on the ranks it launched, through ``/proc``.

    A stopped process (SIGSTOP, a debugger) stops beating like a dead one, and a stopped
    rank 0 freezes the run's store with it, so no rank can report it. Polled every
    ``poll_s``, acting on:

    - rank 0 stopped (``T``, ``t``) or blocked in the kernel (``D``) for ``hung_after_s``
      (the check's deadline): the launcher's group is killed and :attr:`hung` names rank 0,
      its host and its state; the CLI finalises the report from ``results.jsonl``;
    - a rank left ``rundir.HUNG_FILE`` (it gave up on a silent rank 0): the same;
    - a rank stopped while another rank of the run has ended: no one is left to run with,
      and a stopped process cannot take the launcher's SIGTERM (the launcher would wait
      30 s, then kill it): it is killed at once.

    Ranks are the processes of the launcher's session (``group``) that run ``-m
    mlenv.acceptance`` with ``RANK`` in their environment.
    """

    def __init__(
        self,
        group: int,
        report_dir: Path,
        hung_after_s: float,
        nproc: int = 0,
        on_hung: Callable[[str], None] | None = None,
        poll_s: float = 0.5,
    ) -> None:
        self.group, self.report_dir, self.hung_after_s = group, report_dir, hung_after_s
        self.nproc, self.on_hung, self.poll_s = nproc, on_hung, poll_s
        self.ranks: dict[int, _Rank] = {}
        self._hung: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlenv-rank-watch", daemon=True)

    def start(self) -> RankWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (before the CLI stops the run itself, and at its end)."""
        self._done.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    @property
    def hung(self) -> str | None:
        """``rank 0 (host) hung: …`` when rank 0 was found hung, or was still stopped when last seen."""
        if self._hung is not None:
            return self._hung
        r0 = self.ranks.get(0)
        if r0 is not None and r0.halted_since is not None:
            return self._rank0_line(r0)
        return None

    @staticmethod
    def _rank0_line(r0: _Rank) -> str:
        return f"rank 0 ({r0.host}) hung: its process, pid {r0.pid}, has been {r0.halted} for {r0.halted_for:.0f} s"

    def _run(self) -> None:
        while not self._done.wait(self.poll_s):
            try:
                if self.nproc <= 0 or len(self.ranks) < self.nproc:
                    self._find()
                now = time.monotonic()
                self._look(now)
                r0 = self.ranks.get(0)
                if (
                    r0 is not None
                    and r0.halted_since is not None
                    and r0.halted_for >= self.hung_after_s
                ):
                    self._stop_run(
                        self._rank0_line(r0) + f", past the check's deadline of "
                        f"{self.hung_after_s:g} s"
                    )
                    return
                note = hung_note(self.report_dir)
                if note is not None:
                    self._stop_run(note)
                    return
                if any(not r.state for r in self.ranks.values()):
                    self._kill_halted()
            except Exception:  # a look at /proc that failed must not end the run: look again
                continue

    def _find(self) -> None:
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) in {r.pid for r in self.ranks.values()}:
                continue
            try:
                raw = (d / "stat").read_text(encoding="ascii", errors="replace")
                if int(raw[raw.rindex(")") + 2 :].split()[3]) != self.group:
                    continue
                if b"\0-m\0mlenv.acceptance\0" not in (d / "cmdline").read_bytes():
                    continue  # the launcher's own processes name it after --module
                env = dict(
                    kv.split("=", 1)
                    for kv in (d / "environ").read_bytes().decode(errors="replace").split("\0")
                    if "=" in kv
                )
                rank = int(env["RANK"])
            except (OSError, ValueError, KeyError, IndexError):
                continue
            st = proc_stat(int(d.name))
            if st is not None and rank not in self.ranks:
                self.ranks[rank] = _Rank(
                    int(d.name), st[1], env.get("MLENV_HOST") or socket.gethostname()
                )

    def _look(self, now: float) -> None:
        for r in self.ranks.values():
            st = proc_stat(r.pid)
            if st is None or st[1] != r.start or st[0] in "ZX":
                r.state = ""  # gone: what it was doing last stays said
                continue
            r.state = st[0]
            if r.state in HALTED:
                r.halted_since = r.halted_since if r.halted_since is not None else now
                r.halted, r.halted_for = HALTED[r.state][1], now - r.halted_since
            else:
                r.halted_since, r.halted, r.halted_for = None, "", 0.0

    def _stop_run(self, line: str) -> None:
        self._hung = line
        if self.on_hung is not None:
            self.on_hung(line)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.group, signal.SIGKILL)
        self._continue_all()

    def _kill_halted(self) -> None:
        for rank, r in self.ranks.items():
            if r.state in ("T", "t"):
                if rank == 0:
                    self._hung = self._rank0_line(r) + ", and the other ranks have left"
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(r.pid, signal.SIGKILL)
                    os.kill(r.pid, signal.SIGCONT)

    def _continue_all(self) -> None:
        for r in self.ranks.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(r.pid, signal.SIGCONT)


_SIGNAL_NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP (CI cancelling, ``timeout``, a closed terminal) all raise
    :class:`Interrupted`, so the run is stopped and finalised whichever arrives. After the
    first, the three are ignored until the block ends: a second signal must not cut the
    stopping and finalising short. Only in the main thread (where handlers can be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = _SIGNAL_NAMES.get(signal.Signals(signum), "SIGTERM")
        if _HOLD.active:  # raised when interrupts_held's block ends
            # Not "ignore" yet: a process forked in the block would inherit it across exec
            # and shrug off the SIGTERM that stops it. A second signal only repeats this.
            _HOLD.pending = _HOLD.pending or name
            return
        ignore_signals()
        raise Interrupted(name)

    old = {s: signal.signal(s, on_signal) for s in _SIGNAL_NAMES}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class _Hold:
    active: bool = False
    pending: str | None = None


_HOLD = _Hold()


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Inside :func:`signals_as_interrupts`: a signal that arrives in this block is raised as
    :class:`Interrupted` when the block ends, not in the middle of it. Starting the launcher
    is such a block: a Ctrl-C between the fork and ``Popen`` returning left a launcher the
    stopping code never knew of, running after the run was recorded."""
    _HOLD.active = True
    try:
        yield
    finally:
        _HOLD.active = False
        pending, _HOLD.pending = _HOLD.pending, None
        if pending is not None:
            ignore_signals()
            raise Interrupted(pending)


def ignore_signals() -> None:
    """From here on (stopping, finalising) a signal must not cut the run's record short;
    :func:`signals_as_interrupts` restores the handlers when its block ends."""
    if threading.current_thread() is threading.main_thread():
        for s in _SIGNAL_NAMES:
            signal.signal(s, signal.SIG_IGN)


@dataclass
class LocalRun:
    """What a finished local run left: its results document and how it ended."""

    doc: dict[str, Any]
    recovered: bool  # rank 0 died; the document was finalised here from results.jsonl
    wall_s: float
    timed_out: bool
    interrupted: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM, SIGHUP)
    unwritten: str | None = (
        None  # why the report folder holds no results.json (a full disk): doc is in memory only
    )


LAUNCHER_LOG = "launcher.log"
Level = Literal["quiet", "normal", "verbose"]


class ConsoleFilter:
    """What of the launcher's output reaches the terminal; launcher.log gets all.

    - ``normal``: progress and the verdict: rank 0's ``[acceptance]`` lines (a line per
      check, run-level notes, history), the verdict block (``verdict:``, its ``  - ``
      reasons, ``reports:``) and ``error:`` lines. Everything else is detail for the log:
      nccl-tests tables, DeepSpeed's argv and logger lines (its ``[ERROR] sigkill_handler``
      after a FAIL too), FutureWarnings, tracebacks of ranks the verdict already explains.
    - ``quiet`` (``-q``): the verdict block and ``error:`` lines only.
    - ``verbose`` (``-v``): every line, as the launcher wrote it.
    """

    def __init__(self, level: Level = "normal") -> None:
        self.level = level
        self._in_verdict = False

    def shown(self, line: str) -> bool:
        """Whether ``line`` reaches the terminal (call once per line, in order)."""
        if self.level == "verbose":
            return True
        text = line.rstrip("\n")
        if text.startswith("verdict: "):
            self._in_verdict = True
            return True
        if self._in_verdict and text.startswith(("  - ", "reports: ", "    ")):
            return True  # a reason, the reports line, or the continuation of a long one
        self._in_verdict = False
        if text.startswith("error: "):
            return True
        return self.level == "normal" and text.startswith("[acceptance]")


def _stamp(line: str) -> str:
    return f"{time.strftime('%H:%M:%S')} {line}"


def _pump(stream: IO[str], log: IO[str], out: TextIO | None, console: ConsoleFilter) -> None:
    """Copy the launcher's output: every line to the log, with the wall time in front
    (HH:MM:SS; the terminal gets none: they broke the nccl-tests tables' columns), and
    what ``console`` shows to ``out``."""
    logging = True
    for line in stream:
        if logging:
            try:
                log.write(_stamp(line))
                log.flush()
            except (OSError, ValueError):  # a full disk: the console still gets what it shows; the
                logging = False  # run's own record of it is the CLI's one line at the end
        if out is not None and console.shown(line):
            try:
                out.write(line)
                out.flush()
            except (
                BrokenPipeError,
                ValueError,
            ):  # `| head`: the reader left; the log keeps everything
                out = None


def first_run_notice(gpus: int, env: dict[str, str]) -> str | None:
    """The one-time DeepSpeed CPU op build, said before the silence it causes."""
    if gpus:
        return None
    root = Path(env.get("TORCH_EXTENSIONS_DIR", ""))
    if root and any(root.glob("deepspeed_shm_comm/*.so")):
        return None
    return "building DeepSpeed's CPU communication op (first run on this machine only, ~30 s)…"


def ops_installed(op: str = "deepspeed_shm_comm") -> bool:
    """Whether the DeepSpeed of this environment ships ``op`` compiled (``make venv``
    installs it so): read from its ``git_version_info_installed.py`` without importing
    DeepSpeed (which imports torch), so the CLI can ask before it starts anything."""
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        return False
    for folder in spec.submodule_search_locations:
        try:
            text = (Path(folder) / "git_version_info_installed.py").read_text(encoding="utf-8")
        except OSError:
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "installed_ops" for t in node.targets
            ):
                try:
                    ops = ast.literal_eval(node.value)
                except ValueError:
                    return False
                return isinstance(ops, dict) and bool(ops.get(op))
    return False


# what to install, said where the compiler is missing (README "prerequisites" too).
COMPILER_PACKAGES = "Debian/Ubuntu: apt-get install g++; Fedora/RHEL: dnf install gcc-c++; macOS: xcode-select --install"


def compiler_problem(
    gpus: int, env: dict[str, str], *, installed: bool | None = None
) -> str | None:
    """Why DeepSpeed's CPU op cannot be built here (no C++ compiler), or None.

    Asked only when the op is still to be built at start: CPU ranks, a DeepSpeed without
    the op compiled in (``installed``, default :func:`ops_installed`) and nothing in the
    extension cache. Without a compiler such a run ended in ERROR with a 700-character
    compiler line from every rank.
    """
    if first_run_notice(gpus, env) is None:
        return None
    if installed if installed is not None else ops_installed():
        return None
    cxx = env.get("CXX", "").strip() or "c++"
    if shutil.which(cxx, path=env.get("PATH")):
        return None
    return (
        f"no C++ compiler ({cxx} is not on PATH): DeepSpeed builds its CPU op with one on "
        f"the first run; install it ({COMPILER_PACKAGES}) or set CXX"
    )


def run_local(
    cmd: list[str],
    env: dict[str, str],
    report_dir: Path,
    budget_s: float,
    on_timeout: Any = None,
    *,
    level: Level = "normal",
    out: TextIO | None = None,
    run_id: str = "unknown",
    on_interrupt: Callable[[str], None] | None = None,
    hung_after_s: float | None = None,
    nproc: int = 0,
    on_hung: Callable[[str], None] | None = None,
) -> LocalRun:
    """Start the launcher in its own session, wait at most ``budget_s``, then read (or recover)
    the report. InfraError when no report at all was produced.

    The launcher's output goes to ``report_dir/launcher.log`` in full (its command line
    first, each line behind the wall time) and to ``out`` (default stdout) as
    :class:`ConsoleFilter` at ``level`` decides. When no report came out, the log's last
    lines follow on ``out`` (unless ``verbose`` showed them already).

    Ctrl-C, SIGTERM and SIGHUP (``on_interrupt`` is told which) stop the run the same way:
    the signal's name is left for rank 0 (``rundir.mark_interrupted``), the launcher's group
    gets SIGTERM (rank 0 finalises the report, verdict INTERRUPTED), and whatever is left
    of the group when the launcher has gone is killed, so nothing of the run outlives this
    call. A second signal while that happens is ignored.

    With ``hung_after_s`` (the check's deadline) a :class:`RankWatch` watches the ``nproc``
    ranks: a rank 0 stopped that long is named hung (``on_hung`` is told), the run stopped,
    and the report finalised here."""
    console = out or sys.stdout
    t0 = time.monotonic()
    timed_out = False
    interrupted: str | None = None
    proc: subprocess.Popen[str] | None = None
    log = _open_log(report_dir, cmd)
    pump: threading.Thread | None = None
    watch: RankWatch | None = None
    with signals_as_interrupts():
        try:
            with interrupts_held():
                proc = subprocess.Popen(
                    cmd,
                    env=env,
                    start_new_session=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    bufsize=1,
                    errors="replace",
                )
            assert proc.stdout is not None
            pump = threading.Thread(
                target=_pump, args=(proc.stdout, log, console, ConsoleFilter(level)), daemon=True
            )
            pump.start()
            if hung_after_s is not None:
                watch = RankWatch(proc.pid, report_dir, hung_after_s, nproc, on_hung).start()
            proc.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            if on_timeout is not None:
                on_timeout(budget_s)
        except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM or SIGHUP (signals_as_interrupts)
            interrupted = e.signal_name if isinstance(e, Interrupted) else "SIGINT"
            from mlenv.acceptance.records.rundir import mark_interrupted

            mark_interrupted(report_dir, interrupted)  # before the SIGTERM: rank 0 reads it
            if on_interrupt is not None:
                on_interrupt(interrupted)
        ignore_signals()
        if watch is not None:  # from here on the CLI stops what is left itself
            watch.stop()
        try:
            # proc is None only when the signal came before the launcher started: nothing to stop
            if proc is not None and (timed_out or interrupted):
                stop(proc)
            elif proc is not None:
                end_group(proc.pid)
            if (
                pump is not None
            ):  # a rank that left the group may still hold the pipe: never wait long
                pump.join(timeout=10)
        finally:
            with contextlib.suppress(OSError):  # flushing the last lines into a full disk
                log.close()
        rc = EXIT_ERROR if timed_out or proc is None else proc.returncode
        wall = time.monotonic() - t0
        hung = (watch.hung if watch is not None else None) or hung_note(report_dir)
        run = _report(report_dir, rc, run_id, interrupted, wall, timed_out, hung)
        if run is not None:
            return run
    if level != "verbose":
        _tail(report_dir / LAUNCHER_LOG, console)
    raise InfraError(
        f"the suite produced no report in {report_dir} (launcher exit {rc}); the last lines "
        f"of {report_dir / LAUNCHER_LOG} are above (-v shows all of it as it happens)"
    )


def _open_log(report_dir: Path, cmd: list[str]) -> IO[str]:
    """``launcher.log``, its first line the launcher's command; ``/dev/null`` when the folder
    cannot take it (a full disk: the console still shows its lines; the run ends in one line)."""
    try:
        log: IO[str] = (report_dir / LAUNCHER_LOG).open("w", encoding="utf-8")
    except OSError:
        log = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - run_local closes it
    with contextlib.suppress(OSError, ValueError):
        log.write(_stamp(f"launcher: {shlex.join(cmd)}\n"))
    return log


def _report(
    report_dir: Path,
    rc: int,
    run_id: str,
    interrupted: str | None,
    wall: float,
    timed_out: bool,
    hung: str | None = None,
) -> LocalRun | None:
    """The run's report: rank 0's results.json, else recovered from what the ranks left, else
    judged in memory when the folder is full (``unwritten`` says why); None: nothing to go on."""
    doc = read_results(report_dir)
    if doc is not None:
        return LocalRun(doc, False, wall, timed_out, interrupted)
    from mlenv.acceptance.reports.document import MIN_REPORT_FREE, ReportWriteError, free_space

    try:
        # a stop before rank 0 wrote run.json is still a run someone stopped: INTERRUPTED,
        # recorded like any other, not "no report"
        if (
            interrupted
            or (report_dir / "results.jsonl").exists()
            or (report_dir / "run.json").exists()
        ):
            return LocalRun(
                recover(report_dir, rc, run_id, interrupted, hung),
                True,
                wall,
                timed_out,
                interrupted,
            )
        free = free_space(report_dir)
        if free is not None and free < MIN_REPORT_FREE:  # the ranks met a full disk before run.json
            # raises ReportWriteError, unless space came back (then an ERROR report saying so)
            return LocalRun(
                recover(report_dir, rc, run_id, interrupted, hung),
                True,
                wall,
                timed_out,
                interrupted,
            )
    except (
        ReportWriteError
    ) as e:  # judged in memory; the caller records it and says why in one line
        return LocalRun(
            e.doc,
            True,
            wall,
            timed_out,
            interrupted,
            unwritten=None if e.results_written else str(e),
        )
    return None


def _tail(log: Path, out: TextIO, lines: int = 15) -> None:
    """The end of the launcher's log: why no report came out is there, not in the verdict."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
        out.write("".join(f"  {ln}\n" for ln in text))
        out.flush()
    except (OSError, ValueError):  # no log, or the reader of `out` has gone
        pass
