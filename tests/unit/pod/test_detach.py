"""The pod side of a detached rank: its files (pid when it runs, exit when it ends), a
start that finds the run started and starts nothing twice, the follow stream framed by
byte offset (re-opened anywhere: no line lost or repeated), its state and its stop."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from mlenv import contract
from mlenv.errors import EXIT_ERROR, InfraError, Interrupted
from mlenv.pod import __main__ as pod_main
from mlenv.pod import detach, runlock

RID = "20261129-101500-abcdef"


def _run(tmp_path: Path, output: bytes, rc: int | None = None, pid: int | None = 4242) -> str:
    d = detach.run_dir(str(tmp_path), RID)
    os.makedirs(d)
    Path(d, detach.OUTPUT).write_bytes(output)
    if pid is not None:
        Path(d, detach.PID).write_text(f"{pid}\n")
    if rc is not None:
        Path(d, detach.EXIT).write_text(f"{rc}\n")
    return d


def _followed(tmp_path: Path, offset: int = 0, **kw: object) -> list[str]:
    lines: list[str] = []
    detach.follow(
        str(tmp_path),
        RID,
        offset,
        lines.append,
        sleep=lambda s: None,
        **kw,  # type: ignore[arg-type]
    )
    return lines


def test_the_supervised_block_writes_the_pid_first_and_the_status_last(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    before = signal.getsignal(signal.SIGTERM)
    with detach.supervised(str(d)) as set_status:
        assert detach.read_pid(str(d)) == os.getpid()  # "started": its pid is written
        assert detach.read_exit(str(d)) is None
        assert signal.getsignal(signal.SIGTERM) is not before  # SIGTERM stops it as Ctrl-C does
        set_status(1)
    assert detach.read_exit(str(d)) == 1
    assert signal.getsignal(signal.SIGTERM) is before
    # an exception nobody mapped still leaves a status, an error
    with pytest.raises(RuntimeError), detach.supervised(str(d)):
        raise RuntimeError("boom")
    assert detach.read_exit(str(d)) == EXIT_ERROR


def test_sigterm_in_the_supervised_process_is_an_interrupt(tmp_path: Path) -> None:
    with pytest.raises(Interrupted) as e, detach.supervised(str(tmp_path)):
        signal.raise_signal(signal.SIGTERM)
    assert e.value.signal_name == "SIGTERM" and e.value.exit_code == 143


def test_a_second_start_of_the_same_run_starts_nothing(tmp_path: Path) -> None:
    """A retried short exec (its stream dropped after the rank started) must not start a
    second rank: the run's folder is there, so the start only reads the pid."""
    _run(tmp_path, b"", pid=31337)
    got = detach.start(str(tmp_path), RID, ["/nonexistent/never-run"], {}, wait_s=1)
    assert got == detach.Started(31337, fresh=False)


def test_a_start_whose_process_cannot_start_says_so_and_leaves_a_status(tmp_path: Path) -> None:
    with pytest.raises(InfraError, match=f"run {RID}: could not start /nonexistent/python"):
        detach.start(str(tmp_path), RID, ["/nonexistent/python"], {}, wait_s=1)
    assert detach.read_exit(detach.run_dir(str(tmp_path), RID)) == EXIT_ERROR
    # and a retry does not pretend it runs: it ended before it said its pid
    with pytest.raises(InfraError, match=f"run {RID} ended \\(status 3\\) before it started"):
        detach.start(str(tmp_path), RID, ["/nonexistent/python"], {}, wait_s=1)


def test_frames_carry_the_offset_after_each_line_and_keep_an_unfinished_one() -> None:
    buf = b"one\ntwo\r\nbar 10%\rbar 20%\rhalf"
    got, used = contract.follow_lines(buf, 100, final=False)
    assert got == [(104, "one"), (109, "two"), (117, "bar 10%"), (125, "bar 20%")]
    assert used == len(buf) - len(b"half")
    # a trailing \r may be half of \r\n: kept until more comes (or the run ends)
    assert contract.follow_lines(b"x\r", 0, final=False) == ([], 0)
    assert contract.follow_lines(b"x\r", 0, final=True) == ([(2, "x")], 2)
    assert contract.follow_lines(b"tail", 7, final=True) == ([(11, "tail")], 4)
    # bytes that are no UTF-8 cannot break the stream
    assert contract.follow_lines(b"\xff\xfe\n", 0, final=False) == ([(3, "\ufffd\ufffd")], 3)


def test_a_line_that_never_ends_is_sent_in_pieces() -> None:
    buf = b"x" * (contract.FOLLOW_LONG_LINE * 2 + 5)
    got, used = contract.follow_lines(buf, 0, final=False)
    assert [end for end, _ in got] == [contract.FOLLOW_LONG_LINE, 2 * contract.FOLLOW_LONG_LINE]
    assert used == 2 * contract.FOLLOW_LONG_LINE


def test_follow_from_any_offset_gives_each_line_once_then_the_status(tmp_path: Path) -> None:
    text = b"rank 0 starts\nverdict FAIL\nbye"
    _run(tmp_path, text, rc=1)
    whole = _followed(tmp_path)
    assert whole == [
        f"{contract.FOLLOW_OUT}14 rank 0 starts",
        f"{contract.FOLLOW_OUT}27 verdict FAIL",
        f"{contract.FOLLOW_OUT}30 bye",
        f"{contract.FOLLOW_EXIT}1",
    ]
    # a stream that dropped after the first line is re-opened at its offset
    assert _followed(tmp_path, offset=14) == whole[1:]
    assert _followed(tmp_path, offset=30) == whole[3:]
    kinds = [contract.follow_frame(line) for line in whole]
    assert kinds[1] == ("out", "verdict FAIL", 27) and kinds[3] == ("exit", "1", 0)
    assert contract.follow_frame("error: unable to upgrade connection") == (
        "other",
        "error: unable to upgrade connection",
        0,
    )


