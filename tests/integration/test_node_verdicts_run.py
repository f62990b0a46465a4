"""Node verdicts on real CPU ranks: two torchrun agents play two nodes (each its
own MLENV_HOST, and MLENV_NODE_NAME as the downward API gives a pod its Kubernetes
Node); rank 1 is made 4x slower (MLENV_FAULT). Its node must FAIL with the drain action,
named as the Node beside its pod, and the other node PASS; summary.md leads with the
Nodes table and junit.xml has a testcase per node. A corrupting rank named only by a
world result (compute.quorum) fails its Node the same way, with no environment check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mlenv.acceptance.run.world import free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _two_pods(
    tmp_path: Path, checks: str, fault: str, opts: Path | None = None
) -> list[tuple[subprocess.Popen[str], str]]:
    """Two torchrun agents as two pods on two Kubernetes Nodes; their (process, output)."""
    port = free_port()
    procs = []
    for i, (pod, node) in enumerate((("ml-dev-env-0", "worker-a"), ("ml-dev-env-1", "worker-b"))):
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            MLENV_HOST=pod,
            MLENV_NODE_NAME=node,
            OMP_NUM_THREADS="1",
            MLENV_FAULT=fault,
            MLENV_HISTORY_DIR=str(tmp_path / "history"),
        )
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--node-rank",
            str(i),
            "--nproc-per-node",
            "1",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            "-m",
            "mlenv.acceptance",
            "--checks",
            checks,
            *(["--options", str(opts)] if opts else []),
            "--report-dir",
            str(tmp_path / f"report{i}"),
            "--deadline",
            "60",
        ]
        procs.append(
            subprocess.Popen(
                cmd,
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return [(p, p.communicate(timeout=240)[0]) for p in procs]


@pytest.mark.serial  # judges one CPU rank against the other
def test_a_slow_rank_fails_its_node_with_the_action_and_the_other_node_passes(
    tmp_path: Path,
) -> None:
    opts = tmp_path / "options.yaml"
    # Eight multiplies a sample: one 256³ GEMM alone is too short a window to judge by.
    opts.write_text(
        "compute: {n: 256, iters: 5, warmup: 1, inner: 8}\nmemory: {bytes: 4194304, iters: 3}\n"
    )
    ran = _two_pods(
        tmp_path, "environment,compute.matmul,memory.copy", "slow:rank=1,factor=4", opts
    )
    procs, outs = [p for p, _ in ran], [o for _, o in ran]
    assert procs[0].returncode == 1, outs[0][-4000:]
    report = tmp_path / "report0"
    doc = json.loads((report / "results.json").read_text())
    nodes = {n["node"]: n for n in doc["node_verdicts"]["nodes"]}
    assert set(nodes) == {"worker-a", "worker-b"}
    slow = nodes["worker-b"]
    assert slow["hosts"] == ["ml-dev-env-1"] and slow["node_from"] == "kubernetes"
    assert slow["status"] == "FAIL" and slow["severity"] == "critical", slow
    assert slow["action"]["id"] == "drain" and slow["action"]["quarantine"] is True
    assert any(
        f["check"] == "compute.matmul" and f["rank"] == 1 and "is an outlier" in f["figure"]
        for f in slow["findings"]
    ), slow["findings"]
    assert nodes["worker-a"]["status"] == "PASS" and nodes["worker-a"]["action"]["id"] == "none"
    md = (report / "summary.md").read_text().splitlines()
    first = next(i for i, ln in enumerate(md) if ln.startswith("|"))
    assert md[first - 2] == "## Nodes" and md[first + 2].startswith(
        "| worker-b | ml-dev-env-1 | FAIL | critical"
    )
    cases = {
        c.get("name"): c
        for c in ET.parse(report / "junit.xml").getroot().iter("testcase")
        if c.get("classname") == "node"
    }
    assert set(cases) == {"worker-a (ml-dev-env-0)", "worker-b (ml-dev-env-1)"}
    assert cases["worker-b (ml-dev-env-1)"].find("failure") is not None


def test_a_corrupting_rank_fails_its_node_with_drain_without_the_environment_check(
    tmp_path: Path,
) -> None:
    """compute.quorum alone: the world result names rank 1; its Node (from the rank's own
    start-up report, no environment check) FAILs with drain, the other Node PASSes."""
    (p0, out0), _ = _two_pods(tmp_path, "compute.quorum", "corrupt:rank=1")
    assert p0.returncode == 1, out0[-4000:]
    doc = json.loads((tmp_path / "report0" / "results.json").read_text())
    assert doc["world"]["node_names"] == ["worker-a", "worker-b"]
    nodes = {n["node"]: n for n in doc["node_verdicts"]["nodes"]}
    assert set(nodes) == {"worker-a", "worker-b"}
    bad = nodes["worker-b"]
    assert bad["node_from"] == "kubernetes" and bad["hosts"] == ["ml-dev-env-1"]
    assert bad["status"] == "FAIL" and bad["action"]["id"] == "drain", bad
    assert bad["findings"][0]["check"] == "compute.quorum" and bad["findings"][0]["rank"] == 1
    assert "silent data corruption" in bad["findings"][0]["figure"]
    assert nodes["worker-a"]["status"] == "PASS", nodes["worker-a"]
