"""``--dist loadgroup`` keeps an ``xdist_group`` on one worker with the pytest and
pytest-xdist this venv has: the modules whose module-scoped fixture is a Slurm cluster or a
netns harness rely on it (docs/architecture.md, "Tests by tier")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GROUPED = """
import os
import pytest

@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    with open(os.path.join(os.environ["GROUP_OUT"], f"worker-{i}"), "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "3",
            "--dist",
            "loadgroup",
            "test_grouped.py",
        ],
        cwd=tmp_path,
        env={**os.environ, "GROUP_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    ran = sorted(out.glob("worker-*"))
    assert len(ran) == 6, r.stdout
    workers = {p.read_text() for p in ran}
    assert len(workers) == 1, f"the group ran on {sorted(workers)}"
