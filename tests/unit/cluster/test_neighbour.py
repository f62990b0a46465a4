"""A pod a namespace neighbour made with our labels is not ours. Workers are
selected by the StatefulSet's ownership (controller ownerReference uid) and ordinals
``0..replicas-1``, never by labels alone (fake cluster; the real-plane twin lives in
tests/kube/ once that tier is on main)."""

from __future__ import annotations

import copy

from mlenv.cluster.deploy import DeployOptions, deploy
from mlenv.cluster.pods import neighbour_pods, split_pods, worker_pods
from mlenv.cluster.status import status
from mlenv.cluster.sync import sync
from mlenv.cluster.teardown import teardown
from mlenv.workload import workload_for

pod_name = workload_for().pod_name


def _plant(fake, ns: str, name: str) -> None:
    """A Running pod with our worker labels, made by someone else (no ownerReference), on
    an emptyDir: what anyone who may create pods in the namespace can make."""
    pod = copy.deepcopy(fake.get("Pod", pod_name(0), ns))
    meta = pod["metadata"]
    for k in ("uid", "resourceVersion", "ownerReferences", "creationTimestamp", "generation"):
        meta.pop(k, None)
    meta["name"] = name
    for v in pod["spec"].get("volumes") or []:
        if "persistentVolumeClaim" in v:
            del v["persistentVolumeClaim"]
            v["emptyDir"] = {}
    fake._store(pod, ns)


def test_neighbour_pod_with_our_labels_is_ignored_everywhere(local_cfg, fake_for, tmp_path) -> None:
    cfg, fake = local_cfg, fake_for(local_cfg, rdma=False)
    ns = cfg.namespace
    deploy(cfg, DeployOptions(mode="tcp", timeout=120), fake)
    n = len(worker_pods(cfg, fake))
    assert n >= 1
    _plant(fake, ns, "ml-dev-env-99")  # an ordinal past replicas
    _plant(fake, ns, "intruder")
    names = [p.name for p in worker_pods(cfg, fake)]
    assert names == [pod_name(i) for i in range(n)]
    assert neighbour_pods(cfg, fake) == ["intruder", "ml-dev-env-99"]

    rep = status(cfg, fake)
    assert "intruder" not in [p.name for p in rep.pods]
    assert rep.neighbours == ["intruder", "ml-dev-env-99"]

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "secret.env").write_text("TOKEN=x\n")
    srep = sync(cfg, fake, str(ws))
    assert set(srep.copied) <= set(names) and "intruder" not in srep.verified
    assert not [
        c for c in fake.calls if c[:2] in (["rsync", "intruder"], ["rsync", "ml-dev-env-99"])
    ]

    said: list[str] = []
    deploy(cfg, DeployOptions(mode="tcp", timeout=120), fake, say=said.append)
    assert any("intruder, ml-dev-env-99 carry the labels" in s for s in said), said

    trep = teardown(cfg, fake)
    assert fake.get("Pod", "intruder", ns) is not None
    assert fake.get("Pod", "ml-dev-env-99", ns) is not None
    assert any(line.startswith("pod/intruder: kept") for line in trep.left)


def test_a_pod_our_statefulset_does_not_control_is_not_a_worker(local_cfg, fake_for) -> None:
    """Right name, right labels, wrong owner: a pod made while the StatefulSet was away."""
    cfg, fake = local_cfg, fake_for(local_cfg, rdma=False)
    deploy(cfg, DeployOptions(mode="tcp", timeout=120), fake)
    pod = fake.get("Pod", pod_name(0), cfg.namespace)
    pod["metadata"]["ownerReferences"][0]["uid"] = "someone-elses"
    fake._store(pod, cfg.namespace)
    assert pod_name(0) not in [p.name for p in worker_pods(cfg, fake)]
    assert pod_name(0) in neighbour_pods(cfg, fake)


def test_a_pod_of_ours_past_replicas_is_leaving_not_a_neighbour(local_cfg, fake_for) -> None:
    """A scale-down's pod still terminating: the StatefulSet's own (its uid) past
    spec.replicas. No worker (sync and launch skip it), no neighbour (no warning that
    someone else made it), listed by status, not kept by teardown."""
    cfg, fake = local_cfg, fake_for(local_cfg, rdma=False)
    deploy(cfg, DeployOptions(mode="tcp", timeout=120), fake)
    pod = copy.deepcopy(fake.get("Pod", pod_name(0), cfg.namespace))
    for k in ("uid", "resourceVersion", "creationTimestamp"):
        pod["metadata"].pop(k, None)
    pod["metadata"]["name"] = pod_name(7)  # ownerReferences kept: the controller made it
    fake._store(pod, cfg.namespace)
    assert split_pods(cfg, fake).leaving[0]["metadata"]["name"] == pod_name(7)
    assert pod_name(7) not in [p.name for p in worker_pods(cfg, fake)]
    assert neighbour_pods(cfg, fake) == []
    rep = status(cfg, fake)
    assert pod_name(7) in [p.name for p in rep.pods] and rep.neighbours == []
    said: list[str] = []
    deploy(cfg, DeployOptions(mode="tcp", timeout=120), fake, say=said.append)
    assert not [s for s in said if "carry the labels" in s], said
    assert not [line for line in teardown(cfg, fake).left if line.startswith("pod/")]
