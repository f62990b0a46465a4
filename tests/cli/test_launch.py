"""``mlenv launch`` execs the pod-0 launcher and passes its exit code through."""

from __future__ import annotations

from _fakeenv import fake_state, run

from mlenv.cluster.fake import FakeCluster


def test_launch_streams_and_passes_exit_code(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    fake = FakeCluster.load(str(state))
    fake.exec_responses["python -m mlenv.pod launch"] = {"rc": 1, "stdout": "rank 0 ok\nverdict FAIL\n"}
    fake.save(str(state))
    r = run(["launch", "barcelona", "train.py", "--", "--epochs", "1"], state, monkeypatch)
    assert r.exit_code == 1 and "verdict FAIL" in r.output
    calls = FakeCluster.load(str(state)).calls
    assert ["exec", "ml-dev-env-0", "python", "-m", "mlenv.pod", "launch", "train.py", "--epochs", "1"] in calls
