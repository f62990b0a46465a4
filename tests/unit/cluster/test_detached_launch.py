"""The operator's side of the detached launch, on the fake: the bound on execs at once, pod
0 followed by byte offset through drops, every rank stopped on an interrupt or a failed
start, a straggler stopped, and the streamed launch kept for pods whose mlenv is older."""

from __future__ import annotations

import threading
import time

import pytest

from mlenv.cluster.deploy import DeployOptions, deploy
from mlenv.cluster.fanout import next_wait, run_everywhere
from mlenv.errors import InfraError, Interrupted

RID = "20261129-101500-abcdef"
RUN = "python -m mlenv.pod run-torchrun"
ARGV = ["python", "-m", "mlenv.pod", "run-torchrun", "--run-id", RID, "train.py"]


def _deployed(cfg, fake_for, nodes: int):
    fake = fake_for(cfg, nodes=nodes)
    deploy(cfg, DeployOptions(mode="tcp", timeout=60, nodes=nodes), fake)
    return fake


def _verbs(fake, pod: str) -> list[str]:
    return [
        c[5]
        for c in fake.calls
        if c[0] == "exec" and c[1] == pod and c[2:5] == ["python", "-m", "mlenv.pod"]
    ]


def test_at_most_the_bound_plus_one_execs_at_once_whatever_the_pod_count(
    local_cfg, fake_for, monkeypatch
) -> None:
    """One exec stream per pod for the whole run was 254 at once at 256 pods. Each call
    here lasts a moment, so calls that may overlap do; fails on the code before (a thread
    per pod, each holding its exec)."""
    n, bound = 12, 3
    fake = _deployed(local_cfg, fake_for, n)
    fake.exec_responses[RUN] = {"rc": 0, "stdout": "rank done\n"}
    lock = threading.Lock()
    gauge = {"now": 0, "peak": 0}

    def counted(fn):
        def call(*args, **kwargs):
            with lock:
                gauge["now"] += 1
                gauge["peak"] = max(gauge["peak"], gauge["now"])
            try:
                time.sleep(0.005)
                return fn(*args, **kwargs)
            finally:
                with lock:
                    gauge["now"] -= 1

        return call

    monkeypatch.setattr(fake, "exec", counted(fake.exec))
    monkeypatch.setattr(fake, "exec_stream", counted(fake.exec_stream))
    monkeypatch.setenv("MLENV_FANOUT", str(bound))
    said: list[str] = []
    rep = run_everywhere(local_cfg, fake, ARGV, said.append, run_id=RID)
    assert rep.returncode == 0 and not rep.failed and len(rep.others) == n - 1
    assert 2 <= gauge["peak"] <= bound + 1, gauge
    assert said[-1] == "rank done" and f"started {n}/{n}" in said
    for i in range(n):  # a short start each, then pod 0 followed and the others asked
        want = ["run-torchrun", "run-follow"] if i == 0 else ["run-torchrun", "run-state"]
        assert _verbs(fake, f"ml-dev-env-{i}") == want


def test_a_dropped_stream_is_reopened_where_it_was_no_line_lost_or_repeated(
    local_cfg, fake_for
) -> None:
    fake = _deployed(local_cfg, fake_for, 2)
    lines = [f"step {i}" for i in range(9)]
    fake.exec_responses[RUN] = {"rc": 1, "stdout": "".join(f"{ln}\n" for ln in lines)}
    fake.follow_drops["ml-dev-env-0"] = 3
    out: list[str] = []
    warned: list[str] = []
    rep = run_everywhere(local_cfg, fake, ARGV, out.append, run_id=RID, warn=warned.append)
    assert rep.returncode == 1  # pod 0's status, not the dropped streams' exit 1
    assert [ln for ln in out if ln.startswith("step")] == lines
    offsets = [c[-1] for c in fake.calls if "run-follow" in c]
    assert offsets == ["0", "35", "49", "56"]  # 7 bytes a line: re-opened after the last shown
    drops = [w for w in warned if "output stream dropped" in w]
    assert len(drops) == 3 and "re-opening it at byte 35" in drops[0]


def test_a_stream_that_never_comes_back_ends_the_launch_with_an_error(local_cfg, fake_for) -> None:
    fake = _deployed(local_cfg, fake_for, 2)
    fake.exec_responses[RUN] = {"rc": 0}
    fake.follow_drops["ml-dev-env-0"] = 10_000
    with pytest.raises(InfraError, match="lost ml-dev-env-0's output for 120 s"):
        run_everywhere(local_cfg, fake, ARGV, lambda s: None, run_id=RID, warn=lambda s: None)


