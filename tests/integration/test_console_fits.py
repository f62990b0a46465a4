"""The quick run's default output fits a 100-column terminal, with its reasons, notes,
verdict and report lines (it ran to 235 columns: 58 rows of an 80-column terminal)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_acceptance_local import run_local

pytestmark = pytest.mark.integration


def test_every_line_of_a_quick_run_with_warnings_fits_100_columns(tmp_path: Path) -> None:
    p, report = run_local(
        tmp_path,
        # every family but training (its figures add nothing to the layout; its minute does)
        "--checks",
        "environment,gpu,compute,memory,collectives,fabric",
        fault="slow:rank=1,factor=4",  # outliers: WARN lines with reasons and notes
    )
    out = p.stdout + p.stderr
    assert p.returncode in (0, 1), out[-3000:]
    lines = out.splitlines()
    assert any(ln.startswith("verdict: ") for ln in lines) and any("— " in ln for ln in lines)
    # a path is never cut: pytest's folders alone run past 100 columns, on lines of their own
    wide = [ln for ln in lines if len(ln) > 100]
    assert all(len(ln.split()) <= 2 and str(tmp_path) in ln for ln in wide), "\n".join(wide)
    assert (report / "results.json").is_file()
