"""``mlenv shell`` / ``port-forward`` reach the right pod."""

from __future__ import annotations

from _fakeenv import fake_state, run

from mlenv.testing.fakecluster import FakeCluster


def test_shell_opens_in_the_chosen_pod(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    assert run(["shell", "barcelona", "--pod", "1"], state, monkeypatch).exit_code == 0
    assert ["interactive", "ml-dev-env-1", "bash", "-l"] in FakeCluster.load(str(state)).calls
    r = run(["shell", "barcelona", "--pod", "7"], state, monkeypatch)
    assert r.exit_code == 3 and r.stderr == (  # one line, before kubectl's own exit 1
        "error: pod ml-dev-env-7 in ml-dev-env is not there: nothing was started "
        "(mlenv status barcelona; mlenv deploy barcelona)\n"
    )


def test_port_forward_uses_the_dev_pod(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    r = run(["port-forward", "barcelona"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    calls = [c for c in FakeCluster.load(str(state)).calls if c[0] == "port-forward"]
    assert calls and calls[0][1] == "ml-dev-env-dev"


def test_shell_and_port_forward_before_deploy_are_exit_3(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    for args in (
        ["shell", "barcelona"],
        ["port-forward", "barcelona", "--debug"],
        ["port-forward", "barcelona"],
    ):
        r = run(args, state, monkeypatch)
        assert r.exit_code == 3, r.output
        assert len(r.stderr.splitlines()) == 1 and "is not there: nothing was started" in r.stderr
        assert r.stdout == ""
    assert not [
        c for c in FakeCluster.load(str(state)).calls if c[0] in ("interactive", "port-forward")
    ]
