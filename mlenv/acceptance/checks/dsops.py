"""DeepSpeed's compiled ops: built once, outside any check's deadline, and a stale lock named.

On the CPU accelerator DeepSpeed compiles a small C++ op (``deepspeed_shm_comm``) the
first time its communication backend starts, under
``TORCH_EXTENSIONS_DIR/<op>/``. torch guards that build with a bare ``lock`` file (a
``FileBaton``: no owner, removed when the build ends). A process killed while building
(a check past its deadline, scancel, Ctrl-C) leaves the file behind, and every later
start waits on it for ever: each later run came out ERROR at the training check's
deadline, on a fresh CI machine as on a Slurm site.

So mlenv builds under a lock of its own first, an ``flock`` on
``TORCH_EXTENSIONS_DIR/.mlenv-build.lock``, which the kernel drops when its holder dies:
whoever holds it and still finds torch's ``lock``, with no process of the host building
in the op's folder, knows that the lock is stale. In mlenv's own cache
(``~/.cache/mlenv/torch_extensions``, where only mlenv's runs build) it removes it and
says so; in a folder the user chose it stops with one line naming the file to remove.

``make venv`` goes further: it installs DeepSpeed with the op compiled in
(``DS_BUILD_SHM_COMM=1``), so DeepSpeed imports it and nothing is built or locked at
start (:func:`installed`); the lock handling here is for installs without it (a site's
image).

The op also leaves a file behind: when every rank is on one host it creates a 67 MB
POSIX shared-memory buffer per rank, ``/dev/shm/deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>``,
maps every peer's, and never unlinks its own (DeepSpeed 0.19.8: ``shared_close`` is
never called). A day of test runs left 16 GB of them in this sandbox's ``/dev/shm``
(memory, not disk) and the OOM killer then took ranks. :func:`release_shm_buffer`
unlinks this rank's buffer as soon as every rank has mapped every buffer: the mappings
live on until the processes end, and nothing is left whatever way a rank ends later
(a killed rank included).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

# The ops DeepSpeed builds at start on the CPU accelerator (deepspeed/comm/torch.py
# build_shm_op). A GPU accelerator builds none of them at start.
START_OPS = ("deepspeed_shm_comm",)
OUR_LOCK = ".mlenv-build.lock"
# torch creates its lock a moment before ninja starts in the folder: younger is not judged.
GRACE_S = 30.0


SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "deepspeed_allreduce_buffer"  # shm.cpp's SHM_BUFFER_NAME


class StaleBuildLock(RuntimeError):
    """torch's build lock of an op is there and no mlenv build holds it."""


def extensions_root() -> Path:
    """The folder torch builds extensions under (``TORCH_EXTENSIONS_DIR`` or torch's default)."""
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env:
        return Path(env)
    import torch.utils.cpp_extension as cpp

    # torch's own answer; it creates <root>/<name>, so ask for the op's folder and step up.
    return Path(cpp._get_build_directory(START_OPS[0], verbose=False)).parent


def _building_here(folder: Path) -> bool:
    """Whether a process on this host works in ``folder`` (torch runs ninja there to build)."""
    target = folder.resolve()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:  # gone, or not ours to read
            continue
        if cwd == target or target in cwd.parents:
            return True
    return False


def stale_locks(
    root: Path, *, grace_s: float = GRACE_S, poll_s: float = 0.5
) -> list[tuple[Path, float]]:
    """(lock, age in s) per start op whose torch ``lock`` no build owns (call with our lock held).

    A build outside mlenv (a user's own DeepSpeed script, an older mlenv) does not take our
    lock: while a process of this host works in the op's folder, or the lock is younger
    than ``grace_s`` (torch writes it just before it starts ninja), it is waited for.
    """
    out = []
    for name in START_OPS:
        lock = root / name / "lock"
        while True:
            try:
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:
                break
            if age < grace_s or _building_here(lock.parent):
                time.sleep(poll_s)
                continue
            out.append((lock, age))
            break
    return out


def mlenv_cache() -> Path:
    """mlenv's own extension cache (``make venv``, ``--local``, the Slurm job default)."""
    return Path.home() / ".cache" / "mlenv" / "torch_extensions"


