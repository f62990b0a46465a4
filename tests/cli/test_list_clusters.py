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
    assert header.split() == [
        "NAME",
        "PLATFORM",
        "MODES",
        "NODES",
        "x",
        "GPUS",
        "STORAGE",
        "DESCRIPTION",
    ]
    clusters = load_all(REPO)
    assert len(rows) == len(clusters)
    for row, c in zip(rows, clusters, strict=True):
        cells = row.split()
        assert cells[0] == c.name
        assert cells[1] == c.platform
        assert cells[2] == ("rdma,tcp" if c.rdma.enabled else "tcp")
        assert cells[3:6] == [str(c.gpus.default_nodes), "x", str(c.gpus.per_node)]
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


def test_slurm_and_hosts_rows_say_their_platform_and_shared_folder(tmp_path: Path) -> None:
    """a Slurm config is not listed as if it were an OpenShift one."""
    (tmp_path / "clusters").mkdir()
    data = REPO / "tests" / "data" / "platforms"
    # each under its cluster.name (a config is known by its file name)
    for f, name in (
        ("site-university-gres", "site-university"),
        ("site-baremetal-lab", "site-lab"),
    ):
        shutil.copy(data / f"{f}.yaml", tmp_path / "clusters" / f"{name}.yaml")
    r = CliRunner().invoke(app, ["list-clusters"], env={"MLENV_ROOT": str(tmp_path)})
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split() for line in r.stdout.strip().splitlines()[1:]}
    assert rows["site-university"][1:3] == ["slurm", "tcp"]
    assert "/scratch/projects/ml/mlenv" in rows["site-university"]
    assert rows["site-lab"][1] == "hosts" and "volumeClaimTemplates" not in r.stdout
    r = CliRunner().invoke(app, ["list-clusters", "-o", "json"], env={"MLENV_ROOT": str(tmp_path)})
    assert '"platform": "slurm"' in r.stdout
