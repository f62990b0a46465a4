"""DeepSpeed's start op: a lock left by a killed build is named at once, a live build is waited for.

The fault it pins (and the CI runs of stop 28): a DeepSpeed op build killed
at a check's deadline left torch's bare ``lock`` file, and every later DeepSpeed start
waited on it until the training check's 120 s deadline.
"""

from __future__ import annotations

import importlib
import mmap
import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from mlenv.acceptance.checks import dsops
from mlenv.acceptance.checks.training import TrainingCheck
from mlenv.acceptance.core.base import RunContext


def _stale(root: Path) -> Path:
    lock = root / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    old = time.time() - 600  # ten minutes: past the grace in which torch's lock may be fresh
    os.utime(lock, (old, old))
    return lock


def _no_build(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    # importlib: the attribute ``deepspeed.comm.torch`` is torch itself (a re-export).
    ds_torch = importlib.import_module("deepspeed.comm.torch")
    monkeypatch.setattr(ds_torch, "build_shm_op", lambda: calls.append("built"))


def test_a_stale_build_lock_is_named_with_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls: list[str] = []
    _no_build(monkeypatch, calls)
    lock = _stale(tmp_path)
    with pytest.raises(dsops.StaleBuildLock, match=f"{lock}.*no build holds it.*remove that file"):
        dsops.build_start_ops()
    assert calls == [] and lock.exists()  # named, not built over, and not removed: not ours
    lock.unlink()
    dsops.build_start_ops()
    assert calls == ["built"]


def test_the_training_check_stops_on_a_stale_lock_before_deepspeed_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls: list[str] = []
    _no_build(monkeypatch, calls)
    _stale(tmp_path)
    ctx = RunContext(
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        nnodes=1,
        host="vm",
        backend="gloo",
        device="cpu",
        deadline_s=10.0,
    )
    t0 = time.monotonic()
    with pytest.raises(dsops.StaleBuildLock):
        TrainingCheck().setup(ctx)
    assert time.monotonic() - t0 < 5.0 and calls == []


def test_a_build_in_progress_is_waited_for_not_called_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds our lock and torch's (a live build): we wait, then load."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls: list[str] = []
    _no_build(monkeypatch, calls)
    lock = _stale(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time, pathlib\n"
            f"f = open({str(tmp_path / dsops.OUR_LOCK)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('held', flush=True); sys.stdin.readline()\n"
            f"pathlib.Path({str(lock)!r}).unlink()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        box: dict[str, BaseException | None] = {}

        def build() -> None:
            try:
                dsops.build_start_ops()
                box["exc"] = None
            except BaseException as e:
                box["exc"] = e

        th = threading.Thread(target=build)
        th.start()
        th.join(0.5)
        assert th.is_alive() and calls == []  # waiting on the live build, not judging its lock
        assert holder.stdin is not None
        holder.stdin.write("done\n")
        holder.stdin.close()
        th.join(30)
        assert not th.is_alive() and box == {"exc": None} and calls == ["built"]
    finally:
        holder.kill()
        holder.wait()


def test_the_prebuild_command_exits_3_with_one_line_on_a_stale_lock(tmp_path: Path) -> None:
    lock = _stale(tmp_path)
    p = subprocess.run(
        [sys.executable, "-m", "mlenv.acceptance.checks.dsops"],
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "TORCH_EXTENSIONS_DIR": str(tmp_path),
            "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
        },
        timeout=300,
    )
    assert p.returncode == 3, p.stderr
    assert p.stderr.count("\n") == 1 and str(lock) in p.stderr and "Traceback" not in p.stderr


def test_a_lock_whose_folder_a_process_of_this_host_works_in_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build outside mlenv (no flock of ours) is still seen: ninja works in the op's folder."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = _stale(tmp_path)
    ninja = subprocess.Popen(["sleep", "30"], cwd=lock.parent)
    try:
        box: dict[str, list[tuple[Path, float]]] = {}
        th = threading.Thread(
            target=lambda: box.update(out=dsops.stale_locks(tmp_path, poll_s=0.05))
        )
        th.start()
        th.join(0.5)
        assert th.is_alive()  # the "builder" is alive: not stale
        ninja.kill()
        ninja.wait()
        th.join(10)
        assert not th.is_alive() and len(box["out"]) == 1 and box["out"][0][0] == lock
    finally:
        ninja.kill()
        ninja.wait()


def test_a_stale_lock_in_mlenvs_own_cache_is_removed_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only mlenv's runs build in ~/.cache/mlenv/torch_extensions: a dead build's lock there is ours."""
    monkeypatch.setenv("HOME", str(tmp_path))
    root = tmp_path / ".cache" / "mlenv" / "torch_extensions" / "_venv"
    root.mkdir(parents=True)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(root))
    calls: list[str] = []
    _no_build(monkeypatch, calls)
    lock = _stale(root)
    said: list[str] = []
    dsops.build_start_ops(warn=said.append)
    assert not lock.exists() and calls == ["built"]
    assert len(said) == 1 and str(lock) in said[0] and "10 min old" in said[0]


def test_the_venv_ships_deepspeeds_cpu_op_compiled() -> None:
    """make venv installs DeepSpeed with DS_BUILD_SHM_COMM=1: nothing to build or lock at start.

    Fails on a venv made by the Makefile before (its DeepSpeed JIT-builds the op)."""
    assert dsops.installed(), "run `make venv`: this DeepSpeed JIT-builds its CPU op at start"
    assert dsops.main(["--installed"]) == 0


def _buffer(path: Path) -> mmap.mmap:
    """A file in ``path`` mapped by this process, as DeepSpeed's op maps its buffers."""
    path.write_bytes(b"\0" * 4096)
    with open(path, "r+b") as f:
        return mmap.mmap(f.fileno(), 4096)


def test_the_ranks_own_deepspeed_buffer_is_unlinked_after_the_barrier_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29512")
    ours, peer = dsops.shm_buffer_path(1, tmp_path), dsops.shm_buffer_path(0, tmp_path)
    assert ours.name == f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_29512_1"
    maps = [_buffer(ours), _buffer(peer)]
    other_job = tmp_path / f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_29513_1"
    other_job.write_bytes(b"\0")  # the same rank of another job: not mapped here
    order: list[str] = []

    def barrier() -> None:
        order.append("barrier" if ours.exists() else "late")

    backend = types.SimpleNamespace(shm_comm_op=object())
    assert dsops.release_shm_buffer(1, barrier, backend, tmp_path)
    assert order == ["barrier"] and not ours.exists()
    assert peer.exists() and other_job.exists()
    maps[0][:4] = b"live"  # the mapping outlives the name
    assert maps[0][:4] == b"live"
    for m in maps:
        m.close()


def test_a_buffer_not_mapped_here_or_a_backend_without_the_op_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.5")
    monkeypatch.setenv("MASTER_PORT", "29500")
    ours = dsops.shm_buffer_path(0, tmp_path)
    ours.write_bytes(b"\0")  # another process's (another user's run under the same name)
    barriers: list[int] = []
    assert not dsops.release_shm_buffer(
        0, lambda: barriers.append(1), types.SimpleNamespace(shm_comm_op=object()), tmp_path
    )
    assert ours.exists() and barriers == [1]
    m = _buffer(ours)
    # A GPU accelerator's backend has no op: no barrier (the same answer on every rank), nothing removed.
    assert not dsops.release_shm_buffer(
        0, lambda: barriers.append(2), types.SimpleNamespace(shm_comm_op=None), tmp_path
    )
    assert ours.exists() and barriers == [1]
    m.close()
