"""``mlenv teardown`` deletes this instance's objects; PVCs only with --purge."""

from __future__ import annotations

from _fakeenv import fake_state, run

from mlenv.testing.fakecluster import FakeCluster


def test_teardown_keeps_pvcs_unless_purge(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    r = run(["teardown", "barcelona"], state, monkeypatch)
    assert (
        r.exit_code == 0 and "PVCs and the image build (BuildConfig, ImageStream) kept" in r.output
    )
    fake = FakeCluster.load(str(state))
    assert fake.list("StatefulSet", "ml-dev-env") == [] and fake.list("Pod", "ml-dev-env") == []
    assert {p["metadata"]["name"] for p in fake.list("PersistentVolumeClaim", "ml-dev-env")} >= {
        "workspace-ml-dev-env-0",
        "datasets-ml-dev-env-1",
    }
    r = run(["teardown", "barcelona", "--purge"], state, monkeypatch)
    assert r.exit_code == 0
    assert FakeCluster.load(str(state)).list("PersistentVolumeClaim", "ml-dev-env") == []


def test_teardown_names_what_it_had_to_leave_behind(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    fake = FakeCluster.load(str(state))
    fake.denied = ["delete securitycontextconstraints"]
    fake.save(str(state))
    r = run(["teardown", "barcelona"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert (
        "warning: left behind: securitycontextconstraints/ml-dev-env-ml-dev-env-barcelona-rdma: you may "
        "not delete it"
    ) in r.stderr
    assert "1 left behind (see above)" in r.stdout
    assert "deleted clusterrole/ml-dev-env-ml-dev-env-barcelona-rdma-use" in r.stdout


def test_deploy_applies_network_policies_and_teardown_removes_them(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path, "nerc-tcp")
    r = run(["deploy", "nerc-tcp", "--mode", "tcp", "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    names = {
        p["metadata"]["name"]
        for p in FakeCluster.load(str(state)).list("NetworkPolicy", "ml-dev-env")
    }
    assert names == {"ml-dev-env-instance", "ml-dev-env-devtools"}  # nerc-tcp enables jupyter
    assert run(["teardown", "nerc-tcp"], state, monkeypatch).exit_code == 0
    assert FakeCluster.load(str(state)).list("NetworkPolicy", "ml-dev-env") == []


def test_teardown_keeps_the_image_build_unless_purge(tmp_path, monkeypatch) -> None:
    """Upstream's clean-multi-node kept the BuildConfig and ImageStream; ours deleted them,
    so a redeploy needed a rebuild."""
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    build = {("BuildConfig", "ml-dev-env"), ("ImageStream", "ml-dev-env")}

    def live() -> set[tuple[str, str]]:
        fake = FakeCluster.load(str(state))
        return {
            (k, o["metadata"]["name"])
            for k in ("BuildConfig", "ImageStream")
            for o in fake.list(k, "ml-dev-env")
        }

    assert live() == build
    dry = run(["teardown", "barcelona", "--dry-run"], state, monkeypatch)
    assert "would keep buildconfig/ml-dev-env" in dry.output
    assert "would delete buildconfig" not in dry.output
    r = run(["teardown", "barcelona"], state, monkeypatch)
    assert r.exit_code == 0 and "kept imagestream/ml-dev-env" in r.output
    assert (
        "PVCs and the image build (BuildConfig, ImageStream) kept (--purge deletes them)"
        in r.output
    )
    assert live() == build
    assert FakeCluster.load(str(state)).list("StatefulSet", "ml-dev-env") == []
    assert run(["teardown", "barcelona", "--purge"], state, monkeypatch).exit_code == 0
    assert live() == set()


def test_teardown_dry_run_prints_its_lists_with_o(tmp_path, monkeypatch) -> None:
    """teardown --dry-run printed data with no -o json|yaml."""
    import json

    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    r = run(["teardown", "barcelona", "--dry-run", "-o", "json"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["cluster"] == "barcelona" and "statefulset/ml-dev-env" in [
        d.lower() for d in doc["delete"]
    ]
    assert FakeCluster.load(str(state)).list("StatefulSet", "ml-dev-env")  # nothing deleted
    r = run(["teardown", "barcelona", "-o", "json"], state, monkeypatch)
    assert r.exit_code == 2 and "goes with --dry-run" in r.stderr
