"""Faults the suite must survive, each a real multi-process run (2 CPU ranks, gloo).

Killed rank, hung rank, slow rank, corrupted compute rank, and a killed rank with no
launcher to stop the others (the store heartbeat names it). Each must finish within
its deadline with ERROR/FAIL naming the rank and host, keeping what was measured.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_acceptance_local import ROOT, run_local

pytestmark = pytest.mark.integration
HOST = socket.gethostname()
DEADLINE = 12.0


def _doc(report: Path) -> dict:
    return json.loads((report / "results.json").read_text())


def test_killed_rank_is_error_naming_rank_and_host_with_partial_results(tmp_path: Path) -> None:
    t0 = time.monotonic()
    p, report = run_local(tmp_path, "--checks", "environment,probe", "--deadline", str(DEADLINE),
                          fault="kill:rank=1,check=probe", extra_env={"MLENV_ACCEPTANCE_PLUGINS": "acceptance_probes"})
    wall = time.monotonic() - t0
    assert p.returncode == 3, (p.stdout + p.stderr)[-4000:]
    doc = _doc(report)
    assert doc["verdict"] == "ERROR"
    assert any(f"rank 1 ({HOST}) died during probe.allreduce" in r for r in doc["reasons"]), doc["reasons"]
    # environment was measured on both ranks before the kill and is kept.
    assert sorted(c["rank"] for c in doc["checks"] if c["name"] == "environment" and c["status"] == "PASS") == [0, 1]
    assert wall < 60 + DEADLINE  # start-up + one deadline, not a hang


def test_hung_rank_is_error_within_the_deadline(tmp_path: Path) -> None:
    t0 = time.monotonic()
    p, report = run_local(tmp_path, "--checks", "compute,memory", "--deadline", str(DEADLINE),
                          fault="hang:rank=1,check=compute.quorum")
    wall = time.monotonic() - t0
    assert p.returncode == 3, (p.stdout + p.stderr)[-4000:]
    doc = _doc(report)
    assert doc["verdict"] == "ERROR"
    assert any(f"rank 1 ({HOST}) did not report compute.quorum within the deadline" in r
               for r in doc["reasons"]), doc["reasons"]
    # what was measured before the hang is kept; what comes after is not run
    assert sorted(c["rank"] for c in doc["checks"] if c["name"] == "compute.matmul") == [0, 1]
    rest = [c for c in doc["checks"] if c["name"] == "memory.copy"]
    assert rest and all(c["status"] == "SKIP" for c in rest)
    assert wall < 60 + 2 * DEADLINE


@pytest.mark.serial  # rank 1 an outlier and rank 0 not
def test_slow_rank_named_as_outlier(tmp_path: Path) -> None:
    p, report = run_local(tmp_path, "--checks", "compute.matmul,probe", fault="slow:rank=1,factor=4",
                          extra_env={"MLENV_ACCEPTANCE_PLUGINS": "acceptance_probes"})
    doc = _doc(report)
    assert p.returncode == 1, (p.stdout + p.stderr)[-4000:]
    assert doc["verdict"] == "FAIL"
    for check in ("compute.matmul", "probe.allreduce"):
        assert any(r.startswith(f"FAIL: {check} rank 1 ({HOST})") and "is an outlier" in r
                   for r in doc["reasons"]), (check, doc["reasons"])
    assert not any("rank 0" in r and "outlier" in r for r in doc["reasons"])


def test_corrupted_rank_named_by_quorum(tmp_path: Path) -> None:
    p, report = run_local(tmp_path, "--checks", "compute.quorum", fault="corrupt:rank=1")
    assert p.returncode == 1, (p.stdout + p.stderr)[-4000:]
    doc = _doc(report)
    q = [c for c in doc["checks"] if c["name"] == "compute.quorum"]
    assert q and q[0]["status"] == "FAIL" and q[0]["metrics"]["disagreeing_ranks"] == 1
    assert any("rank 1" in r and HOST in r for r in q[0]["reasons"]), q[0]["reasons"]


def test_broken_baseline_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: X\nrules:\n  - {check: compute.matmul, metric: tflops_fp32, op: '=>', value: 1, source: s}\n")
    p, report = run_local(tmp_path, "--baseline", str(bad), timeout=60)
    assert p.returncode == 2
    assert f"{bad}:3:" in p.stderr and "expected one of >=, <=, >, <, ==" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_dead_rank_named_by_heartbeat_without_a_launcher(tmp_path: Path) -> None:
    """Two independent processes (as with one torchrun per pod): nobody stops rank 0."""
    from mlenv.acceptance.run.world import free_port

    port = free_port()
    report = tmp_path / "report"
    base = dict(os.environ, PYTHONPATH=f"{ROOT / 'tests' / 'integration'}{os.pathsep}{ROOT}",
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                OMP_NUM_THREADS="1", MLENV_ACCEPTANCE_PLUGINS="acceptance_probes",
                MLENV_FAULT="kill:rank=1,check=probe", MLENV_HEARTBEAT_STALE_S="3")
    cmd = [sys.executable, "-m", "mlenv.acceptance", "--checks", "environment,probe", "--report-dir", str(report),
           "--deadline", "60"]
    t0 = time.monotonic()
    procs = [subprocess.Popen(cmd, env=dict(base, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    out0, _ = procs[0].communicate(timeout=120)
    procs[1].wait(timeout=30)
    wall = time.monotonic() - t0
    assert procs[0].returncode == 3, out0[-4000:]
    assert procs[1].returncode == 1  # the injected kill
    doc = _doc(report)
    assert any(f"rank 1 ({HOST}) died during probe.allreduce: no result and no heartbeat" in r
               for r in doc["reasons"]), doc["reasons"]
    assert wall < 60  # found by the heartbeat, long before the 60 s deadline


def _rank_alone(rank: int, world: int, per_node: int, port: int, report: Path, deadline: float) -> \
        subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank % per_node),
               LOCAL_WORLD_SIZE=str(per_node), OMP_NUM_THREADS="1", MLENV_FAULT="")
    cmd = [sys.executable, "-m", "mlenv.acceptance", "--checks", "environment", "--report-dir", str(report),
           "--deadline", str(deadline)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_ranks_that_never_join_are_named_with_their_node_within_the_deadline(tmp_path: Path) -> None:
    """World of 4 on 2 nodes × 2; rank 3 (node 1) is never started: rank 0 names it and its host."""
    from mlenv.acceptance.run.world import free_port

    port, report = free_port(), tmp_path / "report"
    t0 = time.monotonic()
    procs = [_rank_alone(r, 4, 2, port, report, 6.0) for r in (0, 1, 2)]
    outs = [p.communicate(timeout=90)[0] for p in procs]
    wall = time.monotonic() - t0
    assert [p.returncode for p in procs] == [3, 3, 3], outs
    doc = _doc(report)
    assert doc["verdict"] == "ERROR"
    want = f"rank 3 (node 1: {HOST}) never joined the run within 6 s"
    assert any(want in r for r in doc["reasons"]), doc["reasons"]
    # the ranks that did join learn why from rank 0 instead of timing out on their own
    assert all(want in o for o in outs[1:]), outs
    assert wall < 45  # start-up + one deadline


def test_a_rank_whose_rank_0_never_starts_says_so_and_exits_3(tmp_path: Path) -> None:
    from mlenv.acceptance.run.world import free_port

    p = _rank_alone(1, 2, 1, free_port(), tmp_path / "report", 3.0)
    out = p.communicate(timeout=90)[0]
    assert p.returncode == 3, out
    assert "cannot reach the run's rendezvous store at 127.0.0.1" in out and "rank 0 not started" in out
    assert not (tmp_path / "report" / "results.json").exists()  # only rank 0 writes reports
