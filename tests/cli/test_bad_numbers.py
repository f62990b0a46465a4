"""Numbers are bounded where they are parsed: a valid quantity never crashes validate, and
--nodes (or gpus.default_nodes) cannot become a 20-digit replicas count."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.cli.app import app
from mlenv.contract import MAX_NODES

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, old: str, new: str) -> Path:
    text = (ROOT / "clusters" / "nerc-tcp.yaml").read_text()
    assert old in text
    (tmp_path / "clusters").mkdir()
    path = tmp_path / "clusters" / "nerc-tcp.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("size", ["1Ei", "1E", "8Ei"])
def test_an_exa_quantity_is_judged_not_crashed_on(tmp_path: Path, size: str) -> None:
    text = (ROOT / "clusters" / "nerc-tcp.yaml").read_text()
    old = next(line for line in text.splitlines() if line.startswith("shm_size:"))
    r = CliRunner().invoke(app, ["validate", str(_config(tmp_path, old, f"shm_size: {size}"))])
    # 8Ei is above Kubernetes' 2^63-1: a located error; 1Ei and 1E fit
    assert r.exit_code == (2 if size == "8Ei" else 0), r.output
    assert "internal error" not in r.output


def test_nodes_has_an_upper_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLENV_ROOT", str(ROOT))
    r = CliRunner().invoke(
        app, ["render", "nerc-tcp", "--nodes", "99999999999999999999", "--out", str(tmp_path)]
    )
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines()[-1] == (
        f"error: --nodes 99999999999999999999: at most {MAX_NODES} nodes"
    )
    assert not any(tmp_path.iterdir())


def test_default_nodes_has_an_upper_bound(tmp_path: Path) -> None:
    text = (ROOT / "clusters" / "nerc-tcp.yaml").read_text()
    old = next(line for line in text.splitlines() if "default_nodes:" in line)
    indent = old[: len(old) - len(old.lstrip())]
    path = _config(tmp_path, old, f"{indent}default_nodes: 99999999999999999999")
    r = CliRunner().invoke(app, ["validate", str(path)])
    assert r.exit_code == 2, r.output
    assert f"99999999999999999999 is more than {MAX_NODES} nodes" in r.output
