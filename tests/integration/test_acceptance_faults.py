"""Faults the suite must survive, each a real multi-process run (2 CPU ranks, gloo).

Killed rank, hung rank, slow rank, corrupted compute rank, a killed rank with no
launcher to stop the others (the store heartbeat names it), and a stopped (SIGSTOP)
rank 0 or 1 (named hung, with its host, not "died", and the run finalised).
Each must finish within its deadline with ERROR/FAIL naming the rank and host, keeping
what was measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest
from test_acceptance_local import MLENV, ROOT, run_local
from test_run_records import _env, _run_processes, _wait_for_results

pytestmark = pytest.mark.integration
HOST = socket.gethostname()
DEADLINE = 12.0


def _doc(report: Path) -> dict:
    return json.loads((report / "results.json").read_text())


def test_killed_rank_is_error_naming_rank_and_host_with_partial_results(tmp_path: Path) -> None:
    t0 = time.monotonic()
    p, report = run_local(
        tmp_path,
        "--checks",
        "environment,probe",
        "--deadline",
        str(DEADLINE),
        fault="kill:rank=1,check=probe",
        extra_env={"MLENV_ACCEPTANCE_PLUGINS": "acceptance_probes"},
    )
    wall = time.monotonic() - t0
    assert p.returncode == 3, (p.stdout + p.stderr)[-4000:]
    doc = _doc(report)
    assert doc["verdict"] == "ERROR"
    assert any(f"rank 1 ({HOST}) died during probe.allreduce" in r for r in doc["reasons"]), doc[
        "reasons"
    ]
    # environment was measured on both ranks before the kill and is kept.
    assert sorted(
        c["rank"] for c in doc["checks"] if c["name"] == "environment" and c["status"] == "PASS"
    ) == [0, 1]
    assert wall < 60 + DEADLINE  # start-up + one deadline, not a hang


def test_hung_rank_is_error_within_the_deadline(tmp_path: Path) -> None:
    t0 = time.monotonic()
    p, report = run_local(
        tmp_path,
        "--checks",
        "compute,memory",
        "--deadline",
        str(DEADLINE),
        fault="hang:rank=1,check=compute.quorum",
    )
    wall = time.monotonic() - t0
    assert p.returncode == 3, (p.stdout + p.stderr)[-4000:]
    doc = _doc(report)
    assert doc["verdict"] == "ERROR"
    assert any(
        f"rank 1 ({HOST}) did not report compute.quorum within the deadline" in r
        for r in doc["reasons"]
    ), doc["reasons"]
    # what was measured before the hang is kept; what comes after is not run
    assert sorted(c["rank"] for c in doc["checks"] if c["name"] == "compute.matmul") == [0, 1]
    rest = [c for c in doc["checks"] if c["name"] == "memory.copy"]
    assert rest and all(c["status"] == "SKIP" for c in rest)
    assert wall < 60 + 2 * DEADLINE


@pytest.mark.serial  # rank 1 an outlier and rank 0 not
def test_slow_rank_named_as_outlier(tmp_path: Path) -> None:
    p, report = run_local(
        tmp_path,
        "--checks",
        "compute.matmul,probe",
        fault="slow:rank=1,factor=4",
        extra_env={"MLENV_ACCEPTANCE_PLUGINS": "acceptance_probes"},
    )
    doc = _doc(report)
    assert p.returncode == 1, (p.stdout + p.stderr)[-4000:]
    assert doc["verdict"] == "FAIL"
    for check in ("compute.matmul", "probe.allreduce"):
        assert any(
            r.startswith(f"FAIL: {check} rank 1 ({HOST})") and "is an outlier" in r
            for r in doc["reasons"]
        ), (check, doc["reasons"])
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
    bad.write_text(
        "model: X\nrules:\n  - {check: compute.matmul, metric: tflops_fp32, op: '=>', value: 1, source: s}\n"
    )
    p, report = run_local(tmp_path, "--baseline", str(bad), timeout=60)
    assert p.returncode == 2
    assert f"{bad}:3:" in p.stderr and "expected one of >=, <=, >, <, ==" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_dead_rank_named_by_heartbeat_without_a_launcher(tmp_path: Path) -> None:
    """Two independent processes (as with one torchrun per pod): nobody stops rank 0."""
    from mlenv.acceptance.run.world import free_port

    port = free_port()
    report = tmp_path / "report"
    base = dict(
        os.environ,
        PYTHONPATH=f"{ROOT / 'tests' / 'integration'}{os.pathsep}{ROOT}",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        OMP_NUM_THREADS="1",
        MLENV_ACCEPTANCE_PLUGINS="acceptance_probes",
        MLENV_FAULT="kill:rank=1,check=probe",
        MLENV_HEARTBEAT_STALE_S="3",
    )
    cmd = [
        sys.executable,
        "-m",
        "mlenv.acceptance",
        "--checks",
        "environment,probe",
        "--report-dir",
        str(report),
        "--deadline",
        "60",
    ]
    t0 = time.monotonic()
    # cwd: rank 0's history goes to <cwd>/reports/ without MLENV_HISTORY_DIR (it went into the checkout)
    procs = [
        subprocess.Popen(
            cmd,
            env=dict(base, RANK=str(r), LOCAL_RANK=str(r)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
        )
        for r in (0, 1)
    ]
    out0, _ = procs[0].communicate(timeout=120)
    procs[1].wait(timeout=30)
    wall = time.monotonic() - t0
    assert procs[0].returncode == 3, out0[-4000:]
    assert procs[1].returncode == 1  # the injected kill
    doc = _doc(report)
    assert any(
        f"rank 1 ({HOST}) died during probe.allreduce: no result and no heartbeat" in r
        for r in doc["reasons"]
    ), doc["reasons"]
    assert wall < 60  # found by the heartbeat, long before the 60 s deadline


def _rank_alone(
    rank: int, world: int, per_node: int, port: int, report: Path, deadline: float
) -> subprocess.Popen[str]:
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world),
        RANK=str(rank),
        LOCAL_RANK=str(rank % per_node),
        LOCAL_WORLD_SIZE=str(per_node),
        OMP_NUM_THREADS="1",
        MLENV_FAULT="",
    )
    cmd = [
        sys.executable,
        "-m",
        "mlenv.acceptance",
        "--checks",
        "environment",
        "--report-dir",
        str(report),
        "--deadline",
        str(deadline),
    ]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=report.parent
    )  # rank 0's history: <cwd>/reports/, not the checkout's


def test_ranks_that_never_join_are_named_with_their_node_within_the_deadline(
    tmp_path: Path,
) -> None:
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
    assert (
        "cannot reach the run's rendezvous store at 127.0.0.1" in out
        and "rank 0 not started" in out
    )
    assert not (tmp_path / "report" / "results.json").exists()  # only rank 0 writes reports


# -- a stopped rank ------------------------------------------------------------

STOP_DEADLINE = 10.0


def _rank_pids(report: Path) -> dict[int, int]:
    """rank → pid of the run's rank processes (each carries the report folder and RANK)."""
    found: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, KeyError):
            argv = (d / "cmdline").read_bytes().split(b"\0")
            if b"mlenv.acceptance" not in argv or str(report).encode() not in argv:
                continue
            env = dict(
                kv.split("=", 1)
                for kv in (d / "environ").read_bytes().decode(errors="replace").split("\0")
                if "=" in kv
            )
            found[int(env["RANK"])] = int(d.name)
    return found


