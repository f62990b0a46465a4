"""`mlenv list-clusters` through the Typer app."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from mlenv.cli.app import app
from mlenv.config import load_all

REPO = Path(__file__).resolve().parents[2]


def test_table_lists_every_example() -> None:
    r = CliRunner().invoke(app, ["list-clusters"], env={"MLENV_ROOT": str(REPO)})
    assert r.exit_code == 0, r.output
    header, *rows = r.stdout.strip().splitlines()
    assert header.split() == ["NAME", "MODES", "NODES", "x", "GPUS", "STORAGE", "DESCRIPTION"]
    clusters = load_all(REPO)
    assert len(rows) == len(clusters)
    for row, c in zip(rows, clusters, strict=True):
        cells = row.split()
        assert cells[0] == c.name
        assert cells[1] == ("rdma,tcp" if c.rdma.enabled else "tcp")
        assert cells[2:5] == [str(c.gpus.default_nodes), "x", str(c.gpus.per_node)]
        assert c.storage.mode in cells
        assert row.endswith(c.cluster.description)


def test_invalid_file_is_reported_after_the_table(tmp_path: Path) -> None:
    shutil.copytree(REPO / "clusters", tmp_path / "clusters")
    (tmp_path / "clusters" / "broken.yaml").write_text("cluster: {name: broken}\n")
    r = CliRunner().invoke(app, ["list-clusters"], env={"MLENV_ROOT": str(tmp_path)})
    assert r.exit_code == 2
    assert "local" in r.stdout and "broken" not in r.stdout
    assert "broken.yaml:1:1: cluster: missing required key 'namespace' under cluster" in r.stderr
    assert "Traceback" not in r.output
