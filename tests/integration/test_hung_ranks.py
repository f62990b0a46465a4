"""a rank that stops progressing is named hung, not died, whichever rank it is.

Real processes stand in for ranks here (``sleep``, a Lifeline holder) so that stopped,
killed-not-reaped and gone are the kernel's, not a fake's; the whole run with a stopped
rank 0 or 1 is in tests/integration/test_acceptance_faults.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlenv.acceptance.core.base import RunContext
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.records import rundir
from mlenv.acceptance.reports import RunMeta
from mlenv.acceptance.reports.document import now_iso
from mlenv.acceptance.reports.jsonl import JsonlWriter
from mlenv.acceptance.run import local, world
from mlenv.acceptance.run.runner import Runner

ROOT = Path(__file__).resolve().parents[2]


def _wait_state(pid: int, want: str, limit_s: float = 10.0) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        st = world.proc_stat(pid)
        if (st[0] if st else "") == want:
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} never reached state {want!r}: {world.proc_stat(pid)}")


def _end(*procs: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    for p in procs:  # a stopped process takes SIGKILL; SIGCONT leaves nothing stopped behind
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
        p.wait()


@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process in a session of its own (as the CLI starts the launcher)."""
    p = subprocess.Popen(["sleep", "120"], start_new_session=True)
    _wait_state(p.pid, "S")
    try:
        yield p
    finally:
        _end(p)


def _life(p: subprocess.Popen[bytes], host: str = "vm") -> world.Life:
    st = world.proc_stat(p.pid)
    assert st is not None
    return world.Life(host=host, pid=p.pid, start=st[1], machine=world.machine_id())


# -- looking at a process ------------------------------------------------------------------


def test_a_pid_is_alive_stopped_or_gone_and_a_killed_unreaped_one_is_gone(
    sleeper: subprocess.Popen[bytes],
) -> None:
    life = _life(sleeper)
    assert world.probe(life).kind == world.ALIVE
    os.kill(sleeper.pid, signal.SIGSTOP)
    _wait_state(sleeper.pid, "T")
    seen = world.probe(life)
    assert seen.kind == world.STOPPED and seen.halted and not seen.final
    assert (
        seen.text
        == f"its process, pid {sleeper.pid}, is stopped (state T: SIGSTOP, Ctrl-Z or a debugger)"
    )
    os.kill(sleeper.pid, signal.SIGKILL)  # not reaped yet: a zombie is gone all the same
    _wait_state(sleeper.pid, "Z")
    assert world.probe(life) == world.Liveness(
        world.GONE, f"its process, pid {sleeper.pid}, has exited"
    )
    assert (
        world.look_at_pid(os.getpid(), start=1).kind == world.GONE
    )  # a reused pid is not the rank


