"""Racks from Slurm's topology/tree plugin: ``scontrol show topology`` as
captured from Slurm 22.05 on the harness, parsed into the racks ``MLENV_TOPOLOGY`` carries,
and rank 0 reading them when the job has no topology of its own."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mlenv.acceptance.checks import localize as LC
from mlenv.acceptance.evidence import slurmtopo
from mlenv.acceptance.evidence import topology as T

# Captured: `scontrol show topology` with TopologyPlugin=topology/tree (two leaves, a spine).
TREE = (
    "SwitchName=leaf01 Level=0 LinkSpeed=1 Nodes=hgx[01-02]\n"
    "SwitchName=IB_Leaf.2 Level=0 LinkSpeed=1 Nodes=hgx[03-04],gpu7\n"
    "SwitchName=spine Level=1 LinkSpeed=1 Nodes=gpu7,hgx[01-04] Switches=leaf01,IB_Leaf.2\n"
)
# Captured: the same without the plugin (stdout empty, this on stderr, exit 0).
NO_PLUGIN_ERR = "scontrol: error: No topology information available\n"


def test_leaf_switches_become_racks_of_the_jobs_nodes() -> None:
    racks, notes = slurmtopo.leaf_racks(TREE, {"hgx01", "hgx02", "hgx03", "gpu7", "other"})
    assert racks == {"leaf01": ["hgx01", "hgx02"], "ib-leaf-2": ["hgx03", "gpu7"]} and notes == []
    assert slurmtopo.leaf_racks(TREE)[0]["ib-leaf-2"] == [
        "hgx03",
        "hgx04",
        "gpu7",
    ]  # no job: every node
    assert slurmtopo.leaf_racks(TREE, {"hgx01"})[0] == {
        "leaf01": ["hgx01"]
    }  # a rack without job nodes: left out


def test_no_plugin_and_odd_lines_give_no_racks_or_a_note() -> None:
    assert slurmtopo.leaf_racks("") == ({}, [])
    assert slurmtopo.leaf_racks(NO_PLUGIN_ERR) == (
        {},
        [],
    )  # scontrol's error line, if it reached stdout
    racks, notes = slurmtopo.leaf_racks(
        "SwitchName=bad Level=0 Nodes=hgx[04-01]\n" + TREE, {"hgx01"}
    )
    assert racks == {"leaf01": ["hgx01"]} and notes == ["switch bad: range 04-01 goes backwards"]
    racks, notes = slurmtopo.leaf_racks(
        "SwitchName=l1 Level=0 Nodes=a,b\nSwitchName=L1 Level=0 Nodes=c\n"
        "SwitchName=l2 Level=0 Nodes=b\n"
    )
    assert racks == {"l1": ["a", "b"]}
    assert notes == [
        "leaf switch 'L1': not usable as a rack name (reads as 'l1''s); its nodes are in no rack",
        "node b is under leaf switches l1 and l2: kept in l1",
    ]


def _scontrol(tmp_path: Path, stdout: str, stderr: str = "", rc: int = 0) -> dict[str, str]:
    """A PATH whose scontrol prints what a real one printed (the check runs the command)."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    (d / "out").write_text(stdout)
    (d / "err").write_text(stderr)
    script = d / "scontrol"
    script.write_text(
        f'#!/bin/sh\n[ "$*" = "show topology" ] || exit 9\ncat "{d}/out"\ncat "{d}/err" >&2\nexit {rc}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{d}{os.pathsep}{os.environ.get('PATH', '')}", "MLENV_PLATFORM": "slurm"}


LAYOUT = [
    (0, 0, "hgx01", ""),
    (0, 1, "hgx01", ""),
    (1, 0, "hgx03.cluster.local", ""),
    (2, 0, "hgx09", ""),
]


def test_rank0_reads_slurms_racks_when_the_job_has_none(tmp_path: Path) -> None:
    env = _scontrol(tmp_path, TREE)
    racks, note = LC.racks_of(LAYOUT, env)
    assert racks == ["leaf01", "ib-leaf-2", None]
    assert note == (
        "racks from Slurm's topology/tree (scontrol show topology): leaf01, ib-leaf-2; "
        "not in MLENV_TOPOLOGY: hgx09"
    )
    text, _ = LC.slurm_topology(env, ["hgx01", "hgx03"])
    assert T.parse(text) == {"leaf01": ["hgx01"], "ib-leaf-2": ["hgx03"]}  # the variable's own form


def test_a_topology_from_the_config_wins_and_elsewhere_slurm_is_not_asked(tmp_path: Path) -> None:
    env = _scontrol(tmp_path, TREE)
    own = {**env, T.ENV: json.dumps({"r1": ["hgx01", "hgx03"]})}
    assert LC.racks_of(LAYOUT, own) == (["r1", "r1", None], "not in MLENV_TOPOLOGY: hgx09")
    assert LC.racks_of(LAYOUT, {**env, "MLENV_PLATFORM": "hosts"}) == (None, "")


@pytest.mark.parametrize(
    "out,err,rc,note",
    [
        ("", NO_PLUGIN_ERR, 0, ""),  # no plugin: nothing to say
        (
            "",
            "scontrol: error: Unable to contact slurm controller\n",
            1,
            "no racks from Slurm (scontrol show topology: scontrol: error: Unable to contact slurm controller)",
        ),
        (
            "SwitchName=x Level=0 Nodes=elsewhere\n",
            "",
            0,
            "no racks from Slurm: no leaf switch of scontrol show topology lists the job's nodes",
        ),
    ],
)
def test_no_racks_from_slurm_is_a_run_without_racks(
    tmp_path: Path, out: str, err: str, rc: int, note: str
) -> None:
    assert LC.racks_of(LAYOUT, _scontrol(tmp_path, out, err, rc)) == (None, note)


def test_no_scontrol_at_all_is_a_note(tmp_path: Path) -> None:
    racks, note = LC.racks_of(LAYOUT, {"PATH": str(tmp_path), "MLENV_PLATFORM": "slurm"})
    assert racks is None and note.startswith("no racks from Slurm (scontrol show topology: ")