def _lines(stream: IO[str] | None, into: list[tuple[float, str]]) -> threading.Thread:
    assert stream is not None

    def read() -> None:
        for line in stream:
            into.append((time.monotonic(), line.rstrip("\n")))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def _finalise_time(tmp_path: Path, report: Path) -> float:
    """What finalising a report takes on this machine now: `mlenv finalize` of a copy of the
    run's run.json and results.jsonl (interpreter start-up, judging, plots, history line).
    The bound below adds it: on a loaded 2-core machine that alone takes seconds."""
    doc = json.loads((report / "results.json").read_text())
    copy = tmp_path / "copy" / doc["run_id"]
    copy.mkdir(parents=True)
    for f in ("run.json", "results.jsonl"):
        shutil.copy(report / f, copy / f)
    t0 = time.monotonic()
    p = subprocess.run(
        [*MLENV, "finalize", str(copy), "--history-dir", str(tmp_path / "hist-copy")],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return time.monotonic() - t0


def _stop_a_rank(tmp_path: Path, rank: int) -> dict[str, Any]:
    """`mlenv acceptance --local` (2 ranks, environment then a 5 s pause.sleep, deadline 10 s);
    once both are in the pause, SIGSTOP ``rank``. Returns what the test judges: the exit
    code, the time from the stop to each output line and to the exit, the pids, the report."""
    report = (tmp_path / "report").resolve()
    env = _env(
        tmp_path,
        MLENV_ACCEPTANCE_PLUGINS="acceptance_probes",
        MLENV_PROBE_PAUSE_S="5",
        MLENV_HEARTBEAT_STALE_S="3",
    )  # a stopped rank's heartbeat is stale long before the deadline
    p = subprocess.Popen(
        [
            *MLENV,
            "acceptance",
            "--local",
            "--nproc",
            "2",
            "--checks",
            "environment,pause",
            "--deadline",
            str(STOP_DEADLINE),
            "--report-dir",
            str(report),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    out: list[tuple[float, str]] = []
    err: list[tuple[float, str]] = []
    readers = [_lines(p.stdout, out), _lines(p.stderr, err)]
    pids: dict[int, int] = {}
    try:
        _wait_for_results(report, 2, p)  # environment, both ranks
        assert p.poll() is None, (
            "the run ended before the stop: " + "\n".join(x for _, x in out + err)[-3000:]
        )
        time.sleep(1.0)  # both ranks are in pause.sleep now (5 s)
        pids = _rank_pids(report)
        assert sorted(pids) == [0, 1], pids
        os.kill(pids[rank], signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            p.wait(timeout=STOP_DEADLINE + 100)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"rank {rank} stopped: still running {STOP_DEADLINE + 100:g} s later (a silent stop): "
                + "\n".join(x for _, x in out + err)[-3000:]
            )
        ended = time.monotonic()
        for t in readers:
            t.join(timeout=10)
    finally:
        for pid in pids.values():  # nothing stopped may outlive the test, whatever happened
            for sig in (signal.SIGKILL, signal.SIGCONT):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        if p.poll() is None:
            p.kill()
            p.wait()
    return {
        "rc": p.returncode,
        "exit_s": ended - stopped,
        "pids": pids,
        "report": report,
        "out": [(t - stopped, x) for t, x in out],
        "err": [(t - stopped, x) for t, x in err],
        "text": "\n".join(x for _, x in out + err),
    }


def _judge_the_stopped_run(tmp_path: Path, run: dict[str, Any], said: str) -> dict[str, Any]:
    """What both cases share: exit 3 (ERROR); ``said`` printed within the deadline + 10 s of
    the stop; the CLI ended within that plus what finalising takes here; what was measured
    kept; the history line; no process of the run left."""
    assert run["rc"] == 3, run["text"][-4000:]
    when = [t for t, x in run["out"] + run["err"] if said in x]
    assert when, (said, run["text"][-4000:])
    assert min(when) <= STOP_DEADLINE + 10, f"named {min(when):.1f} s after the stop"
    report = run["report"]
    doc = json.loads((report / "results.json").read_text())
    assert doc["verdict"] == "ERROR"
    assert sorted(
        c["rank"] for c in doc["checks"] if c["name"] == "environment" and c["status"] == "PASS"
    ) == [0, 1]
    (rec,) = [
        json.loads(x)
        for x in (tmp_path / "hist" / "local" / "history.jsonl").read_text().splitlines()
    ]
    assert rec["run_id"] == doc["run_id"] and rec["verdict"] == "ERROR"
    assert not (report / ".mlenv-run.lock").exists()
    assert _run_processes(str(report)) == []  # the stopped rank too: killed, not left stopped
    finalise = _finalise_time(tmp_path, report)
    print(
        f"[measured] {said!r}: said {min(when):.1f} s after the stop, CLI ended after {run['exit_s']:.1f} s "
        f"(finalising a copy alone: {finalise:.1f} s)"
    )
    assert run["exit_s"] <= STOP_DEADLINE + 10 + finalise, (
        f"ended {run['exit_s']:.1f} s after the stop (finalising takes {finalise:.1f} s here)"
    )
    return doc


def test_a_stopped_rank_0_is_named_hung_with_its_host_and_the_run_finalised(tmp_path: Path) -> None:
    """SIGSTOP on rank 0 printed nothing until the CLI's whole budget ran out,
    and the reason did not name rank 0. Rank 0 hosts the run's store, so the other rank
    cannot report for it: the CLI sees its state (T) and, past the check's deadline, says
    so in one line, stops the run and finalises the report from results.jsonl."""
    run = _stop_a_rank(tmp_path, 0)
    pid = run["pids"][0]
    said = (
        f"error: rank 0 ({HOST}) hung: its process, pid {pid}, has been stopped (state T: SIGSTOP, Ctrl-Z or a "
        "debugger) for "
    )
    doc = _judge_the_stopped_run(tmp_path, run, said)
    assert doc["reasons"][0].startswith(
        f"rank 0 ({HOST}) hung during pause.sleep: its process, pid {pid}, has been stopped (state T: "
    ), doc["reasons"]
    assert "not measured: pause.sleep" in doc["reasons"][0]
    assert not any("died" in r for r in doc["reasons"]), doc["reasons"]
    assert "Traceback" not in run["text"]


def test_a_stopped_rank_1_is_named_hung_with_its_host_not_died(tmp_path: Path) -> None:
    """a stopped rank 1 was reported as "died (killed or crashed)" once its
    heartbeat went stale, though it was alive. Its process is there, stopped: rank 0 waits
    for it until the check's deadline (it may be continued), then names it hung."""
    run = _stop_a_rank(tmp_path, 1)
    pid = run["pids"][1]
    doc = _judge_the_stopped_run(tmp_path, run, f"rank 1 ({HOST}) hung during pause.sleep")
    (why,) = [
        r for r in doc["reasons"] if r.startswith(f"ERROR: rank 1 ({HOST}) hung during pause.sleep")
    ]
    assert why.endswith(
        f"its process, pid {pid}, is stopped (state T: SIGSTOP, Ctrl-Z or a debugger)"
    ), why
    assert not any("died" in r for r in doc["reasons"]), doc["reasons"]
    # rank 0's own pause.sleep was measured and is kept
    assert [
        c["status"] for c in doc["checks"] if c["name"] == "pause.sleep" and c["rank"] == 0
    ] == ["PASS"]


def test_a_stopped_rank_0_without_a_launcher_is_named_by_the_other_rank(tmp_path: Path) -> None:
    """Two independent processes (one torchrun per pod, no CLI watching): rank 0, which hosts
    the store, is stopped. Rank 1 names it hung with its host and state within the deadline
    + 10 s, leaves the line for `mlenv finalize`, and exits 3 instead of waiting for ever."""
    from mlenv.acceptance.run.world import free_port

    report = tmp_path / "report"
    base = dict(
        _env(tmp_path),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        OMP_NUM_THREADS="1",
        MLENV_ACCEPTANCE_PLUGINS="acceptance_probes",
        MLENV_PROBE_PAUSE_S="5",
        MLENV_FAULT="",
    )
    cmd = [
        sys.executable,
        "-m",
        "mlenv.acceptance",
        "--checks",
        "environment,pause",
        "--report-dir",
        str(report),
        "--deadline",
        str(STOP_DEADLINE),
    ]
    procs = [
        subprocess.Popen(
            cmd,
            env=dict(base, RANK=str(r), LOCAL_RANK=str(r)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in (0, 1)
    ]
    try:
        end = time.monotonic() + 300
        while time.monotonic() < end and procs[1].poll() is None:
            jsonl = report / "results.jsonl"
            if jsonl.is_file() and len(jsonl.read_text().splitlines()) >= 2:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # both in pause.sleep
        os.kill(procs[0].pid, signal.SIGSTOP)
        stopped = time.monotonic()
        out1, _ = procs[1].communicate(timeout=STOP_DEADLINE + 100)
        took = time.monotonic() - stopped
    finally:
        for p in procs:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, sig)
            p.communicate()
    assert procs[1].returncode == 3, out1[-4000:]
    said = f"error: rank 1 ({HOST}): rank 0 ({HOST}) hung: no heartbeat from it for "
    (line,) = [x for x in out1.splitlines() if x.startswith(said)]
    assert (
        f"its process, pid {procs[0].pid}, is stopped (state T: SIGSTOP, Ctrl-Z or a debugger)"
        in line
    ), line
    assert line.endswith("; leaving the run")
    assert took <= STOP_DEADLINE + 10 + 5, (
        f"named {took:.1f} s after the stop"
    )  # + the process's own exit
    # nobody wrote results.json (rank 0 could not): `mlenv finalize` does, naming rank 0
    fin = subprocess.run(
        [*MLENV, "finalize", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    assert fin.returncode == 0, fin.stderr[-3000:]
    doc = json.loads((report / "results.json").read_text())
    assert doc["verdict"] == "ERROR"
    assert doc["reasons"][0].startswith(
        f"rank 0 ({HOST}) hung during pause.sleep: no heartbeat from it for "
    ), doc["reasons"]
