"""``mlenv sync`` (and --watch) through CliRunner against the fake cluster."""

from __future__ import annotations

from _fakeenv import fake_state, run

from mlenv.cluster.fake import FakeCluster


def test_sync_copies_to_every_pod_and_verifies(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.py").write_text("print('x')\n")
    r = run(["sync", "barcelona", "--dir", str(ws)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "verified 2 pod(s)" in r.output
    fake = FakeCluster.load(str(state))
    for pod in ("ml-dev-env-0", "ml-dev-env-1"):
        assert fake.pod_files(pod, "ml-dev-env", "/workspace") == {"train.py": b"print('x')\n"}


def test_sync_watch_is_bounded(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a").write_text("1")
    r = run(["sync", "barcelona", "--dir", str(ws), "--watch", "--max-rounds", "2",
             "--interval", "0.01"], state, monkeypatch)
    assert r.exit_code == 0 and "watch ended after 1 sync(s)" in r.output


def test_sync_before_deploy_is_a_clear_error(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    r = run(["sync", "barcelona", "--dir", str(tmp_path)], state, monkeypatch)
    assert r.exit_code == 3 and "deploy first" in r.output