def _lifeline_holder() -> tuple[subprocess.Popen[str], world.Life]:
    code = (
        "import time; from mlenv.acceptance.run.world import Lifeline; "
        "print(Lifeline('127.0.0.1', 9).life('vm2').to_json(), flush=True); time.sleep(120)"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert p.stdout is not None
    life = world.Life.from_json(p.stdout.readline())
    assert life is not None and life.addr == "127.0.0.1" and life.port > 0
    # as seen from another machine: the pid means nothing there, the port does
    return p, world.Life(life.host, life.pid, life.start, "another-machine", life.addr, life.port)


def test_from_another_machine_a_held_port_says_there_even_stopped_and_a_closed_one_says_gone() -> (
    None
):
    p, life = _lifeline_holder()
    try:
        assert world.probe(life).kind == world.THERE
        os.kill(p.pid, signal.SIGSTOP)
        _wait_state(p.pid, "T")
        for _ in range(3):  # the kernel accepts from the backlog for a stopped process
            seen = world.probe(life)
            assert seen.kind == world.THERE, seen
        assert "still there" in seen.text and "not dead" in seen.text
    finally:
        _end(p)
    gone = world.probe(life)
    assert gone.kind == world.GONE and gone.final, gone
    assert gone.text == f"its process on vm2 has exited, its port 127.0.0.1:{life.port} is closed"


def test_a_process_that_cannot_be_looked_at_is_unknown_never_gone() -> None:
    assert world.probe(None).kind == world.UNKNOWN
    assert world.probe(world.Life("vm3", 1, 1, "elsewhere")).kind == world.UNKNOWN  # no port posted
    # Nothing listens there: refused (or, on a network that drops, no answer). Either way,
    # a port that never answered while the rank surely lived tells nothing later: a firewall
    # that rejects with a reset would otherwise make a frozen rank look dead.
    closed = world.Life("vm3", 1, 1, "elsewhere", "127.0.0.1", world.free_port())
    assert world.probe(closed, timeout_s=0.3).kind in (world.GONE, world.UNKNOWN)
    seen = world.probe(closed, port_ok=False)
    assert seen == world.Liveness(
        world.UNKNOWN,
        f"its process on vm3 cannot be looked at from here (its port "
        f"127.0.0.1:{closed.port} did not answer when the run started)",
    )
    assert "not checked yet" in world.probe(closed, port_ok=None).text


def test_the_first_look_at_the_ports_says_which_can_tell_later() -> None:
    p, life = _lifeline_holder()
    try:
        dead = world.Life("vm4", 1, 1, "elsewhere", "127.0.0.1", world.free_port())
        local_rank = world.Life("vm", os.getpid(), 0, world.machine_id(), "127.0.0.1", 1)
        check = world.PortCheck({1: life, 2: dead, 3: local_rank}, timeout_s=0.5)
        end = time.monotonic() + 10
        while (check.ok(1) is None or check.ok(2) is None) and time.monotonic() < end:
            time.sleep(0.02)
        assert (check.ok(1), check.ok(2), check.ok(3)) == (
            True,
            False,
            None,
        )  # rank 3: looked at by its pid
    finally:
        _end(p)


# -- rank 0 watches the others --------------------------------------------------------------


class _Chan:
    """The side channel as rank 0's gather sees it: rank 0 beats, rank 1 beat once and
    stopped, nobody posts results."""

    def __init__(self, life1: world.Life) -> None:
        self.n = 0
        self.life1 = life1

    def heartbeats(self, world_size: int) -> list[int | None]:
        self.n += 1
        return [self.n, 7]

    def get_now(self, name: str) -> str | None:
        return None

    def life(self, rank: int) -> world.Life | None:
        return self.life1 if rank == 1 else None


def _gather(life1: world.Life, deadline_s: float = 1.5) -> tuple[CheckResult, float]:
    ctx = RunContext(
        rank=0,
        world_size=2,
        local_rank=0,
        local_world_size=2,
        node_rank=0,
        nnodes=1,
        host="vm",
        backend="gloo",
        device="cpu",
        deadline_s=deadline_s,
    )
    runner = Runner(ctx, _Chan(life1), ["vm", "vm"], [], stale_s=0.3, poll_s=0.02)  # type: ignore[arg-type]
    runner._posted = {0: [CheckResult("probe.x", Status.PASS, "rank", "vm", 0)]}
    t0 = time.monotonic()
    results, missing = runner.gather(0, "probe.x", t0)
    assert missing == [1] and results[1].status == Status.ERROR and results[1].rank == 1
    return results[1], time.monotonic() - t0


def test_a_stopped_rank_is_waited_for_until_the_deadline_then_named_hung(
    sleeper: subprocess.Popen[bytes],
) -> None:
    os.kill(sleeper.pid, signal.SIGSTOP)
    _wait_state(sleeper.pid, "T")
    r, took = _gather(_life(sleeper))
    assert took >= 1.5  # it may come back: the deadline, not the heartbeat's 0.3 s, decides
    (why,) = r.reasons
    assert why.startswith(
        "rank 1 (vm) hung during probe.x: no result within the deadline of 1.5 s and no "
        "heartbeat for "
    ), why
    assert why.endswith(
        f"; its process, pid {sleeper.pid}, is stopped (state T: SIGSTOP, Ctrl-Z or a debugger)"
    )
    assert "died" not in why


def test_a_rank_whose_process_is_gone_is_named_died_without_waiting_for_the_deadline(
    sleeper: subprocess.Popen[bytes],
) -> None:
    life = _life(sleeper)
    os.kill(sleeper.pid, signal.SIGKILL)
    sleeper.wait()
    r, took = _gather(life, deadline_s=30.0)
    assert took < 10
    assert r.reasons[0].startswith(
        "rank 1 (vm) died during probe.x: no result and no heartbeat for "
    ), r.reasons
    assert r.reasons[0].endswith(
        f" (killed or crashed; its process, pid {sleeper.pid}, has exited)"
    ), r.reasons


# -- the other ranks watch rank 0 -----------------------------------------------------------


def test_the_other_ranks_name_a_silent_rank_0_with_its_host_and_state(
    sleeper: subprocess.Popen[bytes],
) -> None:
    from datetime import timedelta

    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    port = world.free_port()
    server = TCPStore(
        "127.0.0.1", port, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False
    )
    chan = world.SideChannel("127.0.0.1", port, "mlenv/0", timeout_s=5)
    chan.post_life(0, _life(sleeper, "vm0"))  # rank 0 is the stopped sleeper
    said: list[str] = []
    beating = threading.Event()

    def rank0_beats() -> None:  # for 2 s, then it stops, and is stopped
        for n in range(10):
            server.set("mlenv/0/hb/0", str(n))
            time.sleep(0.2)
        os.kill(sleeper.pid, signal.SIGSTOP)
        beating.set()

    threading.Thread(target=rank0_beats, daemon=True).start()
    chan.start_heartbeat(1)
    chan.watch_rank0(1.0, said.append, "vm0")
    try:
        beating.wait(10)
        assert said == []  # while rank 0 beats, nothing is said
        end = time.monotonic() + 10
        while not said and time.monotonic() < end:
            time.sleep(0.05)
    finally:
        chan.stop()
    (line,) = said
    # the seconds are when the watcher looked (1 s stale, checked every so often): 2 s in a
    # CI rehearsal on the loaded 2-core machine; who, where and in what state is the point
    assert re.match(r"rank 0 \(vm0\) hung: no heartbeat from it for [12] s; ", line), line
    assert line.endswith(
        f"its process, pid {sleeper.pid}, is stopped (state T: SIGSTOP, Ctrl-Z or a debugger)"
    )


# -- the local CLI watches its ranks ------------------------------------------------------


def _watch(
    group: int,
    report_dir: Path,
    ranks: dict[int, subprocess.Popen[bytes]],
    hung_after_s: float,
    said: list[str],
) -> local.RankWatch:
    w = local.RankWatch(
        group, report_dir, hung_after_s, nproc=len(ranks), on_hung=said.append, poll_s=0.1
    )
    for r, p in ranks.items():
        st = world.proc_stat(p.pid)
        assert st is not None
        w.ranks[r] = local._Rank(p.pid, st[1], "vm")
    return w.start()


def test_a_stopped_rank_0_is_named_hung_and_the_run_stopped_at_the_deadline(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    said: list[str] = []
    os.kill(sleeper.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    w = _watch(sleeper.pid, tmp_path, {0: sleeper}, 1.0, said)
    try:
        assert sleeper.wait(timeout=10) == -signal.SIGKILL  # the launcher's group is killed
    finally:
        w.stop()
    assert 1.0 <= time.monotonic() - t0 < 8
    assert (
        said
        == [w.hung]
        == [
            f"rank 0 (vm) hung: its process, pid {sleeper.pid}, has been stopped (state T: "
            "SIGSTOP, Ctrl-Z or a debugger) for 1 s, past the check's deadline of 1 s"
        ]
    )


def test_a_stopped_rank_is_killed_once_another_rank_has_ended(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """Its SIGTERM from the launcher would wait, pending, while the launcher waits 30 s."""
    rank0 = subprocess.Popen(["sleep", "120"])
    said: list[str] = []
    os.kill(sleeper.pid, signal.SIGSTOP)
    _wait_state(sleeper.pid, "T")
    w = _watch(sleeper.pid, tmp_path, {0: rank0, 1: sleeper}, 60.0, said)
    try:
        time.sleep(0.5)
        assert sleeper.poll() is None  # rank 0 still runs: rank 1 may be continued
        rank0.terminate()  # rank 0 ends (it wrote its report, naming rank 1)
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
    finally:
        w.stop()
        _end(rank0)
    assert said == [] and w.hung is None  # rank 0 named it already


def test_a_note_left_by_a_rank_about_rank_0_stops_the_run(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    said: list[str] = []
    w = _watch(sleeper.pid, tmp_path, {1: sleeper}, 60.0, said)
    line = "rank 0 (vm) hung: no heartbeat from it for 65 s; its process, pid 1, is alive (state S)"
    rundir.mark_hung(tmp_path, line)
    rundir.mark_hung(tmp_path, "a second rank's line")  # the first stays
    try:
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
    finally:
        w.stop()
    assert said == [line] and w.hung == line == rundir.hung_note(tmp_path)


def test_the_report_of_a_run_stopped_for_a_hung_rank_0_names_it_and_its_check(
    tmp_path: Path,
) -> None:
    meta = RunMeta(
        run_id="20260101-000000-aaaaaa",
        started=now_iso(),
        profile="quick",
        checks=["environment", "pause.sleep"],
        world={"nodes": 1, "ranks": 2, "backend": "gloo", "device": "cpu", "hosts": ["vm", "vm"]},
    )
    meta.write(tmp_path)
    jsonl = JsonlWriter(tmp_path / "results.jsonl")
    for r in (0, 1):
        jsonl.append(CheckResult("environment", Status.PASS, "rank", "vm", r))
    jsonl.close()
    doc = local.recover(
        tmp_path,
        -9,
        hung="rank 0 (vm) hung: its process, pid 7, has been stopped (state T: "
        "SIGSTOP, Ctrl-Z or a debugger) for 10 s",
    )
    assert doc["verdict"] == "ERROR"
    assert doc["reasons"][0] == (
        "rank 0 (vm) hung during pause.sleep: its process, pid 7, has been stopped (state "
        "T: SIGSTOP, Ctrl-Z or a debugger) for 10 s; the run was stopped and its report "
        "finalised without rank 0, 2 result(s) kept from results.jsonl; not measured: "
        "pause.sleep"
    )
    assert json.loads((tmp_path / "results.json").read_text())["reasons"] == doc["reasons"]


def test_a_group_of_zombies_is_not_waited_for(sleeper: subprocess.Popen[bytes]) -> None:
    os.kill(sleeper.pid, signal.SIGKILL)  # not reaped: os.killpg(pgid, 0) still finds it
    _wait_state(sleeper.pid, "Z")
    t0 = time.monotonic()
    local.end_group(sleeper.pid, grace_s=10)
    assert time.monotonic() - t0 < 5