def test_an_idle_stream_cut_now_and_then_is_reopened_for_as_long_as_the_run_lasts(
    local_cfg, fake_for, monkeypatch
) -> None:
    """A proxy that cuts an idle exec stream every 10 minutes is no lost pod: each stream
    worked while it was open. Fails on the code before this: the window counted from the
    first drop, so the second one, 10 minutes on, ended the launch."""
    fake = _deployed(local_cfg, fake_for, 2)
    fake.exec_responses[RUN] = {"rc": 0, "stdout": "done\n"}
    fake.follow_drops["ml-dev-env-0"] = 5
    inner = fake.exec_stream

    def open_ten_minutes(*args, **kw):
        fake.clock += 600
        return inner(*args, **kw)

    monkeypatch.setattr(fake, "exec_stream", open_ten_minutes)
    rep = run_everywhere(local_cfg, fake, ARGV, lambda s: None, run_id=RID, warn=lambda s: None)
    assert rep.returncode == 0
    assert len([c for c in fake.calls if "run-follow" in c]) == 6


def test_an_interrupt_stops_every_rank_and_shows_pod_0s_last_words(
    local_cfg, fake_for, monkeypatch
) -> None:
    fake = _deployed(local_cfg, fake_for, 3)
    fake.exec_responses[RUN] = {"hang": True}
    inner = fake.exec_stream
    follows = []

    def interrupted_once(pod, ns, argv, out, **kw):
        follows.append(list(argv))
        if len(follows) == 1:
            raise Interrupted("SIGTERM")  # what signals_as_interrupts raises on SIGTERM
        return inner(pod, ns, argv, out, **kw)

    monkeypatch.setattr(fake, "exec_stream", interrupted_once)
    out: list[str] = []
    with pytest.raises(Interrupted) as e:
        run_everywhere(local_cfg, fake, ARGV, out.append, run_id=RID)
    assert e.value.exit_code == 143
    for i in range(3):
        assert "run-stop" in _verbs(fake, f"ml-dev-env-{i}")
    assert len(follows) == 2 and out[-1] == "interrupted"  # pod 0 followed to its end


def test_a_pod_that_cannot_start_its_rank_stops_the_others_and_is_named(
    local_cfg, fake_for
) -> None:
    fake = _deployed(local_cfg, fake_for, 3)
    fake.exec_responses[RUN] = {"hang": True}
    fake.pod_exec_responses["ml-dev-env-2"] = {
        f"{RUN} --detach": {"rc": 3, "stderr": "error: run X is in progress in this pod"}
    }
    with pytest.raises(InfraError) as e:
        run_everywhere(local_cfg, fake, ARGV, lambda s: None, run_id=RID)
    assert str(e.value).startswith(f"1 of 3 pod(s) could not start their rank of run {RID}")
    assert "ml-dev-env-2: error: run X is in progress in this pod" in str(e.value)
    assert _verbs(fake, "ml-dev-env-0") == ["run-torchrun", "run-stop"]  # never followed
    assert _verbs(fake, "ml-dev-env-1") == ["run-torchrun", "run-stop"]


def test_a_start_whose_exec_broke_is_tried_again_and_starts_nothing_twice(
    local_cfg, fake_for, monkeypatch
) -> None:
    """The short exec's stream can break after the pod started the rank (the answer is
    lost) or before: either way the start is asked again, and the pod finds the run
    started instead of starting a second rank."""
    from mlenv.cluster.api import ApiError

    fake = _deployed(local_cfg, fake_for, 3)
    fake.exec_responses[RUN] = {"rc": 0, "stdout": "ok\n"}
    inner = fake.exec
    broken = {"ml-dev-env-1": "after", "ml-dev-env-2": "before"}

    def flaky(pod, ns, argv, **kw):
        when = broken.pop(pod, "") if "--detach" in argv else ""
        if when == "before":
            raise ApiError("error: unable to upgrade connection: EOF")
        res = inner(pod, ns, argv, **kw)
        if when == "after":
            raise ApiError("error: lost connection to pod")
        return res

    monkeypatch.setattr(fake, "exec", flaky)
    rep = run_everywhere(local_cfg, fake, ARGV, lambda s: None, run_id=RID)
    assert rep.returncode == 0 and not rep.failed
    assert [_verbs(fake, f"ml-dev-env-{i}").count("run-torchrun") for i in range(3)] == [1, 2, 1]
    assert sorted(fake.detached) == [f"ml-dev-env-{i}/{RID}" for i in range(3)]  # one rank each


