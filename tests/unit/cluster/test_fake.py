"""The fake enforces what the real API does and the deploy code depends on."""

from __future__ import annotations

import copy

import pytest

from mlenv.cluster.api import Conflict, Invalid, NotFound
from mlenv.cluster.fake import FakeCluster


def sts(replicas: int = 2, vct_size: str = "1Gi", caps: list[str] | None = None) -> dict:
    labels = {"app.kubernetes.io/name": "ml-dev-env", "app.kubernetes.io/instance": "t",
              "app.kubernetes.io/component": "worker"}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "ml-dev-env", "labels": labels},
        "spec": {
            "replicas": replicas, "serviceName": "ml-dev-env-headless",
            "podManagementPolicy": "Parallel", "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "serviceAccountName": "sa",
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}},
                "containers": [{"name": "main", "image": "img:1",
                                "securityContext": {"capabilities": {"add": caps or []}},
                                "resources": {"limits": {"nvidia.com/gpu": 4}},
                                "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "workspace", "labels": labels},
                                      "spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": vct_size}}}}],
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
    assert any(e.reason == "FailedCreate" and "security context constraint" in e.message
               for e in scc.events("ns", "StatefulSet"))


def test_pvc_unbound_and_image_pull(fake: FakeCluster) -> None:
    bad = sts(replicas=1)
    bad["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = "missing"
    fake.apply(bad, "ns")
    ticks(fake)
    assert any("unbound immediate PersistentVolumeClaims" in e.message
               for e in fake.events("ns", "Pod", "ml-dev-env-0"))
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
