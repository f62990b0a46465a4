"""``mlenv status`` before and after deploy."""

from __future__ import annotations

from _fakeenv import fake_state, run


def test_status_without_deployment(tmp_path, monkeypatch) -> None:
    r = run(["status", "barcelona"], fake_state(tmp_path), monkeypatch)
    assert r.exit_code == 0 and "no pods (not deployed?" in r.output
