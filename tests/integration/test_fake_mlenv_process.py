"""The fake cluster behind a real ``mlenv`` process.

``python -m mlenv.testing.fake_mlenv STATE -- ARGS`` runs the real CLI with the fake
installed through the client factory; make's ``MLENV`` variable takes that command line,
so a make target runs end to end against the fake. The ``mlenv`` console script itself has
no way to reach the fake, and the wheel does not carry ``mlenv.testing``
(``tests/cli/test_fake_entry.py``).

Integration tier: every test here starts ``mlenv`` (and make) as real processes.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlenv.testing.fakecluster import FakeCluster

# The CLI tests' fake-cluster state file, written the same way here.
_spec = importlib.util.spec_from_file_location(
    "fakeenv", Path(__file__).resolve().parents[1] / "cli" / "_fakeenv.py"
)
assert _spec and _spec.loader
_fakeenv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fakeenv)
ROOT: Path = _fakeenv.ROOT
fake_state = _fakeenv.fake_state

NS = "ml-dev-env"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "MLENV_ROOT": str(ROOT),
        "MLENV_STATE_DIR": str(tmp_path / ".mlenv"),
        "MAKEFLAGS": "",
        "MAKELEVEL": "",
        **extra,
    }


def fake_mlenv(state: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlenv.testing.fake_mlenv", str(state), "--", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_fake_mlenv_runs_the_real_cli_against_the_state_file(tmp_path: Path) -> None:
    state = fake_state(tmp_path)
    r = fake_mlenv(state, "deploy", "barcelona", "--timeout", "60", env=_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "deployed barcelona: 2/2 pods Ready" in r.stdout
    fake = FakeCluster.load(str(state))  # saved back when the command ended
    assert fake.get("StatefulSet", "ml-dev-env", NS) is not None
    assert {"ml-dev-env-0", "ml-dev-env-1"} <= {p["metadata"]["name"] for p in fake.list("Pod", NS)}
    r = fake_mlenv(state, "status", "barcelona", env=_env(tmp_path))
    assert r.returncode == 0 and "ml-dev-env-1" in r.stdout, r.stderr


def test_fake_mlenv_usage_and_a_missing_state_file_are_one_line_exit_2(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mlenv.testing.fake_mlenv"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
    )
    assert r.returncode == 2 and r.stderr.startswith("usage: python -m mlenv.testing.fake_mlenv")
    missing = tmp_path / "nope.json"
    r = fake_mlenv(missing, "status", "barcelona", env=_env(tmp_path))
    assert r.returncode == 2, r.stderr
    assert f"{missing}: no such fake-cluster state file" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_mlenv_command_ignores_the_old_fake_switch(tmp_path: Path) -> None:
    """Production code has no environment switch to the fake: with the variable the old
    code read, ``mlenv`` still uses the real client (no kubectl on PATH here: exit 3)."""
    state = fake_state(tmp_path)
    before = state.read_bytes()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    r = subprocess.run(
        [sys.executable, "-m", "mlenv", "status", "barcelona"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(tmp_path, MLENV_FAKE_CLUSTER=str(state), PATH=str(bindir)),
    )
    assert r.returncode == 3, r.stdout + r.stderr
    assert "neither oc nor kubectl is on PATH" in r.stderr
    assert state.read_bytes() == before


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """An empty folder make treats as a checkout whose venv is built (no bootstrap)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    co = tmp_path / "checkout"
    (co / ".venv").mkdir(parents=True)
    (co / "pyproject.toml").write_text("")
    stamp = co / ".venv" / ".installed"
    stamp.write_text("")
    later = time.time() + 10  # the venv stamp must look newer than pyproject.toml
    os.utime(stamp, (later, later))
    ops = co / ".venv" / ".ds-ops"  # DeepSpeed's CPU op installed: make venv's second stamp
    ops.write_text("")
    os.utime(ops, (later + 1, later + 1))
    light = co / ".venv-cli" / ".installed"  # the cluster targets' light install (make cli)
    light.parent.mkdir()
    light.write_text("")
    os.utime(light, (later, later))
    return co


def test_make_targets_run_against_the_fake_through_the_cli_variable(
    checkout: Path, tmp_path: Path
) -> None:
    state = fake_state(tmp_path)
    mlenv = f"{sys.executable} -m mlenv.testing.fake_mlenv {state} --"

    def make(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "make",
                "--no-print-directory",
                "-f",
                str(ROOT / "Makefile"),
                "-C",
                str(checkout),
                *args,
                "CLUSTER=barcelona",
                f"CLI={mlenv}",  # the cluster targets' mlenv (the light install's)
            ],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=180,
        )

    r = make("deploy-cluster")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "deployed barcelona: 2/2 pods Ready" in r.stdout
    r = make("status-cluster")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ml-dev-env-0" in r.stdout and "workspace-ml-dev-env-1" in r.stdout
    assert FakeCluster.load(str(state)).get("StatefulSet", "ml-dev-env", NS) is not None
