"""An unusable ``--report-dir`` is bad input: exit 2 and one line, before anything runs
(it was ``internal error: OSError…``, exit 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.cli.app import app

ROOT = Path(__file__).resolve().parents[2]


def _acceptance(report_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MLENV_ROOT", str(ROOT))
    return CliRunner().invoke(
        app, ["acceptance", "--local", "--checks", "environment", "--report-dir", str(report_dir)]
    )


@pytest.mark.parametrize("shape", ["a file", "under a file", "a dangling link"])
def test_unusable_report_dir_is_exit_2_one_line(tmp_path: Path, monkeypatch, shape: str) -> None:
    f = tmp_path / "f"
    f.write_text("not a folder")
    target = {"a file": f, "under a file": f / "reports"}.get(shape)
    if target is None:
        target = tmp_path / "link"
        target.symlink_to(tmp_path / "gone")
    r = _acceptance(target, monkeypatch)
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: --report-dir {target}: cannot write reports there: ")
    assert "internal error" not in r.output and "launching" not in r.output
    assert f.read_text() == "not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: no unwritable folder")
def test_unwritable_report_dir_is_exit_2(tmp_path: Path, monkeypatch) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        r = _acceptance(ro / "reports", monkeypatch)
    finally:
        ro.chmod(0o755)
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [
        f"error: --report-dir {ro / 'reports'}: cannot write reports there: {ro} is not writable"
    ]
