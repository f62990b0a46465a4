"""On a real GPU: another process holding memory is named before anything is measured.

Skipped without CUDA or nvidia-smi. A child process (not ours: its command line does not
run ``mlenv.acceptance``) holds 8 GiB of GPU 0; the environment check's probe must call
GPU 0 busy and name the child's PID where nvidia-smi can see it (from inside a
container it may list no process: then "another process"). Memory this process holds
itself never makes the GPU busy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs nvidia-smi"),
]

HOLD = (
    "import sys, time, torch\n"
    "x = torch.empty(8 * 2**30, dtype=torch.uint8, device='cuda:0')\n"
    "torch.cuda.synchronize()\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def _ctx() -> object:
    from mlenv.acceptance.core.base import RunContext

    return RunContext(
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        nnodes=1,
        host="gpu",
        backend="nccl",
        device="cuda:0",
    )


def test_gpu_held_by_another_process_is_busy_on_a_real_gpu() -> None:
    from mlenv.acceptance.checks.environment import busy_gpu

    child = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        busy, seen = busy_gpu(_ctx())  # type: ignore[arg-type]
        assert seen, "nvidia-smi answered nothing"
        assert busy is not None and busy.other_mib >= 8 * 1024, seen
        assert busy.why.startswith(f"GPU {busy.index}: ") and busy.why.endswith("; not measured")
        assert str(child.pid) in busy.why or child.pid not in busy.other_pids
    finally:
        child.kill()
        child.wait(timeout=30)


def test_memory_this_process_holds_is_never_busy_on_a_real_gpu() -> None:
    from mlenv.acceptance.checks.environment import QUERY_APPS, busy_gpu, parse_apps, run_tool

    x = torch.empty(4 * 2**30, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    listed = {pid for pid, _, _ in parse_apps(run_tool(QUERY_APPS, []) or "")}
    if os.getpid() not in listed:
        pytest.skip(
            "nvidia-smi does not list this process (another PID namespace): ours cannot be told apart"
        )
    busy, _ = busy_gpu(_ctx())  # type: ignore[arg-type]
    assert busy is None
    del x
