"""Each rank's own log: what the rank prints also goes to ``<report dir>/logs/rank<R>.<host>.log``.

The launcher interleaves every rank's output on one terminal (or drops the remote ranks'
in a pod's pdsh stream); the sign-off bundle wants each rank's log on its own. This is a
Python-level tee of ``sys.stdout``/``sys.stderr``: every write goes to the stream as
before and to the file, flushed at once, so a rank that exits hard (``os._exit``, the
kill fault) loses nothing already printed, and no extra process or pipe can break the
rank's own output. Output written to the file descriptors by C code (NCCL's INFO lines)
is not in it; NCCL's log has its own file (``nccl/``). Stdlib only.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from pathlib import Path
from typing import IO, Any

LOG_DIR = "logs"


class Tee:
    """A text stream that writes to ``stream`` and copies every write to ``copy``."""

    def __init__(self, stream: IO[str], copy: IO[str]) -> None:
        self._stream = stream
        self._copy = copy

    def write(self, s: str) -> int:
        """Write to the stream, then the copy (a failing copy never costs the stream)."""
        n = self._stream.write(s)
        try:
            self._copy.write(s)
            self._copy.flush()
        except (OSError, ValueError):
            pass
        return n

    def flush(self) -> None:
        """Flush both."""
        self._stream.flush()
        try:
            self._copy.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(
        self, name: str
    ) -> Any:  # fileno, isatty, encoding, buffer, …: the real stream's
        return getattr(self._stream, name)


def log_path(report_dir: Path, rank: int, host: str) -> Path:
    """``<report dir>/logs/rank<R>.<host>.log`` (anything odd in the host name becomes ``_``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", host).strip(".") or "host"
    return report_dir / LOG_DIR / f"rank{int(rank)}.{safe}.log"


def start(report_dir: Path, rank: int, host: str) -> Path | None:
    """Copy this process's stdout and stderr into its rank log from now on; None if it cannot be opened."""
    path = log_path(report_dir, rank, host)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = path.open("w", encoding="utf-8", errors="backslashreplace")
    except OSError:
        return None
    try:
        f.write(
            f"# rank {rank} on {host}, started {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
        )
        f.flush()
    except (
        OSError
    ):  # a full disk: the rank runs on without its log (its output still reaches the launcher)
        with contextlib.suppress(OSError):
            f.close()
        return None
    sys.stdout = Tee(sys.stdout, f)
    sys.stderr = Tee(sys.stderr, f)
    return path
