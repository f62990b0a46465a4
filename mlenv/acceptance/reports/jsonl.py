"""``results.jsonl``: one check entry a line, flushed and fsynced as each check finishes."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from mlenv.acceptance.core.result import CheckResult
from mlenv.contract import dumps_safe, loads_bounded, read_regular


class JsonlWriter:
    """Append-only writer; every line reaches the disk whole before :meth:`append` returns,
    or not at all."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._end = 0  # where the last whole line ends

    def append(self, result: CheckResult) -> None:
        """Write one entry and fsync, so a crash right after keeps it.

        A write that fails part way (a full disk: the first bytes fit, the rest did not) is
        cut back to the last whole line before the error goes up, so results.jsonl never
        holds a torn line that readers would have to skip.
        """
        line = (dumps_safe(result.to_dict(), sort_keys=False) + "\n").encode("utf-8")
        done = 0
        try:
            while done < len(line):
                done += os.pwrite(self._fd, line[done:], self._end + done)
            os.fsync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):  # shrinking needs no space
                os.ftruncate(self._fd, self._end)
            raise
        self._end += len(line)

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_partial(path: Path) -> tuple[list[CheckResult], list[str]]:
    """Entries of a possibly truncated ``results.jsonl`` and notes on lines skipped.

    A crash can cut the last line short; that line (and any other unreadable one) is
    skipped and named in the notes instead of failing the recovery.
    """
    results: list[CheckResult] = []
    notes: list[str] = []
    try:
        text = read_regular(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return results, notes
    except OSError as e:  # a link, a FIFO: never followed, never waited on
        return results, [f"{path.name}: not read: {e.strerror or e}"]
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            results.append(CheckResult.from_dict(loads_bounded(line)))
        except (ValueError, KeyError, TypeError) as e:
            notes.append(f"{path.name}:{i}: unreadable entry skipped ({type(e).__name__})")
    return results, notes
