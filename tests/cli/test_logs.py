"""``mlenv logs`` prints the pod's log."""

from __future__ import annotations

from _fakeenv import fake_state, run


def test_logs_of_a_running_pod(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    r = run(["logs", "barcelona", "--pod", "0"], state, monkeypatch)
    assert r.exit_code == 0 and "Started container" in r.output
