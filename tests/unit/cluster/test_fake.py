# mypy: disable-error-code="index"
# (the fake's get() returns an Optional; these tests index objects they just created)
"""The fake enforces what the real API does and the deploy code depends on."""

from __future__ import annotations

import copy

import pytest

from mlenv.cluster.api import Conflict, ExecTimeout, Forbidden, Invalid, NotFound
from mlenv.errors import InputError
from mlenv.testing.fakecluster import FakeCluster


def sts(replicas: int = 2, vct_size: str = "1Gi", caps: list[str] | None = None) -> dict:
    labels = {
        "app.kubernetes.io/name": "ml-dev-env",
        "app.kubernetes.io/instance": "t",
        "app.kubernetes.io/component": "worker",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "ml-dev-env", "labels": labels},
        "spec": {
            "replicas": replicas,
            "serviceName": "ml-dev-env-headless",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "sa",
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": labels},
                                    "topologyKey": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "main",
                            "image": "img:1",
                            "securityContext": {"capabilities": {"add": caps or []}},
                            "resources": {"limits": {"nvidia.com/gpu": 4}},
                            "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "workspace", "labels": labels},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": vct_size}},
                    },
                }
            ],
        },
    }


def ticks(fake: FakeCluster, n: int = 4) -> None:
    for _ in range(n):
        fake.pause(1.0)


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster.typical("ns", ["n1", "n2", "n3"], gpus=4)


def test_apply_needs_namespace_and_bumps_resource_version_only_on_change(fake: FakeCluster) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    with pytest.raises(NotFound, match='namespaces "nope" not found'):
        fake.apply(cm, "nope")
    assert fake.apply(cm, "ns").action == "created"
    rv = fake.get("ConfigMap", "c", "ns")["metadata"]["resourceVersion"]
    assert fake.apply(cm, "ns").action == "unchanged"
    assert fake.get("ConfigMap", "c", "ns")["metadata"]["resourceVersion"] == rv
    cm2 = copy.deepcopy(cm)
    cm2["data"]["a"] = "2"
    assert fake.apply(cm2, "ns").action == "configured"
    assert fake.get("ConfigMap", "c", "ns")["metadata"]["resourceVersion"] != rv


def test_server_side_apply_conflicts_between_managers(fake: FakeCluster) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    fake.apply(cm, "ns", field_manager="mlenv")
    theirs = copy.deepcopy(cm)
    theirs["data"]["a"] = "other"
    with pytest.raises(Conflict) as e:
        fake.apply(theirs, "ns", field_manager="someone")
    assert e.value.fields == [("data.a", "mlenv")]
    fake.apply(theirs, "ns", field_manager="someone", force_conflicts=True)
    assert fake.get("ConfigMap", "c", "ns")["data"]["a"] == "other"
    # a field a manager stops applying goes away
    fake.apply({**cm, "data": {"b": "x"}}, "ns", field_manager="mlenv")
    assert fake.get("ConfigMap", "c", "ns")["data"] == {"a": "other", "b": "x"}


def test_statefulset_controller_pods_pvcs_and_immutable_fields(fake: FakeCluster) -> None:
    fake.apply(sts(), "ns")
    ticks(fake)
    pods = fake.list("Pod", "ns", {"app.kubernetes.io/instance": "t"})
    assert [p["metadata"]["name"] for p in pods] == ["ml-dev-env-0", "ml-dev-env-1"]
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2  # anti-affinity
    assert len(fake.list("PersistentVolumeClaim", "ns")) == 2
    with pytest.raises(Invalid, match="volumeClaimTemplates"):
        fake.apply(sts(vct_size="2Gi"), "ns")
    fake.delete("StatefulSet", "ml-dev-env", "ns")
    assert fake.list("Pod", "ns") == []
    assert len(fake.list("PersistentVolumeClaim", "ns")) == 2  # PVCs outlive their pods


