"""Helpers for config tests: write a YAML file and validate it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mlenv.config import check_file
from mlenv.config.model import Cluster
from mlenv.errors import Diagnostic

REPO = Path(__file__).resolve().parents[3]
BASE = "cluster:\n  name: demo\n  namespace: ml-dev-env\n"

Check = Callable[[str], tuple[Cluster | None, list[Diagnostic]]]


@pytest.fixture()
def check(tmp_path: Path) -> Check:
    """Write ``text`` to a file and return ``check_file``'s (model, diagnostics)."""

    def run(text: str) -> tuple[Cluster | None, list[Diagnostic]]:
        f = tmp_path / "c.yaml"
        f.write_text(text)
        return check_file(f)

    return run


def messages(diags: list[Diagnostic]) -> list[str]:
    """``path: message`` of each error, the part a rule test pins."""
    return [f"{d.path}: {d.message}" for d in diags if d.severity == "error"]
