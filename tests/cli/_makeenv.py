"""A scratch checkout for make (its venv stamps newer than pyproject.toml, so no recipe
builds a venv) and the environment make runs in. Used by ``tests/cli/test_make_targets.py``
and, loaded by path, ``tests/integration/test_cli_processes.py``."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest


def scratch_checkout(tmp_path: Path) -> Path:
    """``tmp_path`` made into a checkout whose venv and light install look built."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / ".venv").mkdir()
    stamp = tmp_path / ".venv" / ".installed"
    stamp.write_text("")
    later = time.time() + 10  # the venv stamp must look newer than pyproject.toml
    os.utime(stamp, (later, later))
    # DeepSpeed installed with its CPU op (make venv's second step): here, already done.
    ops = tmp_path / ".venv" / ".ds-ops"
    ops.write_text("")
    os.utime(ops, (later + 1, later + 1))
    # the cluster targets' light install (make cli), built too
    (tmp_path / ".venv-cli").mkdir()
    light = tmp_path / ".venv-cli" / ".installed"
    light.write_text("")
    os.utime(light, (later, later))
    return tmp_path


def make_env(checkout: Path) -> dict[str, str]:
    """The caller's environment, make's own variables cleared, and none of the variables
    the Makefile reads from it (a NAMESPACE or MODE exported in the shell that runs the
    tests would change every recipe)."""
    env = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}
    return {**env, "MAKEFLAGS": "", "MAKELEVEL": ""}


MAKE_VARIABLES = {
    "CLUSTER",
    "MODE",
    "NODES",
    "POD",
    "DRY_RUN",
    "WATCH",
    "DELETE",
    "SYNC_DRY_RUN",
    "PURGE",
    "SCALE_DOWN",
    "YES",
    "FILE",
    "NAMESPACE",
    "POD_NAME",
    "LOCAL_DIR",
    "REMOTE_DIR",
    "DEBUG_PORT",
    "NAME",
    "CONFIG",
    "SCRIPT",
    "TORCHRUN",
    "NPROC",
    "PROFILE",
}