def test_pending_reasons_insufficient_gpus_and_scc(fake: FakeCluster) -> None:
    fake.apply(sts(replicas=4), "ns")  # 3 nodes, one pod per node
    ticks(fake)
    pending = [p for p in fake.list("Pod", "ns") if p["status"]["phase"] == "Pending"]
    assert [p["metadata"]["name"] for p in pending] == ["ml-dev-env-3"]
    msgs = [e.message for e in fake.events("ns", "Pod", "ml-dev-env-3")]
    assert any("didn't match pod anti-affinity" in m for m in msgs)
    other = FakeCluster.typical("ns", ["n1"], gpus=2)
    other.apply(sts(replicas=1), "ns")
    ticks(other)
    assert any("Insufficient nvidia.com/gpu" in e.message for e in other.events("ns", "Pod"))
    scc = FakeCluster.typical("ns", ["n1"], gpus=4)
    scc.apply(sts(replicas=1, caps=["IPC_LOCK"]), "ns")
    ticks(scc)
    assert scc.list("Pod", "ns") == []
    assert any(
        e.reason == "FailedCreate" and "security context constraint" in e.message
        for e in scc.events("ns", "StatefulSet")
    )


def test_pvc_unbound_and_image_pull(fake: FakeCluster) -> None:
    bad = sts(replicas=1)
    bad["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = "missing"
    fake.apply(bad, "ns")
    ticks(fake)
    assert any(
        "unbound immediate PersistentVolumeClaims" in e.message
        for e in fake.events("ns", "Pod", "ml-dev-env-0")
    )
    img = FakeCluster.typical("ns", ["n1"], gpus=4)
    img.image_pull_failures = ["img:1"]
    img.apply(sts(replicas=1), "ns")
    ticks(img)
    assert any("Failed to pull image" in e.message for e in img.events("ns", "Pod", "ml-dev-env-0"))


def test_state_round_trips_through_json(fake: FakeCluster, tmp_path) -> None:
    fake.apply(sts(replicas=1), "ns")
    ticks(fake)
    fake.write_pod_file("ml-dev-env-0", "ns", "/workspace/a.txt", b"hi")
    path = str(tmp_path / "state.json")
    fake.save(path)
    back = FakeCluster.load(path)
    assert back.pod_files("ml-dev-env-0", "ns", "/workspace") == {"a.txt": b"hi"}
    assert back.list("Pod", "ns") == fake.list("Pod", "ns")


def dev_pod(env: str = "a", image: str = "img:1", tolerations: list | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dev"},
        "spec": {
            "containers": [{"name": "dev", "image": image, "env": [{"name": "X", "value": env}]}],
            "tolerations": tolerations or [],
        },
    }


def test_pod_spec_is_immutable_except_what_the_api_allows(fake: FakeCluster) -> None:
    fake.apply(dev_pod(), "ns")
    assert fake.apply(dev_pod(image="img:2"), "ns").action == "configured"  # images may change
    tol = [{"key": "gpu", "operator": "Exists"}]
    assert fake.apply(dev_pod(image="img:2", tolerations=tol), "ns").action == "configured"
    with pytest.raises(Invalid, match="pod updates may not change fields"):
        fake.apply(dev_pod(image="img:2"), "ns")  # removing a toleration
    with pytest.raises(Invalid, match="pod updates may not change fields"):
        fake.apply(dev_pod(env="b", image="img:2", tolerations=tol), "ns")
    with pytest.raises(Invalid):
        fake.apply(dev_pod(env="b"), "ns", dry_run=True)  # a dry run is refused the same way


def test_plain_kubernetes_does_not_serve_openshift_kinds() -> None:
    kube = FakeCluster(openshift=False)
    kube.add_namespace("ns")
    for kind in ("Route", "BuildConfig", "ImageStream", "SecurityContextConstraints"):
        with pytest.raises(NotFound, match="doesn't have a resource type"):
            kube.list(kind, "ns")
        with pytest.raises(NotFound):
            kube.get(kind, "x", "ns")
    assert kube.list("StatefulSet", "ns") == []


def test_apply_needs_create_for_new_and_patch_for_existing(fake: FakeCluster) -> None:
    scc = {
        "apiVersion": "security.openshift.io/v1",
        "kind": "SecurityContextConstraints",
        "metadata": {"name": "s"},
        "allowedCapabilities": ["IPC_LOCK"],
    }
    fake.apply(scc, None, field_manager="admin")
    fake.denied = ["create securitycontextconstraints", "patch securitycontextconstraints"]
    assert not fake.can_i("patch", "securitycontextconstraints.security.openshift.io")
    with pytest.raises(Forbidden, match="cannot patch"):
        fake.apply(scc, None)  # unchanged, still a PATCH the user may not send
    with pytest.raises(Forbidden, match="cannot create"):
        fake.apply({**scc, "metadata": {"name": "t"}}, None)


def test_can_i_as_service_account_follows_rolebindings(fake: FakeCluster) -> None:
    scc = {
        "apiVersion": "security.openshift.io/v1",
        "kind": "SecurityContextConstraints",
        "metadata": {"name": "s"},
    }
    sa = "system:serviceaccount:ns:sa"
    assert not fake.can_i("use", "securitycontextconstraints/s", "ns", as_user=sa)  # no SCC
    fake.apply(scc, None)
    assert not fake.can_i("use", "securitycontextconstraints/s", "ns", as_user=sa)
    fake.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "use-s"},
            "rules": [
                {
                    "verbs": ["use"],
                    "resources": ["securitycontextconstraints"],
                    "resourceNames": ["s"],
                }
            ],
        },
        None,
    )
    fake.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "b"},
            "roleRef": {"kind": "ClusterRole", "name": "use-s"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa"}],
        },
        "ns",
    )
    assert fake.can_i("use", "securitycontextconstraints/s", "ns", as_user=sa)
    fake.denied = ["impersonate serviceaccounts"]
    with pytest.raises(Forbidden, match="impersonate"):
        fake.can_i("use", "securitycontextconstraints/s", "ns", as_user=sa)


