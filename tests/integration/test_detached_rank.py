"""A pod's detached rank with real processes: ``run-torchrun --detach`` returns once the
rank runs and the rank outlives it (the exec's end, or a dropped stream, does not reach
it); a second start starts nothing; a follower cut off mid-run is re-opened at its byte
offset; ``run-stop`` ends torchrun's worker too and leaves the run's status."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from mlenv import contract
from mlenv.pod import detach

POD = [sys.executable, "-m", "mlenv.pod"]
RID = "20261129-101500-fedcba"

JOB = """
import os, sys, time
print(f"worker {os.getpid()}", flush=True)
for i in range(600):
    print(f"tick {i}", flush=True)
    time.sleep(0.2)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {
        **os.environ,
        "HOME": str(tmp_path),
        "MLENV_STATE_DIR": str(tmp_path / "state"),
        "MLENV_WORKSPACE": str(tmp_path),
        "MLENV_NAMESPACE": "ns",
        "MLENV_NNODES": "1",
        "MLENV_POD_INDEX": "0",
        "MLENV_CPU_SLOTS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _pod(env: dict[str, str], cwd: Path, *words: str, timeout: float = 120) -> str:
    res = subprocess.run(
        [*POD, *words], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout + res.stderr


def _follow_some(env: dict[str, str], cwd: Path, offset: int, want: int) -> list[str]:
    """A follower killed after ``want`` output lines: a stream that dropped."""
    proc = subprocess.Popen(
        [*POD, "run-follow", "--run-id", RID, "--offset", str(offset)],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    got: list[str] = []
    try:
        for line in proc.stdout:
            got.append(line.rstrip("\n"))
            if sum(1 for g in got if g.startswith(contract.FOLLOW_OUT)) >= want:
                break
    finally:
        proc.kill()
        proc.wait()
    return got


def test_a_detached_rank_outlives_its_start_is_followed_by_offset_and_stopped(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path)
    (tmp_path / "job.py").write_text(JOB)
    start = ["run-torchrun", "--detach", "--run-id", RID, "job.py"]
    said = _pod(env, tmp_path, *start)
    assert f"run {RID} started detached" in said
    d = Path(detach.run_dir(env["MLENV_STATE_DIR"], RID))
    pid = detach.read_pid(str(d))
    assert pid is not None and os.getpgid(pid) == pid  # the leader of its own group
    # the start has ended; the rank has not, and a retried start starts nothing
    again = _pod(env, tmp_path, *start)
    assert f"run {RID} was already started here (pid {pid})" in again
    assert _pod(env, tmp_path, "run-state", "--run-id", RID).strip() == f"running {pid}"

    first = _follow_some(env, tmp_path, 0, 4)
    frames = [contract.follow_frame(f) for f in first if f.startswith(contract.FOLLOW_OUT)]
    worker = next(int(t.split()[1]) for _, t, _ in frames if t.startswith("worker "))
    offset = frames[-1][2]
    rest = _follow_some(env, tmp_path, offset, 3)
    more = [contract.follow_frame(f) for f in rest if f.startswith(contract.FOLLOW_OUT)]
    # the re-opened stream goes on from the byte after the last line shown: nothing twice
    text = (d / detach.OUTPUT).read_bytes()
    assert more[0][2] > offset
    assert text[offset : more[-1][2]].decode().splitlines() == [t for _, t, _ in more]

    stopped = _pod(env, tmp_path, "run-stop", "--run-id", RID)
    assert f"stopped (SIGINT to process group {pid})" in stopped
    deadline = time.monotonic() + 60
    while detach.read_exit(str(d)) is None:
        assert time.monotonic() < deadline, (d / detach.OUTPUT).read_text()[-2000:]
        time.sleep(0.2)
    assert detach.read_exit(str(d)) != 0
    assert not Path(f"/proc/{worker}").exists() or (
        Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    )  # torchrun's worker went with the run
    end = _pod(env, tmp_path, "run-follow", "--run-id", RID, "--offset", str(len(text)))
    assert end.splitlines()[-1] == f"{contract.FOLLOW_EXIT}{detach.read_exit(str(d))}"
    assert _pod(env, tmp_path, "run-state", "--run-id", RID).startswith("exited ")
