"""The local tree's tar files for one kubectl sync, each set of files packed once.

A sync streams into each pod only what that pod lacks (the plan made from the pod's own
listing, mid-exec: :data:`~mlenv.cluster.treehash.COPY_SCRIPT`). Pods deployed together
lack the same files: every file when fresh, the few edited since when synced before. So
each distinct set of names is packed once, by whichever pod asks first (the others asking
for it meanwhile wait for that one), and streamed to every pod that needs it: one local
pass per set however many pods, where packing per pod read the whole tree once per pod.

Pods that each lack something different would make a pack each: past ``MAX_PACKS``
distinct sets a pod gets the pack of the whole tree instead (sending a file the pod holds
already is harmless, tar overwrites it with the same bytes), so disk use stays bounded.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence

# Distinct partial packs kept for one sync before a pod is sent the whole tree instead.
MAX_PACKS = 8

# Writes a tar of NAMES (relative paths) of LOCAL_DIR to PATH: the client's own packer
# (the control host's tar for kubectl; the tarfile module in the fake cluster).
Writer = Callable[[str, Sequence[str], str], None]


class TreePacks:
    """Tar files of ``names`` of ``local_dir`` (the whole tree's listing), one per
    distinct set asked for, removed by :meth:`close` (or at the end of a ``with`` block)
    whatever happened."""

    def __init__(self, local_dir: str, names: Iterable[str], write: Writer) -> None:
        self.local_dir = local_dir
        self.every = tuple(sorted(names))
        self._write = write
        self._lock = threading.Lock()
        self._slots: dict[tuple[str, ...], _Slot] = {}
        self._files: list[str] = []

    def archive(self, names: Iterable[str]) -> tuple[str, tuple[str, ...]]:
        """The tar file holding ``names`` and the names it holds: ``names`` themselves, or
        the whole tree once ``MAX_PACKS`` other sets were packed."""
        key = tuple(sorted(names))
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                partial = sum(1 for k in self._slots if k != self.every)
                if key != self.every and partial >= MAX_PACKS:
                    key = self.every
                    slot = self._slots.get(key)
                if slot is None:
                    slot = self._slots[key] = _Slot()
        with slot.lock:
            if slot.path is None:
                fd, path = tempfile.mkstemp(prefix="mlenv-sync-", suffix=".tar")
                os.close(fd)
                with self._lock:
                    self._files.append(path)
                self._write(self.local_dir, key, path)
                slot.path = path
            return slot.path, key

    def __enter__(self) -> TreePacks:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove every tar file made."""
        with self._lock:
            files, self._files = self._files, []
        for path in files:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


class _Slot:
    """One set's tar file, made under its own lock (other sets pack meanwhile)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.path: str | None = None