def test_rsync_follows_rsync_exclude_rules(fake: FakeCluster, tmp_path) -> None:
    fake.apply(sts(replicas=1), "ns")
    ticks(fake)
    for rel in ("a.py", "results/top.json", "x/results/deep.json", "x/__pycache__/c.pyc"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    fake.write_pod_file("ml-dev-env-0", "ns", "/workspace/results/run/keep", b"k")
    fake.write_pod_file("ml-dev-env-0", "ns", "/workspace/stale.py", b"s")
    fake.rsync(
        str(tmp_path), "ml-dev-env-0", "ns", "/workspace", exclude=["/results", "__pycache__"]
    )
    files = set(fake.pod_files("ml-dev-env-0", "ns", "/workspace"))
    # /results: only the top-level one is skipped; the copy deletes nothing (stale.py stays)
    assert files == {"a.py", "x/results/deep.json", "results/run/keep", "stale.py"}
    fake.volumes.clear()
    fake.rsync(str(tmp_path), "ml-dev-env-0", "ns", "/workspace", exclude=["results"])
    assert "x/results/deep.json" not in fake.pod_files("ml-dev-env-0", "ns", "/workspace")


def test_exec_answers_per_pod_and_hangs_until_the_timeout(fake: FakeCluster) -> None:
    fake.apply(sts(replicas=2), "ns")
    ticks(fake)
    fake.exec_responses["job"] = {"rc": 0, "stdout": "ok"}
    fake.pod_exec_responses["ml-dev-env-1"] = {"job": {"rc": 3, "stderr": "boom"}}
    assert fake.exec("ml-dev-env-0", "ns", ["job"]).stdout == "ok"
    assert fake.exec("ml-dev-env-1", "ns", ["job"], check=False).returncode == 3
    fake.exec_responses["slow"] = {"hang": True}
    with pytest.raises(ExecTimeout, match="within 5 s"):
        fake.exec("ml-dev-env-0", "ns", ["slow"], timeout=5)
    assert ["exec", "ml-dev-env-1", "job"] in fake.calls


def test_connect_builds_the_client_with_the_installed_factory_and_restores_the_real_one(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collections.abc import Iterator
    from contextlib import contextmanager

    from mlenv.cluster import connect as conn

    seen: list[conn.ClientOptions] = []

    @contextmanager
    def factory(opts: conn.ClientOptions) -> Iterator[FakeCluster]:
        seen.append(opts)
        yield fake

    monkeypatch.setenv("MLENV_EXEC_TIMEOUT", "7.5")
    with conn.use_factory(factory):
        with conn.connect(kubeconfig="/k", context="ctx") as client:
            assert client is fake
    assert seen == [conn.ClientOptions(7.5, True, "/k", "ctx")]
    assert conn.set_factory(None) is conn.oc_client  # restored on leaving the block
    monkeypatch.setenv("MLENV_EXEC_TIMEOUT", "-1")
    with conn.use_factory(factory), pytest.raises(InputError, match="MLENV_EXEC_TIMEOUT=-1"):
        with conn.connect():
            pass
