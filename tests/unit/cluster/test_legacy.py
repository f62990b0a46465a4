"""migration of a namespace holding upstream ml-dev-env's objects: existing claims
mounted (never rendered), upstream objects found by name/label, deploy says what it does,
``teardown --legacy`` lists, confirms and removes them (PVCs only with --purge)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlenv.cluster import legacy
from mlenv.config import load
from mlenv.render import names
from mlenv.render.plan import _pvcs
from mlenv.render.workload import dev_pod
from mlenv.testing.fakecluster import FakeCluster

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "cli"))
from _fakeenv import fake_state, run  # noqa: E402

NS = "ml-dev-env"
UPSTREAM = yaml.safe_load((ROOT / "tests/data/upstream-objects/legacy-objects.yaml").read_text())


def with_upstream(fake: FakeCluster, ns: str = NS) -> None:
    for obj in UPSTREAM:
        fake.apply(obj, ns, field_manager="kubectl-client-side-apply")


def migrating_config(tmp_path: Path) -> Path:
    """barcelona as a migrating team writes it: upstream's claims named."""
    data: dict[str, Any] = yaml.safe_load((ROOT / "clusters/barcelona.yaml").read_text())
    data["storage"]["existing_claims"] = {
        "workspace": "ml-dev-workspace",
        "datasets": "ml-datasets",
    }
    path = tmp_path / "barcelona.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_existing_claims_are_mounted_not_rendered(tmp_path: Path) -> None:
    cfg = load(str(migrating_config(tmp_path)))
    assert cfg.storage.workspace_claim == "ml-dev-workspace"
    # volumeClaimTemplates mode: the dev Pod mounts both upstream claims, no dev PVC rendered
    pod = dev_pod(cfg, "rdma")
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims == {"workspace": "ml-dev-workspace", "datasets": "ml-datasets"}
    assert names.DEV_WORKSPACE_PVC not in {p["metadata"]["name"] for p in _pvcs(cfg)}
    # rwx mode: every pod mounts them, neither of ours is created
    rwx = dataclasses.replace(cfg, storage=dataclasses.replace(cfg.storage, mode="rwx"))
    assert _pvcs(rwx) == []


def test_existing_claim_name_is_validated(tmp_path: Path) -> None:
    from mlenv.config import check_file

    data: dict[str, Any] = yaml.safe_load((ROOT / "clusters/barcelona.yaml").read_text())
    data["storage"]["existing_claims"] = {"workspace": "--kubeconfig=/tmp/x"}
    path = tmp_path / "barcelona.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg, diags = check_file(path)
    assert cfg is None and any("existing_claims.workspace" in str(d) for d in diags)


def test_find_upstream_objects_not_ours() -> None:
    fake = FakeCluster.typical(NS, ["n0"])
    with_upstream(fake)
    fake.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "someone-else"}}, NS)
    found = legacy.find(fake, NS)
    refs = [o.ref for o in found]
    assert refs == [
        "statefulset/ml-dev-env",
        "route/ml-dev-jupyter",
        "route/ml-dev-vscode",
        "service/ml-dev-env",
        "service/ml-dev-env-headless",
        "persistentvolumeclaim/ml-datasets",
        "persistentvolumeclaim/ml-dev-workspace",
    ]
    # plain Kubernetes serves no Route: skipped, not an error
    k8s = FakeCluster.typical(NS, ["n0"])
    k8s.openshift = False
    assert legacy.find(k8s, NS) == []


def test_upstreams_last_route_names_are_found_and_ours_never() -> None:
    """Upstream's last release named its Routes ml-dev-env-vscode/-jupyter/-tensorboard, the
    names ours carry: teardown --legacy missed them and the next deploy refused."""
    fake = FakeCluster.typical(NS, ["n0"])
    for tool in ("vscode", "jupyter", "tensorboard"):
        route = {"apiVersion": "route.openshift.io/v1", "kind": "Route"}
        fake.apply({**route, "metadata": {"name": f"ml-dev-env-{tool}"}}, NS)
    ours = {
        "apiVersion": "route.openshift.io/v1",
        "kind": "Route",
        "metadata": {
            "name": "ml-dev-env-vscode",
            "labels": {"app.kubernetes.io/managed-by": "mlenv"},
        },
    }
    assert [o.ref for o in legacy.find(fake, NS)] == [
        "route/ml-dev-env-jupyter",
        "route/ml-dev-env-tensorboard",
        "route/ml-dev-env-vscode",
    ]
    fake.apply(ours, NS)  # our own Route of that name is never upstream's
    assert "route/ml-dev-env-vscode" not in [o.ref for o in legacy.find(fake, NS)]


def test_deploy_says_what_it_does_then_teardown_legacy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = fake_state(tmp_path)
    fake = FakeCluster.load(str(state))
    with_upstream(fake)
    fake.save(str(state))
    cfg = str(migrating_config(tmp_path))

    r = run(["deploy", cfg, "--timeout", "60"], state, monkeypatch)
    assert "legacy: namespace ml-dev-env holds 7 object(s) of upstream ml-dev-env" in r.output
    assert (
        "persistentvolumeclaim/ml-dev-workspace (upstream ml-dev-env's name): kept and mounted"
        in r.output
    )
    assert "statefulset/ml-dev-env (label app=ml-dev-env-multi): has the name ours uses" in r.output
    assert "mlenv teardown barcelona --legacy" in r.output
    assert r.exit_code == 2, r.output  # upstream's StatefulSet is not overwritten silently

    r = run(["teardown", cfg, "--legacy"], state, monkeypatch)  # no answer: nothing deleted
    assert "route/ml-dev-vscode" in r.output and "nothing deleted" in r.output
    assert len(legacy.find(FakeCluster.load(str(state)), NS)) == 7

    r = run(["teardown", cfg, "--legacy", "--yes"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "5 object(s) deleted; 2 PVC(s) kept" in r.output
    left = FakeCluster.load(str(state))
    assert [o.ref for o in legacy.find(left, NS)] == [
        "persistentvolumeclaim/ml-datasets",
        "persistentvolumeclaim/ml-dev-workspace",
    ]

    r = run(["deploy", cfg, "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "kept and mounted (storage.existing_claims)" in r.output
    dev = FakeCluster.load(str(state)).get("Pod", names.DEV_POD, NS)
    assert dev is not None
    assert {"ml-dev-workspace", "ml-datasets"} <= {
        v["persistentVolumeClaim"]["claimName"]
        for v in dev["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    r = run(["teardown", cfg, "--purge"], state, monkeypatch)  # ours, with purge: theirs stay
    assert r.exit_code == 0
    pvcs = {
        p["metadata"]["name"]
        for p in FakeCluster.load(str(state)).list("PersistentVolumeClaim", NS)
    }
    assert {"ml-dev-workspace", "ml-datasets"} <= pvcs

    r = run(["teardown", cfg, "--legacy", "--purge", "--yes"], state, monkeypatch)
    assert r.exit_code == 0 and "2 object(s) deleted" in r.output
    assert legacy.find(FakeCluster.load(str(state)), NS) == []
