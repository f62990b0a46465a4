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


def test_build_with_image_ref_says_there_is_nothing_to_build(tmp_path, monkeypatch) -> None:
    """With image.ref set deploy renders no BuildConfig, and `build` said "deploy first":
    a loop. Now one line, exit 2, before any cluster is contacted."""
    import yaml
    from _fakeenv import ROOT

    data = yaml.safe_load((ROOT / "clusters" / "barcelona.yaml").read_text())
    data.setdefault("image", {})["ref"] = "quay.io/team/ml-dev-env:v3"
    cfg = tmp_path / "barcelona.yaml"
    cfg.write_text(yaml.safe_dump(data))
    r = run(["build", str(cfg)], None, monkeypatch)
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == (
        "error: barcelona runs image.ref (quay.io/team/ml-dev-env:v3): there is nothing to build "
        "on the cluster; push a new image there, or clear image.ref to build the Dockerfile"
    )
