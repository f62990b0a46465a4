"""A run's own report folder: one folder per run, never reused, never overwritten.

By default ``mlenv acceptance --local`` writes to ``acceptance-report/<run-id>/`` and
points ``acceptance-report/latest`` at it (a symlink for humans: nothing of ours reads
through it). An explicit ``--report-dir X`` is the run's own folder: :func:`claim`
refuses it before anything starts when X already holds another run's results or is in
use by a live run (``.mlenv-run.lock`` holds the pid of the CLI that claimed it). The
claim is taken under an exclusive ``flock`` of the folder and the lock appears with its
content in one step, so two runs started together into one folder cannot both win. A folder named like a run id must hold that run: :func:`check_folder` is what
``compare`` and ``bundle`` ask before they trust a folder.

Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlenv.contract import RESULTS_JSON, RESULTS_JSONL, is_run_id
from mlenv.errors import InputError

DEFAULT_PARENT = "acceptance-report"
LATEST = "latest"
LOCK_FILE = ".mlenv-run.lock"
# Written by the CLI before it stops the ranks because someone stopped it (Ctrl-C,
# SIGTERM, SIGHUP): rank 0 cannot otherwise tell that SIGTERM from the launcher's own
# (sent when a rank crashed, which is an ERROR). Holds the signal's name.
INTERRUPT_FILE = ".interrupted"
INTERRUPT_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
# Written by a rank that gave up on a silent rank 0: one line naming rank 0,
# its host and what its process was doing, for whoever finalises the report (rank 0 cannot).
HUNG_FILE = ".hung"
# What a run leaves in its folder: any of them means the folder belongs to a run already.
RUN_FILES = (
    RESULTS_JSON,
    RESULTS_JSONL,
    "run.json",
    "record.json",
    "junit.xml",
    "summary.md",
    "launcher.log",
)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def lock_holder(report_dir: Path) -> int | None:
    """The pid of the live run that holds ``report_dir``, else None (no lock, or a stale one)."""
    try:
        pid = int((report_dir / LOCK_FILE).read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _pid_alive(pid) else None


def lock_run_id(report_dir: Path) -> str | None:
    """The run id a claim lock names (``<pid> <run id>``), live or stale; None without one."""
    try:
        words = (report_dir / LOCK_FILE).read_text(encoding="ascii").split()
    except (OSError, ValueError):
        return None
    return words[1] if len(words) > 1 and is_run_id(words[1]) else None


@dataclass
class Claim:
    """A report folder this process holds for one run; :meth:`release` when the run is over."""

    path: Path
    run_id: str

    def release(self) -> None:
        """Remove our lock (only ours: a lock naming another pid is left alone)."""
        lock = self.path / LOCK_FILE
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(lock.read_text(encoding="ascii").split()[0]) == os.getpid():
                lock.unlink()


def mark_interrupted(report_dir: Path, signal_name: str) -> None:
    """Say, for rank 0, that the run is being stopped on purpose (best effort)."""
    with contextlib.suppress(OSError):
        (report_dir / INTERRUPT_FILE).write_text(signal_name + "\n", encoding="ascii")


def interrupted_by(report_dir: Path) -> str | None:
    """The signal name the CLI stopped this run with (:func:`mark_interrupted`), else None."""
    try:
        name = (report_dir / INTERRUPT_FILE).read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return None
    return name if name in INTERRUPT_SIGNALS else None


def mark_hung(report_dir: Path, line: str) -> None:
    """Leave ``line`` (``rank 0 (host) hung: …``) for the finaliser; the first one stays (best effort)."""
    with contextlib.suppress(OSError):
        fd = os.open(report_dir / HUNG_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(line.replace("\n", " ") + "\n")


def hung_note(report_dir: Path) -> str | None:
    """The line a rank left with :func:`mark_hung`, else None."""
    try:
        text = (report_dir / HUNG_FILE).read_text(encoding="utf-8").strip()
    except (OSError, ValueError):
        return None
    return text or None


def _refuse(report_dir: Path, why: str) -> InputError:
    return InputError(
        f"--report-dir {report_dir}: {why}; choose a new folder (or leave --report-dir out: "
        f"each run then gets {DEFAULT_PARENT}/<run-id>/)"
    )


def _links(report_dir: Path) -> list[str]:
    """Relative names of the links anywhere inside ``report_dir`` (first few): a run writes
    only into what it made, never through a link someone left there (a dangling one too)."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(report_dir):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            if p.is_symlink():
                found.append(p.relative_to(report_dir).as_posix())
        if len(found) >= 3:
            break
    return found


def _others_logs(report_dir: Path) -> list[str]:
    """Files already in the folder's ``logs/`` and ``nccl/``: another run's, or another
    host's, which a bundle of this run must never carry as its own."""
    out: list[str] = []
    for sub in ("logs", "nccl"):
        d = report_dir / sub
        with contextlib.suppress(OSError):
            out += [f"{sub}/{p.name}" for p in sorted(d.iterdir())]
    return out


