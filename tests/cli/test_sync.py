"""``mlenv sync`` (and --watch) through CliRunner against the fake cluster."""

from __future__ import annotations

from _fakeenv import fake_state, run

from mlenv.testing.fakecluster import FakeCluster


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
    # per-pod storage with dev tools: upstream's tools saw the synced code; these do not
    assert (
        "note: the dev tools' /workspace is their own volume (storage.mode: volumeClaimTemplates): "
        "sync fills the workers'; storage.mode: rwx shares one"
    ) in r.output.splitlines()


def test_sync_watch_is_bounded(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a").write_text("1")
    r = run(
        [
            "sync",
            "barcelona",
            "--dir",
            str(ws),
            "--watch",
            "--max-rounds",
            "2",
            "--interval",
            "0.01",
        ],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0 and "watch ended after 1 sync(s)" in r.output


def test_sync_before_deploy_is_a_clear_error(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    r = run(["sync", "barcelona", "--dir", str(tmp_path)], state, monkeypatch)
    assert r.exit_code == 3 and "deploy first" in r.output


def _deployed_with_workspace(tmp_path, monkeypatch):
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.py").write_text("v1")
    assert run(["sync", "barcelona", "--dir", str(ws)], state, monkeypatch).exit_code == 0
    return state, ws


def test_file_written_in_a_pod_survives_sync_and_watch(tmp_path, monkeypatch) -> None:
    state, ws = _deployed_with_workspace(tmp_path, monkeypatch)
    fake = FakeCluster.load(str(state))
    for pod in ("ml-dev-env-0", "ml-dev-env-1"):
        fake.write_pod_file(pod, "ml-dev-env", "/workspace/ckpt/step-100.pt", b"weights")
        fake.write_pod_file(pod, "ml-dev-env", "/workspace/hostfile", b"h slots=8")
    fake.save(str(state))
    (ws / "train.py").write_text("v2")
    (ws / "train.py.bak").write_text("x")
    r = run(["sync", "barcelona", "--dir", str(ws)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "ml-dev-env-0: 1 added, 1 updated, 0 deleted, 2 kept" in r.output
    (ws / "train.py.bak").unlink()  # removed locally: still no deletion without --delete
    r = run(
        [
            "sync",
            "barcelona",
            "--dir",
            str(ws),
            "--watch",
            "--max-rounds",
            "2",
            "--interval",
            "0.01",
        ],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    fake = FakeCluster.load(str(state))
    for pod in ("ml-dev-env-0", "ml-dev-env-1"):
        files = fake.pod_files(pod, "ml-dev-env", "/workspace")
        assert files["ckpt/step-100.pt"] == b"weights" and files["hostfile"] == b"h slots=8"
        assert files["train.py"] == b"v2" and "train.py.bak" in files


def test_sync_delete_and_dry_run_through_the_cli(tmp_path, monkeypatch) -> None:
    state, ws = _deployed_with_workspace(tmp_path, monkeypatch)
    fake = FakeCluster.load(str(state))
    fake.write_pod_file("ml-dev-env-0", "ml-dev-env", "/workspace/results/run1/results.json", b"{}")
    fake.write_pod_file("ml-dev-env-0", "ml-dev-env", "/workspace/old.py", b"o")
    fake.save(str(state))
    r = run(["sync", "barcelona", "--dir", str(ws), "--delete", "--dry-run"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "  - old.py" in r.output and "results.json" not in r.output
    assert "old.py" in FakeCluster.load(str(state)).pod_files(
        "ml-dev-env-0", "ml-dev-env", "/workspace"
    )
    r = run(["sync", "barcelona", "--dir", str(ws), "--delete"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    files = FakeCluster.load(str(state)).pod_files("ml-dev-env-0", "ml-dev-env", "/workspace")
    assert "old.py" not in files and files["results/run1/results.json"] == b"{}"
    r = run(["sync", "barcelona", "--dir", str(ws), "--watch", "--dry-run"], state, monkeypatch)
    assert r.exit_code == 2 and "--dry-run and --watch" in r.output
