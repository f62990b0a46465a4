"""Racks on a real Slurm cluster whose slurmctld runs the topology/tree plugin: two
netns hosts (one slurmd each), each behind a leaf switch of its own in topology.conf, and
no ``nodes.topology`` in the config. Rank 0 of the job reads ``scontrol show topology``
and fabric.localize's racks are the leaf switches.

Its own module: the harness of tests/integration/test_slurm.py runs without the plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import netns
from harness import slurm as slurm_harness

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "slurm-topo"
LEAVES = {"leaf01": ["ml-dev-env-0"], "leaf02": ["ml-dev-env-1"]}  # the netns hosts' names
OPTIONS = {"fabric.localize": {"bytes": 65536, "iters": 3, "warmup": 1}}


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, slurm_harness.SlurmCluster]]:
    why = slurm_harness.unavailable_reason() or netns.unavailable_reason()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurmtopo")
    shared = root / "shared"
    shared.mkdir()
    (root / "clusters").mkdir()
    (root / "clusters" / f"{CLUSTER}.yaml").write_text(
        f"cluster:\n  name: {CLUSTER}\n  namespace: unused\nplatform: slurm\n"
        f'slurm:\n  partition: debug\n  time_limit: "00:10:00"\n  exclusive: false\n'
        f"  gpus_flag: none\n  shared_dir: {shared}\n  python: {sys.executable}\n"
        "network:\n  tcp:\n    interface_exclude: lo\n"
        "gpus:\n  per_node: 1\n  type: cpu\n  default_nodes: 2\n"
    )
    (root / "options.json").write_text(json.dumps(OPTIONS))
    with slurm_harness.on_netns_hosts(str(root), topology=LEAVES) as sl:
        yield root, sl


def test_localize_racks_are_slurms_leaf_switches(
    cluster: tuple[Path, slurm_harness.SlurmCluster],
) -> None:
    root, sl = cluster
    shown = sl.run("scontrol", "show", "topology")
    assert "SwitchName=leaf01 Level=0" in shown.stdout, (
        shown.stdout + shown.stderr
    )  # the plugin is on
    # PYTHONPATH: this checkout's mlenv in the job's ranks too (sbatch passes the environment on)
    env = sl.env({"MLENV_ROOT": str(root), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlenv",
            "acceptance",
            "--cluster",
            CLUSTER,
            "--checks",
            "fabric.localize",
            "--localize",
            "--options",
            str(root / "options.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        check=False,
    )
    runs = sorted((root / "shared" / "results").glob("*/results.json"), key=os.path.getmtime)
    assert runs, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(runs[-1].read_text())
    (entry,) = [c for c in doc["checks"] if c["name"] == "fabric.localize"]
    details = entry["details"]
    assert details.get("racks") == {"ml-dev-env-0": "leaf01", "ml-dev-env-1": "leaf02"}, entry
    assert (
        "racks from Slurm's topology/tree (scontrol show topology): leaf01, leaf02"
        in details["notes"]
    )
    print(
        f"\n[measured] slurm topology/tree, 2 hosts: localize {entry['status']} {entry['reasons']}; "
        f"mlenv exit {r.returncode}"
    )
