"""Capture this rank's NCCL log into the report folder, keeping the console as the user set it.

Called once per rank before the NCCL process group starts (NCCL reads ``NCCL_DEBUG*``
when it first initialises). :func:`mlenv.acceptance.evidence.nccllog.capture_plan` decides the
variables; here they are applied to ``os.environ``, the folder is made (NCCL writes to
stdout when it cannot open the file), and a daemon thread copies to stderr the lines
the user's own ``NCCL_DEBUG`` would have printed (WARN lines at the config's default
``WARN``), so capturing INFO for the ``fabric.transport`` check floods nothing.
"""

from __future__ import annotations

import glob
import os
import sys
import threading
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from mlenv.acceptance.evidence import nccllog


@dataclass(frozen=True)
class Capture:
    """Where this process's NCCL log goes, and how it was set up."""

    path: Path  # the file NCCL writes for this process
    plan: nccllog.CapturePlan


_ACTIVE: Capture | None = None


def active() -> Capture | None:
    """This process's capture, when :func:`start` ran (None: not an NCCL rank, or never set up)."""
    return _ACTIVE


def start(
    environ: MutableMapping[str, str],
    log_dir: Path,
    rank: int,
    host: str,
    echo_to: TextIO | None = None,
    poll_s: float = 0.5,
) -> Capture:
    """Set the NCCL_DEBUG* variables of this rank, make the folder, start the console echo."""
    global _ACTIVE
    plan = nccllog.capture_plan(environ, str(log_dir.absolute()), rank, host)
    for k, v in plan.set_env.items():
        environ[k] = v
    path = Path(nccllog.expand_pattern(plan.file_pattern, _nccl_hostname(), os.getpid()))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not plan.user_file:  # this rank's logs from earlier runs in the same folder (other pids)
            stem = path.name.rsplit(".", 2)[0]  # rank<R>.<host>
            for old in path.parent.glob(f"{glob.escape(stem)}.*.log"):
                if old.name != path.name and old.name[len(stem) + 1 : -len(".log")].isdigit():
                    old.unlink(missing_ok=True)
    except OSError:
        pass  # NCCL then prints to stdout; the check reports that the log is missing
    cap = Capture(path, plan)
    _ACTIVE = cap
    if plan.echo != "none":
        Echo(path, plan.echo, echo_to or sys.stderr, poll_s).start()
    return cap


def _nccl_hostname() -> str:
    import socket

    return socket.gethostname()


class Echo(threading.Thread):
    """Follows the log file and writes the lines the user's NCCL_DEBUG asked for."""

    def __init__(self, path: Path, echo: str, out: TextIO, poll_s: float) -> None:
        super().__init__(name="mlenv-nccl-echo", daemon=True)
        self.path, self.echo, self.out, self.poll_s = path, echo, out, poll_s
        self._halt = threading.Event()
        self._pos = 0
        self._partial = ""

    def poll(self) -> None:
        """Copy what was appended since the last poll (complete lines only)."""
        try:
            with self.path.open("r", encoding="utf-8", errors="replace") as f:
                f.seek(self._pos)
                chunk = f.read()
                self._pos = f.tell()
        except OSError:
            return
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        wanted = [ln for ln in lines if nccllog.echo_wanted(ln, self.echo)]
        if wanted:
            self.out.write("\n".join(wanted) + "\n")
            self.out.flush()

    def run(self) -> None:  # pragma: no cover - exercised through poll() in tests
        while not self._halt.wait(self.poll_s):
            self.poll()

    def stop(self) -> None:
        """Stop following (after one last poll)."""
        self._halt.set()
        self.poll()
