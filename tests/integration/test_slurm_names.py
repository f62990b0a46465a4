"""Slurm node names that are not the hosts' names (``NodeName=gpu-a01 NodeHostname=…``,
as at sites whose hostnames are FQDNs or vendor names), on the real Slurm harness: each
rank learns its Slurm node name (SLURMD_NODENAME, exported by the batch script), node
verdicts name those nodes, and quarantine drains them on the real slurmctld.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import slurm as slurm_harness
from test_slurm import CLUSTER, Env, _node, _skip_reason, config

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging import nodeverdicts
from mlenv.acceptance.judging.verdict import judge

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]

ALIASES = ["gpu-a01", "gpu-a02"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    why = _skip_reason()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurm-names")
    (root / "clusters").mkdir()
    (root / "shared").mkdir()
    (root / "clusters" / f"{CLUSTER}.yaml").write_text(config(root / "shared"))
    with slurm_harness.on_netns_hosts(str(root), aliases=ALIASES) as sl:
        yield Env(root, sl)


def test_node_verdicts_and_quarantine_use_slurm_node_names(env: Env, tmp_path: Path) -> None:
    assert env.slurm.nodes == ALIASES and not set(ALIASES) & set(env.slurm.hostnames)
    env.slurm.wait_idle(90)
    r = env.mlenv("deploy", CLUSTER)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = env.record()
    state = env.wait_job_end(rec["job_id"], timeout=240)
    assert state == "COMPLETED", env.mlenv("logs", CLUSTER).stdout
    doc = json.loads((Path(rec["report_dir"]) / "results.json").read_text())
    # the ranks ran on the hosts (their own names); the verdicts name Slurm's nodes
    assert sorted(set(doc["world"]["hosts"])) == sorted(env.slurm.hostnames)
    assert sorted(n["node"] for n in doc["node_verdicts"]["nodes"]) == ALIASES, doc["node_verdicts"]
    # The same run with the second host's ranks failing matmul: its verdict is FAIL, and
    # quarantine --apply drains that node under its Slurm name.
    results = [CheckResult.from_dict(c) for c in doc["checks"]]
    bad_host = env.slurm.hostnames[1]
    flipped = [
        CheckResult.from_dict(
            {**r.to_dict(), "status": Status.FAIL.value, "reasons": ["tflops_fp32 low"]}
        )
        if r.name == "compute.matmul" and r.node == bad_host
        else r
        for r in results
    ]
    assert flipped != results, "the run has no compute.matmul result on the second host"
    j = judge(flipped)
    run = tmp_path / "20261129-010000-nnnnnn"
    run.mkdir()
    (run / "results.json").write_text(
        json.dumps(
            {
                **doc,
                "run_id": run.name,
                "verdict": j.verdict.value,
                "node_verdicts": nodeverdicts.build(j.results, j.findings, doc["world"]),
                "checks": [r.to_dict() for r in j.results],
            }
        )
    )
    (run / "record.json").write_text(json.dumps({"run_id": run.name, "cluster": CLUSTER}))
    try:
        r = env.mlenv(
            "quarantine",
            str(run),
            "--apply",
            "--confirm",
            "1/1",
            "--history-dir",
            str(tmp_path / "h"),
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "DRAIN" in _node(env, ALIASES[1])["State"], r.stdout + r.stderr
        # every node the plan names is a Slurm node, none a host name (on this shared
        # CPU harness the re-judged run may WARN or fail the other node too)
        assert not [h for h in env.slurm.hostnames if h in r.stdout + r.stderr], r.stdout
    finally:
        for node in ALIASES:
            with contextlib.suppress(RuntimeError):
                env.slurm.set_node(node, "RESUME")
