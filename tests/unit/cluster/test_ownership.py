"""One deployment must not hurt another, and a deploy that fails half-way
says exactly what is applied and how to finish or remove it (fake cluster)."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from mlenv.cluster.deploy import (
    DeployIncomplete,
    DeployOptions,
    PreflightFailed,
    deploy,
    plan,
)
from mlenv.cluster.keys import DEVTOOLS_SECRET, SECRET_NAME
from mlenv.cluster.teardown import teardown
from mlenv.config import load
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.contract import ANNOTATION_CREATED

from .conftest import ROOT


def in_namespace(cfg: ClusterConfig, ns: str, name: str | None = None) -> ClusterConfig:
    info = dataclasses.replace(cfg.cluster, namespace=ns, name=name or cfg.cluster.name)
    return dataclasses.replace(cfg, cluster=info)


def uid(fake, kind: str, name: str, ns: str | None) -> str:
    return str(fake.get(kind, name, ns)["metadata"]["uid"])


def test_same_cluster_name_in_two_namespaces_gets_two_sccs(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    fake.add_namespace("team-b")
    team_b = in_namespace(barcelona, "team-b")
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    deploy(team_b, DeployOptions(mode="rdma", timeout=60), fake)
    a_scc, b_scc = "ml-dev-env-ml-dev-env-barcelona-rdma", "ml-dev-env-team-b-barcelona-rdma"
    assert fake.get("SecurityContextConstraints", a_scc, None) is not None
    rep = teardown(barcelona, fake)
    assert f"securitycontextconstraints/{a_scc}" in rep.deleted
    # team-b's pods keep the SCC and ClusterRole their next restart is admitted with
    assert fake.get("SecurityContextConstraints", b_scc, None) is not None
    assert fake.get("ClusterRole", f"{b_scc}-use", None) is not None
    assert fake.get("StatefulSet", "ml-dev-env", "team-b") is not None


def test_cluster_role_still_granted_elsewhere_is_kept(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    fake.add_namespace("other")
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    role = "ml-dev-env-ml-dev-env-barcelona-rdma-use"
    fake.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "borrowed"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "x", "namespace": "other"}],
        },
        "other",
        field_manager="someone",
    )
    rep = teardown(barcelona, fake)
    assert fake.get("ClusterRole", role, None) is not None
    assert any("still granted by rolebinding other/borrowed" in x for x in rep.left)


def test_scc_named_the_old_way_is_left_with_why(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    fake.apply(
        {
            "apiVersion": "security.openshift.io/v1",
            "kind": "SecurityContextConstraints",
            "metadata": {
                "name": "ml-dev-env-barcelona-rdma",
                "labels": {
                    "app.kubernetes.io/name": "ml-dev-env",
                    "app.kubernetes.io/instance": "barcelona",
                },
            },
        },
        None,
    )
    rep = teardown(barcelona, fake)
    assert fake.get("SecurityContextConstraints", "ml-dev-env-barcelona-rdma", None) is not None
    assert any("named before mlenv put the namespace" in x for x in rep.left)


def test_deploying_another_config_into_the_namespace_is_refused(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ns = barcelona.namespace
    before = {
        k: uid(fake, k, n, ns) for k, n in (("StatefulSet", "ml-dev-env"), ("Secret", SECRET_NAME))
    }
    intruder = in_namespace(barcelona, ns, name="team-b")
    with pytest.raises(PreflightFailed) as e:
        deploy(intruder, DeployOptions(mode="rdma", timeout=60), fake)
    assert e.value.exit_code == 2
    msg = str(e.value)
    assert "statefulset/ml-dev-env: belongs to instance 'barcelona'" in msg
    assert f"secret/{SECRET_NAME}: belongs to instance 'barcelona'" in msg
    assert "--take-over" in msg
    assert {
        k: uid(fake, k, n, ns) for k, n in (("StatefulSet", "ml-dev-env"), ("Secret", SECRET_NAME))
    } == before
    # with the explicit flag it goes ahead, and never reuses the other instance's ssh keys
    old_key = fake.get("Secret", SECRET_NAME, ns)["data"]["id_ed25519"]
    said: list[str] = []
    deploy(intruder, DeployOptions(mode="rdma", timeout=60, take_over=True), fake, say=said.append)
    assert any(s.startswith("take-over: statefulset/ml-dev-env") for s in said)
    assert fake.get("Secret", SECRET_NAME, ns)["data"]["id_ed25519"] != old_key
    labels = fake.get("StatefulSet", "ml-dev-env", ns)["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == "team-b"


def test_purge_keeps_a_claim_another_instance_mounts(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ns = barcelona.namespace
    claims = [c["metadata"]["name"] for c in fake.list("PersistentVolumeClaim", ns)]
    shared = claims[0]
    fake.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "neighbour", "labels": {"app.kubernetes.io/instance": "team-b"}},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [{"name": "w", "persistentVolumeClaim": {"claimName": shared}}],
            },
        },
        ns,
        field_manager="team-b",
    )
    rep = teardown(barcelona, fake, purge=True)
    assert fake.get("PersistentVolumeClaim", shared, ns) is not None
    assert any(
        x.startswith(f"persistentvolumeclaim/{shared}: kept: pod neighbour") for x in rep.left
    )
    assert all(fake.get("PersistentVolumeClaim", c, ns) is None for c in claims if c != shared)


def test_pre_created_service_account_is_adopted_never_deleted(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    ns = barcelona.namespace
    fake.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ml-dev-sa"}},
        ns,
        field_manager="oc",
    )
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    sa = fake.get("ServiceAccount", "ml-dev-sa", ns)
    assert sa["metadata"]["labels"]["app.kubernetes.io/instance"] == "barcelona"
    assert ANNOTATION_CREATED not in (sa["metadata"].get("annotations") or {})
    sts = fake.get("StatefulSet", "ml-dev-env", ns)
    assert sts["metadata"]["annotations"][ANNOTATION_CREATED] == "mlenv"
    rep = teardown(barcelona, fake)
    sa = fake.get("ServiceAccount", "ml-dev-sa", ns)
    assert sa is not None and "app.kubernetes.io/instance" not in (
        sa["metadata"].get("labels") or {}
    )
    assert "serviceaccount/ml-dev-sa" not in rep.deleted
    assert fake.get("StatefulSet", "ml-dev-env", ns) is None


def test_service_account_deploy_created_is_deleted_and_marker_survives_redeploy(
    barcelona, fake_for
) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    rep = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    assert rep.unchanged  # the marker is re-applied, not flapping
    ns = barcelona.namespace
    assert (
        ANNOTATION_CREATED in fake.get("ServiceAccount", "ml-dev-sa", ns)["metadata"]["annotations"]
    )
    assert "serviceaccount/ml-dev-sa" in teardown(barcelona, fake).deleted


def _objects_in_apply_order(cfg: ClusterConfig) -> list[str]:
    """What a first deploy applies, in order: the two Secrets, then the plan."""
    return [f"Secret/{SECRET_NAME}", f"Secret/{DEVTOOLS_SECRET}"] + [
        f"{m['kind']}/{m['metadata']['name']}" for m in plan(cfg, "rdma", None)
    ]


STEPS = len(_objects_in_apply_order(load("barcelona", ROOT)))


@pytest.mark.parametrize("step", range(STEPS))
def test_a_failure_at_every_step_says_what_is_applied(barcelona, fake_for, step: int) -> None:
    fake = fake_for(barcelona)
    order = _objects_in_apply_order(barcelona)
    target = order[step]
    fake.apply_failures[target] = 5  # more than the retries
    with pytest.raises(DeployIncomplete) as e:
        deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    msg = str(e.value)
    assert e.value.exit_code == 3
    kind, name = target.split("/", 1)
    assert "injected" in msg and f"{kind.lower()}/{name}" in msg.split("not applied:")[1]
    applied = msg.split("now applied:")[1].split("not applied:")[0]
    for before in order[:step]:
        k, n = before.split("/", 1)
        assert f"{k.lower()}/{n}: " in applied, before
        assert (
            fake.get(
                k,
                n,
                None if k in ("SecurityContextConstraints", "ClusterRole") else barcelona.namespace,
            )
            is not None
        )
    assert f"mlenv deploy {barcelona.name} --mode rdma" in msg
    assert f"mlenv teardown {barcelona.name}" in msg
    assert fake.apply_failures[target] == 5 - 3  # tried three times


def test_transient_failure_is_retried(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    fake.apply_failures["StatefulSet/ml-dev-env"] = 2
    said: list[str] = []
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert sum("retrying" in s for s in said) == 2
    assert fake.get("StatefulSet", "ml-dev-env", barcelona.namespace) is not None


def test_recreated_statefulset_comes_back_or_is_named_as_deleted(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ns = barcelona.namespace
    changed = dataclasses.replace(
        barcelona, storage=dataclasses.replace(barcelona.storage, workspace_size="400Gi")
    )
    fake.apply_failures["StatefulSet/ml-dev-env"] = 1  # transient: retried, comes back
    rep = deploy(changed, DeployOptions(mode="rdma", timeout=60), fake)
    assert rep.recreated == ["statefulset/ml-dev-env"]
    assert fake.get("StatefulSet", "ml-dev-env", ns) is not None
    bigger = dataclasses.replace(
        barcelona, storage=dataclasses.replace(barcelona.storage, workspace_size="800Gi")
    )
    fake.apply_failures["StatefulSet/ml-dev-env"] = 9  # it stays down: say so
    with pytest.raises(DeployIncomplete) as e:
        deploy(bigger, DeployOptions(mode="rdma", timeout=60), fake)
    assert fake.get("StatefulSet", "ml-dev-env", ns) is None
    assert "statefulset/ml-dev-env: DELETED to be recreated, not yet re-applied" in str(e.value)


def test_empty_or_foreign_secret_is_regenerated(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    ns = barcelona.namespace
    empty = base64.b64encode(b"").decode()
    fake.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": SECRET_NAME,
                "labels": {
                    "app.kubernetes.io/name": "ml-dev-env",
                    "app.kubernetes.io/instance": "barcelona",
                },
            },
            "data": {
                k: empty
                for k in (
                    "id_ed25519",
                    "id_ed25519.pub",
                    "ssh_host_ed25519_key",
                    "ssh_host_ed25519_key.pub",
                )
            },
        },
        ns,
        field_manager="someone",
    )
    said: list[str] = []
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert any(f"secret/{SECRET_NAME}: not reusable (key(s) missing or empty" in s for s in said)
    data = fake.get("Secret", SECRET_NAME, ns)["data"]
    assert all(base64.b64decode(v) for v in data.values())


def test_no_scc_when_it_would_add_nothing_so_non_admins_keep_rdma(fake_for, tmp_path) -> None:
    # upstream's barcelona: RDMA on, ipc_lock false, not privileged
    up = load(ROOT / "tests" / "data" / "upstream" / "barcelona.yaml")
    assert up.rdma.enabled and not up.security.ipc_lock
    kinds = {m["kind"] for m in plan(up, "rdma", None)}
    assert not kinds & {"SecurityContextConstraints", "ClusterRole", "RoleBinding"}
    fake = fake_for(up)
    fake.denied = [
        "create securitycontextconstraints",
        "patch securitycontextconstraints",
        "create clusterroles",
        "patch clusterroles",
    ]
    said: list[str] = []
    rep = deploy(up, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert rep.mode == "rdma" and not rep.fallback_reasons, said


def test_upgrade_from_the_old_scc_name_re_points_the_role_binding(barcelona, fake_for) -> None:
    # a deployment made before SCC names carried the namespace: its RoleBinding grants the
    # old ClusterRole, and roleRef is immutable (422 "cannot change roleRef")
    fake = fake_for(barcelona)
    ns = barcelona.namespace
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    rb = fake.get("RoleBinding", "ml-dev-env-scc", ns)
    fake.delete("RoleBinding", "ml-dev-env-scc", ns)
    rb["roleRef"]["name"] = "ml-dev-env-barcelona-rdma-use"
    for k in ("uid", "resourceVersion", "creationTimestamp"):
        rb["metadata"].pop(k, None)
    fake.apply(rb, ns)
    said: list[str] = []
    rep = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert "rolebinding/ml-dev-env-scc" in rep.recreated
    assert (
        fake.get("RoleBinding", "ml-dev-env-scc", ns)["roleRef"]["name"]
        == "ml-dev-env-ml-dev-env-barcelona-rdma-use"
    )
    assert any("its roleRef cannot change in place" in s for s in said)
