"""The Makefile's cluster targets: which cluster they act on and the flags they pass
(``make -n`` in a scratch checkout, so nothing runs and the repo is not touched)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / ".venv").mkdir()
    stamp = tmp_path / ".venv" / ".installed"
    stamp.write_text("")
    later = time.time() + 10  # the venv stamp must look newer than pyproject.toml
    os.utime(stamp, (later, later))
    return tmp_path


def dry(checkout: Path, *args: str) -> list[str]:
    out = subprocess.run(["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C",
                          str(checkout), "-n", *args], capture_output=True, text=True, check=True,
                         env={**os.environ, "MAKEFLAGS": "", "MAKELEVEL": ""})
    return [" ".join(line.split()) for line in out.stdout.splitlines() if "mlenv" in line]


def test_cluster_targets_follow_the_last_deploy(checkout: Path) -> None:
    assert dry(checkout, "sync-multi-node") == [".venv/bin/mlenv sync local"]
    (checkout / ".mlenv").mkdir()
    (checkout / ".mlenv" / "current-cluster").write_text("barcelona\n")
    assert dry(checkout, "sync-multi-node") == [".venv/bin/mlenv sync barcelona"]
    assert dry(checkout, "status-cluster") == [".venv/bin/mlenv status barcelona"]
    assert dry(checkout, "sync-multi-node", "CLUSTER=nerc-tcp") == [".venv/bin/mlenv sync nerc-tcp"]


def test_watch_and_torchrun_variables(checkout: Path) -> None:
    assert dry(checkout, "sync-multi-node", "WATCH=1") == [".venv/bin/mlenv sync local --watch"]
    assert dry(checkout, "launch", "TORCHRUN=1", "SCRIPT=train.py") == [
        ".venv/bin/mlenv launch local --torchrun train.py"]
