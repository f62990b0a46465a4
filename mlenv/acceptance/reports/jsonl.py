"""``results.jsonl``: one check entry a line, flushed and fsynced as each check finishes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from mlenv.acceptance.core.result import CheckResult


class JsonlWriter:
    """Append-only writer; every line reaches the disk before :meth:`append` returns."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f: IO[str] = path.open("w", encoding="utf-8")

    def append(self, result: CheckResult) -> None:
        """Write one entry and fsync, so a crash right after keeps it."""
        self._f.write(json.dumps(result.to_dict(), sort_keys=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        """Close the file."""
        self._f.close()


def read_partial(path: Path) -> tuple[list[CheckResult], list[str]]:
    """Entries of a possibly truncated ``results.jsonl`` and notes on lines skipped.

    A crash can cut the last line short; that line (and any other unreadable one) is
    skipped and named in the notes instead of failing the recovery.
    """
    results: list[CheckResult] = []
    notes: list[str] = []
    if not path.exists():
        return results, notes
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            results.append(CheckResult.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError) as e:
            notes.append(f"{path.name}:{i}: unreadable entry skipped ({type(e).__name__})")
    return results, notes
