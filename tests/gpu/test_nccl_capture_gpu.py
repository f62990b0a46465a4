"""NCCL's log captured by the acceptance ranks' set-up, on a real GPU (skipped without one).

A fresh process (NCCL reads NCCL_DEBUG* once) starts the capture the way
``dist.init_process_group`` does, runs one NCCL all_reduce, and parses its own file:
NCCL wrote INFO lines there, the parser finds the version and the network it used,
and the console (stdout/stderr) got no INFO line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, os, socket, sys
from datetime import timedelta
from pathlib import Path
import torch, torch.distributed as dist
from mlenv.acceptance.evidence import ncclcapture, nccllog
cap = ncclcapture.start(os.environ, Path(sys.argv[1]), 0, "gpu-host")
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
torch.cuda.set_device(0)
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                        timeout=timedelta(seconds=60))
t = torch.ones(1 << 20, device="cuda:0")
dist.all_reduce(t)
torch.cuda.synchronize()
log = nccllog.parse(cap.path.read_text())
dist.destroy_process_group()
print("RESULT " + json.dumps({"path": str(cap.path), "network": log.network, "version": log.version,
                              "lines": log.lines}))
"""


def test_capture_writes_info_to_the_file_not_the_console(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_DEBUG")}
    env.update(NCCL_DEBUG="WARN", PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "nccl")],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    got = json.loads(line.removeprefix("RESULT "))
    assert Path(got["path"]).parent == tmp_path / "nccl" and Path(got["path"]).name.startswith(
        "rank0.gpu-host."
    )
    assert got["lines"] > 0 and got["network"]  # NCCL said which network it picked
    v = torch.cuda.nccl.version()  # (2, 28, 9) in torch >= 1.12
    if isinstance(v, tuple):
        assert str(got["version"]).startswith(".".join(map(str, v[:3])))
    assert (
        "NCCL INFO" not in p.stdout + p.stderr
    )  # WARN level on the console: INFO went to the file
