"""Issue 23 with real processes: every run finalised, kept and compared exactly.

`mlenv acceptance --local` with 2 CPU ranks (gloo) through the DeepSpeed launcher, only
the checks each case needs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_acceptance_local import MLENV, ROOT

from mlenv.contract import is_run_id

pytestmark = pytest.mark.integration


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=f"{ROOT / 'tests' / 'integration'}{os.pathsep}{ROOT}",
                MLENV_ROOT=str(ROOT), MLENV_HISTORY_DIR=str(tmp_path / "hist"), DS_ACCELERATOR="cpu",
                TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR",
                                                    str(Path.home() / ".cache/mlenv/torch_extensions")), **extra)


def test_each_default_run_gets_its_own_folder_named_by_its_one_run_id(tmp_path: Path) -> None:
    runs = []
    for _ in range(2):
        p = subprocess.run([*MLENV, "acceptance", "--local", "--nproc", "2", "--checks", "environment"],
                           capture_output=True, text=True, timeout=240, env=_env(tmp_path), cwd=tmp_path)
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
        runs.append(p)
    parent = tmp_path / "acceptance-report"
    folders = sorted(d for d in parent.iterdir() if not d.is_symlink())
    assert len(folders) == 2 and all(is_run_id(d.name) for d in folders), folders
    recs = [json.loads(x) for x in (tmp_path / "hist" / "local" / "history.jsonl").read_text().splitlines()]
    for d, p, rec in zip(folders, runs, recs, strict=True):
        rid = d.name
        assert json.loads((d / "results.json").read_text())["run_id"] == rid
        assert rec["run_id"] == rid and rec["report_dir"] == str(d.resolve())
        assert f"run {rid}: reports in acceptance-report/{rid}" in p.stderr
        assert not (d / ".mlenv-run.lock").exists()  # released at the end
    assert os.readlink(parent / "latest") == folders[1].name
