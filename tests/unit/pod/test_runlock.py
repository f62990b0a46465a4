"""One suite at a time in a pod: a second launch while a run holds the pod's lock is
refused in one line naming that run, exit 3, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlenv.errors import EXIT_ERROR, InfraError
from mlenv.pod import __main__ as pod_main
from mlenv.pod import launch, runlock, runtime

FIRST = "20261129-041500-aaaaaa"
SECOND = "20261129-041600-bbbbbb"
ENV = {
    "MLENV_NAMESPACE": "ns",
    "MLENV_NNODES": "2",
    "MLENV_SSH_PORT": "2022",
    "MASTER_PORT": "29511",
}


def test_a_second_holder_is_refused_naming_the_first_run_and_the_lock_frees_after(
    tmp_path: Path,
) -> None:
    state = str(tmp_path / "state")
    with runlock.held(state, FIRST):
        with pytest.raises(InfraError) as e, runlock.held(state, SECOND):
            pass
        assert e.value.exit_code == EXIT_ERROR
        assert str(e.value).startswith(f"run {FIRST} is in progress in this pod: nothing started")
        assert "\n" not in str(e.value)
    with runlock.held(state, SECOND):  # the first run ended: the next one goes ahead
        assert (tmp_path / "state" / runlock.LOCK_FILE).read_text() == f"{SECOND}\n"
    assert (tmp_path / "state" / runlock.LOCK_FILE).read_text() == ""


def test_run_torchrun_in_a_pod_where_a_run_is_going_starts_nothing_and_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[list[str]] = []

    def fake_run(argv: list[str], *a: object, **k: object) -> int:
        started.append(argv)
        return 0

    monkeypatch.setattr(launch, "run", fake_run)
    for k, v in {**ENV, "MLENV_POD_INDEX": "1", "HOME": str(tmp_path)}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MLENV_STATE_DIR", raising=False)
    state = runtime.paths_from({"HOME": str(tmp_path)}).state_dir
    with runlock.held(state, FIRST):
        code = pod_main.main(["run-torchrun", "--run-id", SECOND])
    assert code == EXIT_ERROR and started == []
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert err == [
        f"error: run {FIRST} is in progress in this pod: nothing started (wait for it to end; "
        "two suites would measure each other)"
    ]
    # once it is over, the same command runs
    assert pod_main.main(["run-torchrun", "--run-id", SECOND]) == 0 and len(started) == 1


def test_run_torchrun_gives_its_ranks_a_writable_home_when_home_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A random UID's HOME is "/" (CRI-O's default for a UID the image does not know): the
    ranks get the home the pod's state is in, as the ssh path's ranks get it from their
    passwd entry (DeepSpeed's ~/.cache failed with "Permission denied: '/.cache'")."""
    envs: list[dict[str, str]] = []

    def fake_run(argv: list[str], env: dict[str, str], *a: object, **k: object) -> int:
        envs.append(dict(env))
        return 0

    monkeypatch.setattr(launch, "run", fake_run)
    for k, v in {**ENV, "MLENV_POD_INDEX": "1", "HOME": "/", "TMPDIR": str(tmp_path)}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MLENV_STATE_DIR", raising=False)
    assert pod_main.main(["run-torchrun", "--run-id", SECOND]) == 0
    assert envs[0]["HOME"] == str(tmp_path)
