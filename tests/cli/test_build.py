"""``mlenv build`` starts the BuildConfig and follows it; failures exit 3."""

from __future__ import annotations

from _fakeenv import fake_state, run

from mlenv.testing.fakecluster import FakeCluster


def test_build_needs_the_buildconfig_and_reports_failure(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    r = run(["build", "barcelona"], state, monkeypatch)
    assert r.exit_code == 3 and "buildconfigs.build.openshift.io" in r.output
    run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    assert run(["build", "barcelona"], state, monkeypatch).exit_code == 0
    fake = FakeCluster.load(str(state))
    fake.builds["ml-dev-env"] = {"rc": 1, "log": "error: build error: pip failed\n"}
    fake.save(str(state))
    r = run(["build", "barcelona"], state, monkeypatch)
    assert r.exit_code == 3 and "pip failed" in r.output