def build_start_ops(*, warn: Callable[[str], None] | None = None) -> None:
    """Build (or load) the ops DeepSpeed builds at start, under our lock.

    A stale torch lock (see :func:`stale_locks`) in mlenv's own cache, where only runs of
    mlenv build, is removed and said through ``warn`` (default stderr); anywhere else
    (a ``TORCH_EXTENSIONS_DIR`` the user chose) it is not ours to remove:
    :class:`StaleBuildLock` names it. Processes of one host (and of hosts sharing the
    folder, where the file system honours ``flock``) build one at a time; the others
    then load the built op.
    """
    say = warn or (lambda line: print(line, file=sys.stderr, flush=True))
    root = extensions_root()
    root.mkdir(parents=True, exist_ok=True)
    ours = mlenv_cache().resolve() in (root.resolve(), *root.resolve().parents)
    with open(root / OUR_LOCK, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # dropped by the kernel if we die
        stale = stale_locks(root)
        if stale and not ours:
            raise StaleBuildLock(
                "; ".join(
                    f"DeepSpeed's build lock {lock} is {age / 60:.0f} min old and no build holds it "
                    f"(a build was killed): remove that file and run again"
                    for lock, age in stale
                )
            )
        for lock, age in stale:
            lock.unlink(missing_ok=True)
            say(
                f"mlenv: removed DeepSpeed's build lock {lock}, {age / 60:.0f} min old, that no build holds "
                f"(a build was killed); the op is built again"
            )
        from deepspeed.comm.torch import build_shm_op

        build_shm_op()  # None on accelerators without the op; builds once, then loads


def installed() -> bool:
    """Whether the DeepSpeed here ships the start ops compiled (``DS_BUILD_SHM_COMM=1``
    at install, as ``make venv`` does): then nothing is built or locked at start."""
    from deepspeed.git_version_info import installed_ops

    return all(bool(installed_ops.get(name)) for name in START_OPS)


def shm_buffer_path(rank: int, shm_dir: Path = SHM_DIR) -> Path:
    """The buffer DeepSpeed's CPU op creates for ``rank`` (shm.cpp ``shm_initialize``: the
    uid, then ``MASTER_ADDR`` and ``MASTER_PORT`` as the process's environment has them)."""
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    return shm_dir / f"{SHM_PREFIX}_{os.getuid()}_{addr}_{port}_{rank}"


def mapped_here(path: Path, maps: Path = Path("/proc/self/maps")) -> bool:
    """Whether this process maps ``path`` (a line of ``/proc/self/maps`` ends in its name;
    one already unlinked ends in `` (deleted)`` and is not it)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return False
    name = str(path)
    return any(len(f := line.split(maxsplit=5)) == 6 and f[5] == name for line in lines)


def release_shm_buffer(
    rank: int, barrier: Callable[[], None], backend: object, shm_dir: Path = SHM_DIR
) -> bool:
    """Unlink the shared-memory buffer DeepSpeed's CPU op made for this rank, once every
    rank has mapped every buffer; True when it did.

    Call it on every rank of the group right after ``deepspeed.initialize`` (``backend``
    is DeepSpeed's communication backend, ``deepspeed.comm.comm.cdb``). The op maps the
    peers' buffers inside its ``initialize`` (it waits there until each exists), so after
    ``barrier()`` no rank will open a name again. Only a buffer this process maps, under
    this rank's name, is removed: one of another job or user is never touched. A backend
    without the op (a GPU accelerator, oneCCL) made nothing and skips the barrier, the
    same answer on every rank."""
    if getattr(backend, "shm_comm_op", None) is None:
        return False
    barrier()
    path = shm_buffer_path(rank, shm_dir)
    if not mapped_here(path):
        return False  # ranks on several hosts: the op made no buffer
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def release_own_shm_buffer() -> bool:
    """:func:`release_shm_buffer` for the calling rank, right after ``deepspeed.initialize``:
    torch's rank and barrier of the default group, DeepSpeed's backend."""
    import torch.distributed as dist
    from deepspeed.comm import comm as ds_comm

    return release_shm_buffer(dist.get_rank(), dist.barrier, ds_comm.cdb)


def main(argv: list[str] | None = None) -> int:
    """``python -m mlenv.acceptance.checks.dsops [--installed]``.

    Without arguments: build the start ops now (exit 3 on a stale lock). ``--installed``:
    exit 0 when DeepSpeed ships them compiled, else 1 with one line (``make venv`` then
    reinstalls DeepSpeed with them).
    """
    args = sys.argv[1:] if argv is None else argv
    if args == ["--installed"]:
        if installed():
            return 0
        print(
            "mlenv: this DeepSpeed does not ship its CPU op compiled: reinstalling it with DS_BUILD_SHM_COMM=1",
            file=sys.stderr,
        )
        return 1
    try:
        build_start_ops()
    except StaleBuildLock as e:
        print(f"mlenv: {e}", file=sys.stderr)
        return 3
    print(f"DeepSpeed start ops ready under {extensions_root()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
