"""One suite at a time in a pod: the launcher's lock.

Two suites in the same pods measure each other's load and bind the same rendezvous port:
two re-check Jobs started by hand ran side by side and the second recorded
``EADDRINUSE`` as a finding. The pod launcher (``python -m mlenv.pod launch`` in pod-0,
``run-torchrun`` in every pod) holds an exclusive ``flock`` on ``<state dir>/run.lock``
for the run's whole life, with the run id written in it, and a second launch in that pod
is refused before it starts anything: ``run <id> is in progress in this pod``, exit 3.

The lock belongs to the launcher's open file, which its children do not inherit (Python
opens files non-inheritable): a launcher that dies, however, frees it with its process,
so a stale lock never blocks the next run. Stdlib only.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from mlenv.errors import InfraError

LOCK_FILE = "run.lock"
MAX_ID_BYTES = 64  # a run id is 22 characters; anything longer in the file is not one


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, MAX_ID_BYTES, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.replace("-", "").isalnum() else ""


def busy(state_dir: str) -> str | None:
    """The run id holding the pod's lock ("" when unreadable), or None when it is free
    (a look only: the lock is not kept)."""
    path = os.path.join(state_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextmanager
def held(state_dir: str, run_id: str) -> Iterator[None]:
    """Hold the pod's run lock for ``run_id`` while the block runs; InfraError (exit 3),
    one line, when another run holds it."""
    os.makedirs(state_dir, exist_ok=True)
    path = os.path.join(state_dir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _holder(fd)
            raise InfraError(
                f"run {other or '(id unreadable)'} is in progress in this pod: nothing "
                "started (wait for it to end; two suites would measure each other)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{run_id}\n".encode("ascii"), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