def test_follow_waits_for_the_status_and_reads_what_came_before_it(tmp_path: Path) -> None:
    d = _run(tmp_path, b"first\n")
    looks: list[float] = []

    def sleep(s: float) -> None:  # the rank writes more, then ends, while the follower waits
        looks.append(s)
        with open(os.path.join(d, detach.OUTPUT), "ab") as f:
            f.write(b"second\nlast words")
        Path(d, detach.EXIT).write_text("0\n")

    lines: list[str] = []
    detach.follow(str(tmp_path), RID, 0, lines.append, sleep=sleep, is_alive=lambda p, r: True)
    assert len(looks) == 1
    assert lines == [
        f"{contract.FOLLOW_OUT}6 first",
        f"{contract.FOLLOW_OUT}13 second",
        f"{contract.FOLLOW_OUT}23 last words",
        f"{contract.FOLLOW_EXIT}0",
    ]


def test_a_supervisor_gone_without_a_status_and_a_missing_run_end_the_follow(
    tmp_path: Path,
) -> None:
    _run(tmp_path, b"oom\n")
    assert _followed(tmp_path, is_alive=lambda p, r: False) == [
        f"{contract.FOLLOW_OUT}4 oom",
        f"{contract.FOLLOW_EXIT}{contract.FOLLOW_LOST}",
    ]
    assert detach.state(str(tmp_path), RID, is_alive=lambda p, r: False) == "lost oom"
    assert _followed(tmp_path / "elsewhere") == [f"{contract.FOLLOW_EXIT}{contract.FOLLOW_NONE}"]


def test_state_says_how_the_run_stands(tmp_path: Path) -> None:
    assert detach.state(str(tmp_path), RID) == "none"
    d = _run(tmp_path, b"a\nrank 1 crashed\n\n")
    assert detach.state(str(tmp_path), RID, is_alive=lambda p, r: True) == "running 4242"
    Path(d, detach.EXIT).write_text("3\n")
    assert detach.state(str(tmp_path), RID) == "exited 3 rank 1 crashed"


def test_alive_is_this_runs_process_not_a_zombie_or_a_reused_pid(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, state, cmd in ((10, "S", RID), (11, "Z", RID), (12, "S", "other-run")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (python (x)) {state} 1 2 3")
        (proc / str(pid) / "cmdline").write_bytes(
            b"\0".join([b"python", b"--run-id", cmd.encode()])
        )
    assert detach.alive(10, RID, str(proc))
    assert not detach.alive(11, RID, str(proc))  # the pod's init never reaped it
    assert not detach.alive(12, RID, str(proc))  # a recycled pid
    assert not detach.alive(13, RID, str(proc))


def test_stop_signals_the_supervisors_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda pid, sig: sent.append((pid, sig)))
    assert detach.stop(str(tmp_path), RID) == "no such run"
    d = _run(tmp_path, b"")
    assert detach.stop(str(tmp_path), RID, is_alive=lambda p, r: True) == (
        "stopped (SIGINT to process group 4242)"
    )
    assert sent == [(4242, signal.SIGINT)]
    assert detach.stop(str(tmp_path), RID, is_alive=lambda p, r: False) == "not running"
    Path(d, detach.EXIT).write_text("130\n")
    assert detach.stop(str(tmp_path), RID) == "already ended"
    assert sent == [(4242, signal.SIGINT)]


def test_the_start_refuses_while_another_run_holds_the_pods_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLENV_STATE_DIR", str(tmp_path))
    with runlock.held(str(tmp_path), "20261129-090000-111111"):
        rc = pod_main.main(["run-torchrun", "--detach", "--run-id", RID, "job.py"])
    assert rc == 3
    assert "run 20261129-090000-111111 is in progress in this pod" in capsys.readouterr().err
    assert not os.path.exists(detach.run_dir(str(tmp_path), RID))  # nothing started
    assert runlock.busy(str(tmp_path)) is None


def test_the_detached_verbs_need_a_plain_run_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLENV_STATE_DIR", str(tmp_path))
    assert pod_main.main(["run-torchrun", "--detach", "job.py"]) == 2
    assert "pass the run's --run-id" in capsys.readouterr().err
    assert pod_main.main(["run-follow", "--run-id", "../etc"]) == 2
    assert pod_main.main(["run-follow", "--run-id", RID, "--offset", "-1"]) == 2
    assert pod_main.main(["run-state", "--run-id", RID]) == 0
    assert capsys.readouterr().out == "none\n"


def test_the_supervised_words_repeat_the_runs_options(tmp_path: Path) -> None:
    args = pod_main._parser().parse_args(
        ["run-torchrun", "--detach", "--run-id", RID, "--profile", "quick", "--", "--checks", "x"]
    )
    assert pod_main._torchrun_words(args) == [
        "--run-id",
        RID,
        "--profile",
        "quick",
        "--",
        "--checks",
        "x",
    ]


def test_the_follow_writes_utf_8_whatever_the_pods_locale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod whose Python writes ASCII to stdout (an image without a UTF-8 locale) must
    not end the follow on the first 'é' a rank prints."""
    import io

    _run(tmp_path, b"caf\xc3\xa9 \xff\n", rc=0)
    raw = io.BytesIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(raw, encoding="ascii"))
    monkeypatch.setenv("MLENV_STATE_DIR", str(tmp_path))
    assert pod_main.main(["run-follow", "--run-id", RID]) == 0
    assert (
        raw.getvalue().decode() == f"{contract.FOLLOW_OUT}8 café \ufffd\n{contract.FOLLOW_EXIT}0\n"
    )