def _write_lock(report_dir: Path, run_id: str) -> None:
    """Create the lock with its content in one step: written to a private temp file, then
    hard-linked into place (``link`` fails if the name exists), so no reader ever sees an
    empty lock and takes it for a stale one."""
    lock = report_dir / LOCK_FILE
    tmp = report_dir / f"{LOCK_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, f"{os.getpid()} {run_id}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, lock)
    finally:
        tmp.unlink(missing_ok=True)


def claim(report_dir: Path, run_id: str) -> Claim:
    """Create (if needed) and lock ``report_dir`` for run ``run_id``; InputError (exit 2) when it
    holds another run's results, a link, another run's logs, or a live run uses it. Never
    deletes anything but a dead run's lock.

    Claims of one folder are serialised by an exclusive ``flock`` on the folder itself, and
    the lock file appears with its content in one step (:func:`_write_lock`): of any number
    of processes claiming one new folder at once exactly one wins (tested with 8 processes
    × 200 trials), and a stale lock is removed by one claimant only, under that flock.
    """
    import fcntl

    holder = lock_holder(report_dir)
    if holder is not None:
        raise _refuse(report_dir, f"in use by a live run (pid {holder})")
    report_dir.mkdir(parents=True, exist_ok=True)
    dfd = os.open(report_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        holder = lock_holder(report_dir)
        if holder is not None:
            raise _refuse(report_dir, f"in use by a live run (pid {holder})")
        found = [f for f in RUN_FILES if os.path.lexists(report_dir / f)]
        if found:
            raise _refuse(report_dir, f"already holds another run's results ({', '.join(found)})")
        links = _links(report_dir)
        if links:
            raise _refuse(
                report_dir, f"holds a link ({', '.join(links)}): a run never writes through one"
            )
        logs = _others_logs(report_dir)
        if logs:
            more = f", … ({len(logs)} in all)" if len(logs) > 3 else ""
            raise _refuse(report_dir, f"holds another run's logs ({', '.join(logs[:3])}{more})")
        lock = report_dir / LOCK_FILE
        if os.path.lexists(lock):  # a dead run's: only we (under the flock) may remove it
            lock.unlink()
        try:
            _write_lock(report_dir, run_id)
        except FileExistsError:  # only a claimant that ignores the flock gets here
            raise _refuse(report_dir, "another run is claiming it right now") from None
        return Claim(report_dir, run_id)
    finally:
        os.close(dfd)  # and with it the flock


def point_latest(parent: Path, run_id: str) -> str | None:
    """Point ``parent/latest`` at ``run_id`` (relative symlink, replaced atomically); a note
    when something that is not our link is in the way (it is left alone)."""
    link = parent / LATEST
    if link.exists() and not link.is_symlink():
        return f"note: {link} is not a link; left as it is"
    tmp = parent / f".{LATEST}.{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run_id)
        os.replace(tmp, link)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        return f"note: {link} not updated: {e.strerror or e}"
    return None


def check_folder(report_dir: Path, doc: dict[str, Any], asked: str | None = None) -> None:
    """InputError (exit 2) when ``report_dir`` does not hold the run it should: ``asked`` (a run
    id looked up in the history), or the run its folder name or ``record.json`` names.

    A history line points at a folder; an older version wrote every run to one folder, so
    the folder may now hold a later run: comparing that would compare the wrong run."""
    from mlenv.contract import loads_bounded, read_regular

    have = str(doc.get("run_id"))
    if asked is not None and have != asked:
        raise InputError(
            f"{report_dir}: holds run {have}, not run {asked} (the folder was reused by a later "
            f"run; the results of run {asked} are gone)"
        )
    name = report_dir.name
    if is_run_id(name) and name != have:
        raise InputError(f"{report_dir}: the folder is named for run {name} but holds run {have}")
    try:
        rec = loads_bounded(read_regular(report_dir / "record.json"))
    except (OSError, ValueError):  # absent, a link, a FIFO, torn: it names no other run
        return
    if isinstance(rec, dict) and rec.get("run_id") not in (None, have):
        raise InputError(
            f"{report_dir}: record.json names run {rec.get('run_id')} but results.json run {have}"
        )


def odd_entries(report_dir: Path) -> list[str]:
    """One line per run file of ``report_dir`` that is there but not a regular file (a link,
    a FIFO, a device, a folder): a reader would hang on it or follow it elsewhere."""
    import stat

    out = []
    for name in RUN_FILES:
        try:
            mode = (report_dir / name).lstat().st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            out.append(f"{name} is a symbolic link (never followed)")
        elif not stat.S_ISREG(mode):
            out.append(f"{name} is not a regular file (a FIFO, a device or a folder)")
    return out


def unfinalised(parent: Path) -> list[Path]:
    """The run folders under ``parent`` whose run was killed before its report was written
    (run.json, results.jsonl or a dead run's lock; no results.json, no live run holding them)."""
    try:
        dirs = sorted(d for d in parent.iterdir() if d.is_dir() and not d.is_symlink())
    except OSError:
        return []
    return [
        d
        for d in dirs
        if not (d / RESULTS_JSON).exists()
        and lock_holder(d) is None
        and any((d / f).is_file() for f in ("run.json", RESULTS_JSONL, LOCK_FILE))
    ]
