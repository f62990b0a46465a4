"""Pod-0 launches across "pods" on the netns harness: real sshd, pdsh, DeepSpeed launcher, gloo.

Needs root and openssh/pdsh/iproute2; skips with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import Cluster, unavailable_reason

pytestmark = pytest.mark.integration

_REASON = unavailable_reason()
needs_harness = pytest.mark.skipif(_REASON is not None, reason=f"netns harness: {_REASON}")
JOB = str(Path(__file__).parent / "jobs" / "allreduce_hosts.py")
POD = [sys.executable, "-m", "mlenv.pod"]
# Small sizes over the quick profile keep the harness runs short (training keeps quick's).
SMALL = str(Path(__file__).parent / "harness" / "acceptance_small.json")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(slots: int, extra: dict[str, str] | None = None) -> Cluster:
        c = Cluster(2, str(tmp_path))
        c.setup()
        made.append(c)
        for i in range(c.n):
            r = c.run(i, [*POD, "init"], c.env(i, {"MLENV_CPU_SLOTS": str(slots), **(extra or {})}),
                  timeout=60)
            assert r.returncode == 0, r.stdout
        return c

    yield make
    for c in made:
        c.teardown()


def _launch(c: Cluster, args: list[str], slots: int, timeout: float = 150) -> tuple[int, str]:
    r = c.run(0, [*POD, "launch", *args], c.env(0, {"MLENV_CPU_SLOTS": str(slots)}), timeout=timeout)
    return r.returncode, r.stdout


@needs_harness
@pytest.mark.parametrize("slots", [1, 2])
def test_deepspeed_job_spans_both_pods(cluster: Callable[..., Cluster], tmp_path: Path, slots: int) -> None:
    c = cluster(slots)
    out = tmp_path / "hosts.json"
    code, log = _launch(c, ["--deadline", "20", JOB, "--out", str(out)], slots)
    assert code == 0, log[-3000:]
    doc = json.loads(out.read_text())
    world = 2 * slots
    assert doc["world"] == world and doc["sum"] == sum(range(world))
    # Ranks are laid out node by node; each rank ran in its own pod with the forwarded env.
    assert [r["host"] for r in doc["ranks"]] == [f"ml-dev-env-{i // slots}" for i in range(world)]
    assert all(r["ds_accel"] == "cpu" and r["ns"] == "mlenv-test" for r in doc["ranks"])


@needs_harness
def test_preflight_names_the_pod_whose_sshd_is_down(cluster: Callable[..., Cluster]) -> None:
    c = cluster(1)
    pid_file = os.path.join(c.pods[1].dir, "home", ".mlenv", "ssh", "sshd.pid")
    r = c.run(1, ["sh", "-c", f'kill "$(cat {pid_file})"'], c.env(1))
    assert r.returncode == 0, r.stdout
    t0 = time.monotonic()
    code, log = _launch(c, ["--deadline", "3", JOB, "--out", "/dev/null"], 1)
    elapsed = time.monotonic() - t0
    assert code == 3, log
    assert "ml-dev-env-1.ml-dev-env-headless.mlenv-test.svc: port 2222 does not answer" in log
    assert "ml-dev-env-0." not in log.split("missing after")[1]
    assert elapsed < 3 + 2 + 5  # deadline + one connect timeout + interpreter start-up


@needs_harness
def test_torchrun_path_without_ssh(cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    c = cluster(2)
    out = tmp_path / "hosts.json"
    procs = [c.popen(i, [*POD, "run-torchrun", "--run-id", "t1", JOB, "--out", str(out)],
                     c.env(i, {"MLENV_CPU_SLOTS": "2"}), stdout=open(tmp_path / f"tr{i}.log", "w"),
                     stderr=__import__("subprocess").STDOUT) for i in range(2)]
    codes = [p.wait(timeout=150) for p in procs]
    logs = [(tmp_path / f"tr{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], logs
    doc = json.loads(out.read_text())
    assert [r["host"] for r in doc["ranks"]] == ["ml-dev-env-0"] * 2 + ["ml-dev-env-1"] * 2


@needs_harness
@pytest.mark.parametrize("slots", [1, 2])
def test_acceptance_suite_passes_and_attributes_nodes(cluster: Callable[..., Cluster], tmp_path: Path,
                                                      slots: int) -> None:
    c = cluster(slots)
    rdir = tmp_path / "report"
    # 2 x 1: the whole quick suite (DeepSpeed training included). 2 x 2: four CPU ranks
    # on a 2-core machine make training slow, so that run covers every other family.
    picked = ["--checks", "environment,compute,memory,collectives"] if slots == 2 else []
    code, log = _launch(c, ["--deadline", "20", "--profile", "quick", "--report-dir", str(rdir), "--",
                            "--options", SMALL, *picked], slots, 240)
    doc = json.loads((rdir / "results.json").read_text())
    assert code == 0 and doc["verdict"] == "PASS", log[-4000:]
    world = 2 * slots
    assert doc["world"]["nodes"] == 2 and doc["world"]["ranks"] == world
    assert doc["world"]["hosts"] == [f"ml-dev-env-{r // slots}" for r in range(world)]
    per_rank = [chk for chk in doc["checks"] if chk.get("rank") is not None]
    # Every rank reported, and each rank-level entry names the pod that rank ran in.
    assert {chk["rank"] for chk in per_rank} == set(range(world))
    for chk in per_rank:
        assert chk["node"] == f"ml-dev-env-{chk['rank'] // slots}", chk
    names = {chk["name"] for chk in doc["checks"]}
    assert {"environment", "compute.matmul", "collectives.all_reduce"} <= names
    if slots == 1:
        assert {"training.deepspeed", "training.step_time"} <= names


@needs_harness
def test_node_killed_mid_run_is_error_naming_it(cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    # 'pod init' puts MLENV_* into .deepspeed_env, so every rank sees the shorter
    # heartbeat staleness: rank 0 declares the lost rank dead after 5 s, not 15.
    c = cluster(1, {"MLENV_HEARTBEAT_STALE_S": "5"})
    rdir = tmp_path / "report"
    env = c.env(0, {"MLENV_CPU_SLOTS": "1"})
    import subprocess

    p = c.popen(0, [*POD, "launch", "--deadline", "20", "--profile", "quick", "--report-dir", str(rdir), "--",
                    "--options", SMALL], env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # Wait until the first result line is written, then end all of node 1 (its PID 1:
    # sshd, the ranks, everything), like a node lost mid-run.
    jsonl = rdir / "results.jsonl"
    end = time.monotonic() + 120
    while time.monotonic() < end and not (jsonl.exists() and jsonl.read_text().strip()):
        time.sleep(0.2)
    c.kill_pod(1)
    out, _ = p.communicate(timeout=240)
    assert p.returncode == 3, out[-4000:]
    doc = json.loads((rdir / "results.json").read_text())
    assert doc["verdict"] == "ERROR"
    assert any("rank 1 (ml-dev-env-1)" in r for r in doc["reasons"]), doc["reasons"]
    assert not any("rank 0 (ml-dev-env-0) died" in r for r in doc["reasons"]), doc["reasons"]
    # The check node 1 was lost in is an ERROR attributed to node 1 ...
    assert any(chk["status"] == "ERROR" and chk["node"] == "ml-dev-env-1" for chk in doc["checks"]), doc["checks"]
    # ... and what was measured before the kill is kept, in results.json and results.jsonl.
    assert any(chk["status"] == "PASS" for chk in doc["checks"])
    assert jsonl.read_text().strip()