def test_pod_0s_refusal_is_its_exit_code_with_its_words(local_cfg, fake_for) -> None:
    """A bad --topology is exit 2 in pod 0's start, as it was in its stream."""
    fake = _deployed(local_cfg, fake_for, 2)
    fake.exec_responses[f"{RUN} --detach"] = {"rc": 2, "stderr": "error: --topology: not JSON"}
    out: list[str] = []
    rep = run_everywhere(local_cfg, fake, ARGV, out.append, run_id=RID)
    assert rep.returncode == 2 and out == ["error: --topology: not JSON"]


def test_a_rank_still_running_after_pod_0_ended_is_stopped(local_cfg, fake_for) -> None:
    fake = _deployed(local_cfg, fake_for, 3)
    fake.pod_exec_responses = {
        "ml-dev-env-0": {RUN: {"rc": 0}},
        "ml-dev-env-1": {RUN: {"rc": 0}},
        "ml-dev-env-2": {RUN: {"hang": True}},
    }
    rep = run_everywhere(local_cfg, fake, ARGV, lambda s: None, run_id=RID)
    assert rep.returncode == 0
    assert [(o.pod, o.returncode) for o in rep.failed] == [("ml-dev-env-2", -1)]
    assert rep.failed[0].detail == "still running 60 s after ml-dev-env-0's run ended: stopped"
    assert _verbs(fake, "ml-dev-env-2")[-1] == "run-stop"
    assert "run-stop" not in _verbs(fake, "ml-dev-env-1")


def test_a_rank_that_ends_early_is_said_while_pod_0_runs(local_cfg, fake_for, monkeypatch) -> None:
    fake = _deployed(local_cfg, fake_for, 2)
    fake.pod_exec_responses = {
        "ml-dev-env-0": {RUN: {"rc": 3}},
        "ml-dev-env-1": {RUN: {"rc": 3, "stdout": "rank 1: CUDA error\n"}},
    }
    warned: list[str] = []
    seen = threading.Event()
    inner = fake.exec_stream

    def slow_pod0(*args, **kw):  # pod 0's run goes on until the poller has said it
        seen.wait(5)
        return inner(*args, **kw)

    def warn(line: str) -> None:
        warned.append(line)
        seen.set()

    monkeypatch.setattr(fake, "exec_stream", slow_pod0)
    rep = run_everywhere(local_cfg, fake, ARGV, lambda s: None, run_id=RID, warn=warn, poll_s=0.01)
    assert warned == [
        "warning: ml-dev-env-1's rank ended while the run goes on, status 3: rank 1: CUDA error"
    ]
    assert [(o.pod, o.returncode, o.detail) for o in rep.failed] == [
        ("ml-dev-env-1", 3, "rank 1: CUDA error")
    ]


def test_pods_whose_mlenv_cannot_detach_get_the_streamed_launch(local_cfg, fake_for) -> None:
    fake = _deployed(local_cfg, fake_for, 2)
    fake.exec_responses[f"{RUN} --detach"] = {
        "rc": 2,
        "stderr": "python -m mlenv.pod: error: unrecognized arguments: --detach",
    }
    fake.exec_responses[RUN] = {"rc": 0, "stdout": "old rank\n"}
    out: list[str] = []
    warned: list[str] = []
    rep = run_everywhere(local_cfg, fake, ARGV, out.append, run_id=RID, warn=warned.append)
    assert rep.returncode == 0 and out == ["old rank"]
    assert len(warned) == 1 and "one exec stream per pod for the whole run" in warned[0]
    assert [c[2:] for c in fake.calls if c[0] == "exec" and c[1] == "ml-dev-env-0"][-1] == ARGV


def test_asking_the_other_pods_stays_a_third_of_the_time_at_most() -> None:
    """At 2048 pods and 16 at once a round of run-state takes about a minute: rounds back
    to back would keep 16 client processes busy for the whole run."""
    assert next_wait(30.0, 2.0) == 30.0
    assert next_wait(30.0, 64.0) == 128.0
