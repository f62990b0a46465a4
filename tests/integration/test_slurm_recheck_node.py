"""The node-health loop closed on a real slurmctld (the Slurm harness: two netns hosts):
a node whose ranks compute wrong answers → its verdict FAIL/``drain`` → ``quarantine
--apply`` drains it → ``mlenv recheck RUN`` trades the drain for a MAINT reservation of
the node, resumes it, runs the suite there (``--reservation --nodelist``) and drains it
again: with the fault kept the node FAILs and ``release --after`` keeps it; with the
fault gone it PASSes (the job ran on that node: the re-check run's only node is it) and
``release --after`` resumes it. A re-check stopped by SIGTERM restores the drain itself;
one SIGKILLed leaves the node resumed but reserved, and the next ``recheck`` (or
``release``) drains it again and deletes the reservation; a second re-check while one
runs is refused. Throughout, a job of another user and one of ours without the
reservation, both asking for that node, stay PENDING.

The fault is ``MLENV_FAULT`` (the suite's own test hook) in mlenv's environment, which
``sbatch --export=ALL`` hands to the ranks.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import slurm as slurm_harness
from test_slurm import CLUSTER, _skip_reason, config

from mlenv.platforms.slurmrecheck import STATE_DIR, reservation_name

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]

CHECKOUT = str(Path(__file__).resolve().parents[2])
BASELINE = str(Path(__file__).parent / "harness" / "baseline_harness.yaml")
SMALL = str(Path(__file__).parent / "harness" / "acceptance_small.json")
QUORUM = ["--", "--checks", "compute.quorum"]


@pytest.fixture(scope="module")
def harness(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, slurm_harness.SlurmCluster]]:
    why = _skip_reason()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurm-recheck-node")
    (root / "clusters").mkdir()
    (root / "shared").mkdir()
    (root / "clusters" / f"{CLUSTER}.yaml").write_text(config(root / "shared"))
    with slurm_harness.on_netns_hosts(str(root)) as sl:
        yield root, sl


def _env(root: Path, sl: slurm_harness.SlurmCluster, fault: str | None) -> dict[str, str]:
    env = sl.env(
        {
            "MLENV_ROOT": str(root),
            "PYTHONPATH": CHECKOUT,  # this checkout on the nodes too (the job exports ALL)
            "OMP_NUM_THREADS": "1",
            "MLENV_BASELINE": BASELINE,
            "MLENV_OPTIONS": SMALL,
        }
    )
    env.pop("MLENV_HISTORY_DIR", None)  # the history is <root>/reports
    env.pop("MLENV_FAULT", None)
    if fault:
        env["MLENV_FAULT"] = fault
    return env


def _mlenv(
    root: Path,
    sl: slurm_harness.SlurmCluster,
    *args: str,
    fault: str | None = None,
    timeout: float = 400,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlenv", *args],
        env=_env(root, sl, fault),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _start(root: Path, sl: slurm_harness.SlurmCluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mlenv", *args],
        env=_env(root, sl, None),
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _ok(r: subprocess.CompletedProcess[str], code: int, what: str) -> str:
    out = r.stdout + r.stderr
    assert r.returncode == code, f"{what}: exit {r.returncode}, expected {code}\n{out[-5000:]}"
    return out


def _reservation(sl: slurm_harness.SlurmCluster, name: str) -> str:
    """``scontrol show reservation`` of ``name`` ('' when there is none)."""
    r = sl.run("scontrol", "--oneliner", "show", "reservation", name)
    return r.stdout.strip() if r.returncode == 0 else ""


def _job_state(sl: slurm_harness.SlurmCluster, job: str) -> str:
    r = sl.run("squeue", "-h", f"--jobs={job}", "-o", "%T %N")
    return r.stdout.strip()


def _recheck_run(out: str, node: str) -> str:
    tail = out.split(f"re-check of node {node} (quarantined by run ", 1)[1]
    return tail.split("): run ", 1)[1].split()[0]


def _until(what: str, cond: Callable[[], bool], timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"not within {timeout:g} s: {what}"
        time.sleep(0.3)


def test_a_corrupting_node_is_drained_rechecked_in_a_reservation_and_resumed_only_on_a_pass(
    harness: tuple[Path, slurm_harness.SlurmCluster],
) -> None:
    root, sl = harness
    t0 = time.monotonic()
    sl.wait_idle(90)
    hist = root / "reports" / CLUSTER

    # 1. the run: node rank 1's ranks get a wrong quorum product; that node FAILs (drain)
    out = _ok(
        _mlenv(root, sl, "acceptance", "--cluster", CLUSTER, "--checks", "compute.quorum", fault="corrupt:node=1,check=compute.quorum"),
        1,
        "the corrupted run",
    )  # fmt: skip
    [run1] = [d for d in hist.iterdir() if (d / "results.json").is_file()]
    doc = json.loads((run1 / "results.json").read_text())
    verdicts = {n["node"]: n for n in doc["node_verdicts"]["nodes"]}
    assert sorted(verdicts) == sorted(sl.nodes), verdicts
    [bad] = [n for n, v in verdicts.items() if v["status"] == "FAIL"]
    [good] = [n for n in sl.nodes if n != bad]
    assert any(f.get("action") == "drain" for f in verdicts[bad]["findings"]), verdicts[bad]
    res = reservation_name(bad)

    # 2. quarantine: wrong answers need this run alone
    out = _ok(_mlenv(root, sl, "quarantine", run1.name, "--apply"), 0, "quarantine --apply")
    assert f"quarantined {bad}" in out, out
    st = _node_state(sl, bad)
    assert "DRAIN" in st["State"] and st["Reason"].startswith(f"mlenv {run1.name}: compute.quorum")
    reason = st["Reason"].split(" [", 1)[0]

    # jobs that want that node but not through the reservation: another user's, and ours
    others = [
        sl.run(
            "sbatch", "--parsable", "--uid=nobody", f"--nodelist={bad}", "--chdir=/tmp",
            f"--output={root}/nobody-%j.out", "--wrap", "echo ran on $SLURMD_NODENAME",
        ).stdout.strip(),
        sl.run(
            "sbatch", "--parsable", f"--nodelist={bad}", f"--output={root}/root-%j.out",
            "--wrap", "echo ran on $SLURMD_NODENAME",
        ).stdout.strip(),
    ]  # fmt: skip
    assert all(j.isdigit() for j in others), others

    def others_pending() -> None:
        for j in others:
            assert _job_state(sl, j).startswith("PENDING"), (j, _job_state(sl, j))
        assert not list(root.glob("nobody-*.out")) and not list(root.glob("root-*.out"))

    try:
        # 3. the fault kept (the re-check's world is that node alone: node rank 0)
        out = _ok(
            _mlenv(root, sl, "recheck", run1.name, *QUORUM, fault="corrupt:node=0,check=compute.quorum"),
            1,
            "re-check, fault kept",
        )  # fmt: skip
        kept = _recheck_run(out, bad)
        assert f"node {bad}: FAIL in re-check run {kept}; it stays quarantined" in out, out
        _drained_by_us(sl, bad, reason, res)
        others_pending()
        out = _ok(_mlenv(root, sl, "release", run1.name, "--after", kept), 0, "release, kept")
        assert f"kept: {bad}: run {kept} did not pass it (FAIL)" in out, out
        _drained_by_us(sl, bad, reason, res)

        # 4. SIGTERM while the suite runs in the reservation: mlenv drains again itself
        p = _start(root, sl, "recheck", run1.name, *QUORUM)
        _wait_running(root, run1, bad, res, sl)
        assert "DRAIN" not in _node_state(sl, bad)["State"]  # resumed, but reserved
        others_pending()
        # a second re-check of the node meanwhile: refused, nothing touched
        out = _ok(_mlenv(root, sl, "recheck", run1.name, *QUORUM), 3, "a second re-check")
        assert f"a re-check of node {bad} is in progress (reservation {res}" in out, out
        assert _reservation(sl, res) and p.poll() is None
        p.send_signal(signal.SIGTERM)
        said, _ = p.communicate(timeout=200)
        assert p.returncode == 143, said
        _drained_by_us(sl, bad, reason, res)
        assert not (run1 / STATE_DIR / f"{bad}.json").exists(), said

        # 5. SIGKILL there: the node stays resumed in its reservation (nothing else starts
        # there) until the next re-check finishes the stopped one, then passes the node
        _killed(root, sl, run1, bad, res)
        others_pending()
        out = _ok(_mlenv(root, sl, "recheck", run1.name, *QUORUM), 0, "re-check after a kill")
        assert f"node {bad}: finishing the re-check stopped at step 'running'" in out, out
        passed = _recheck_run(out, bad)
        assert f"release it with: mlenv release {run1.name} --after {passed}" in out, out
        rdoc = json.loads((hist / passed / "results.json").read_text())
        # the job ran on that node, and only there
        assert [n["node"] for n in rdoc["node_verdicts"]["nodes"]] == [bad], rdoc["node_verdicts"]
        assert rdoc["node_verdicts"]["nodes"][0]["status"] == "PASS"
        assert set(rdoc["world"]["hosts"]) == {bad} and rdoc["world"]["nodes"] == 1, rdoc["world"]
        assert json.loads((hist / passed / "record.json").read_text())["cluster"] == CLUSTER
        _drained_by_us(sl, bad, reason, res)  # a PASS is evidence; release frees the node
        others_pending()

        # 6. killed once more, then release --after the passing run: release finishes the
        # stopped re-check first (drained with the run's reason again), then resumes
        _killed(root, sl, run1, bad, res)
        for j in others:  # they would start the moment the node is free
            sl.run("scancel", j)
        out = _ok(_mlenv(root, sl, "release", run1.name, "--after", passed), 0, "release --after")
        assert f"node {bad}: finishing the re-check stopped" in out and f"released {bad}" in out, (
            out
        )
        assert "DRAIN" not in _node_state(sl, bad)["State"] and not _reservation(sl, res)
        assert "DRAIN" not in _node_state(sl, good)["State"]
        print(
            f"\n[measured] Slurm harness: the re-check loop on {bad}: {time.monotonic() - t0:.0f} s"
        )
    finally:
        for j in others:
            sl.run("scancel", j)
        with contextlib.suppress(Exception):
            sl.run("scancel", f"--reservation={res}")
            time.sleep(2)
            sl.run("scontrol", "delete", f"ReservationName={res}")
        for n in sl.nodes:
            with contextlib.suppress(RuntimeError):
                sl.set_node(n, "RESUME")


def _node_state(sl: slurm_harness.SlurmCluster, node: str) -> dict[str, str]:
    """State and Reason (all of it: it holds spaces) of ``scontrol show node``."""
    r = sl.run("scontrol", "--oneliner", "show", "node", node)
    state = next((w.split("=", 1)[1] for w in r.stdout.split() if w.startswith("State=")), "")
    reason = r.stdout.split("Reason=", 1)[1].strip() if "Reason=" in r.stdout else ""
    return {"State": state, "Reason": reason}


def _drained_by_us(sl: slurm_harness.SlurmCluster, node: str, reason: str, res: str) -> None:
    st = _node_state(sl, node)
    assert "DRAIN" in st["State"] and st["Reason"].startswith(reason), st
    assert not _reservation(sl, res), _reservation(sl, res)


def _wait_running(
    root: Path, run1: Path, node: str, res: str, sl: slurm_harness.SlurmCluster
) -> None:
    """Until the re-check's job runs in the reservation (its state file says so)."""
    state = run1 / STATE_DIR / f"{node}.json"

    def running() -> bool:
        with contextlib.suppress(OSError, ValueError):
            job = json.loads(state.read_text()).get("job_id")
            return bool(job) and _job_state(sl, job).startswith("RUNNING")
        return False

    _until(f"the re-check job of {node} running", running)
    assert _reservation(sl, res), "no reservation while the node is resumed"


def _killed(root: Path, sl: slurm_harness.SlurmCluster, run1: Path, node: str, res: str) -> None:
    """A re-check SIGKILLed while its job runs: the node resumed but in its reservation."""
    p = _start(root, sl, "recheck", run1.name, *QUORUM)
    try:
        _wait_running(root, run1, node, res, sl)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
    assert "DRAIN" not in _node_state(sl, node)["State"]
    assert f"Nodes={node}" in _reservation(sl, res) and "MAINT" in _reservation(sl, res)
    assert json.loads((run1 / STATE_DIR / f"{node}.json").read_text())["step"] == "running"
