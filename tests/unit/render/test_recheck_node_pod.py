"""The re-check Pod of a quarantined node (``mlenv recheck RUN``): pinned to that node by
name, tolerating our quarantine taint and nothing broader, built from the workers' pod
template; and the workers themselves never tolerate that taint."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from render_fixtures import one, rdma_cluster, tcp_cluster

from mlenv.config.model import Cluster, Mode, Scheduling, Toleration
from mlenv.contract import HEALTH_FAIL, LABEL_HEALTH, TAINT_EFFECT
from mlenv.render import recheck
from mlenv.render.names import workload
from mlenv.render.plan import render_cluster
from mlenv.render.workload import GPU_RESOURCE, workers

NODE = "gpu-node-03.barcelona.example.com"


def _template(cluster: Cluster, mode: Mode = "rdma") -> dict[str, Any]:
    wl = workload(cluster)
    obj = next(o for o in workers(cluster, mode, 2) if o["kind"] in wl.kinds)
    template: dict[str, Any] = wl.pod_template(obj)
    return template


def test_the_pod_is_pinned_to_the_node_by_name_and_tolerates_exactly_our_taint() -> None:
    c = rdma_cluster()
    pod = recheck.node_pod(c, NODE, _template(c), profile="quick")
    spec = pod["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # matchFields on the Node's name: the scheduler still checks taints and resources
    # (nodeName would bypass it, and land on a node someone else tainted)
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
    ]
    assert "nodeName" not in spec and "nodeSelector" not in spec
    ours = [t for t in spec["tolerations"] if t.get("key") == LABEL_HEALTH]
    assert ours == [
        {"key": LABEL_HEALTH, "operator": "Equal", "value": HEALTH_FAIL, "effect": TAINT_EFFECT}
    ]
    # the workers' own tolerations (the GPU taint) stay; nothing tolerates every taint
    assert {t.get("key") for t in spec["tolerations"]} == {GPU_RESOURCE, LABEL_HEALTH}
    assert all(t.get("key") for t in spec["tolerations"])
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == recheck.PROFILE_BOUND_S["quick"]
    assert spec["automountServiceAccountToken"] is False
    assert pod["metadata"]["annotations"][recheck.NODE_ANNOTATION] == NODE
    # not a worker: its app name is the re-check's, so no selector of the workers finds it
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == recheck.RECHECK_APP
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == recheck.NODE_COMPONENT


def test_the_container_is_the_workers_without_their_world() -> None:
    c = rdma_cluster()
    worker = _template(c)["spec"]["containers"][0]
    [ctr] = recheck.node_pod(c, NODE, _template(c), profile="full")["spec"]["containers"]
    assert ctr["image"] == worker["image"] and ctr["securityContext"] == worker["securityContext"]
    assert ctr["command"] == ["sleep", str(recheck.PROFILE_BOUND_S["full"])]
    env = {e["name"]: e for e in ctr["env"]}
    assert "MLENV_NODE_NAME" in env and "MLENV_CLUSTER" in env  # node verdicts, history
    # a world of one node, rank 0, its rendezvous on itself; no racks, no worker count
    assert {k: env[k].get("value") for k in recheck.WORLD_ENV} == recheck.WORLD_ENV
    assert not set(env) & recheck.DROPPED_ENV
    assert len(env) == len(ctr["env"])  # each variable once
    # GPUs, CPU and memory; not the RDMA devices (no Multus network comes with the pod)
    assert ctr["resources"]["limits"][GPU_RESOURCE] == 4
    assert "rdma/rdma_shared_device_a" not in ctr["resources"]["limits"]
    assert ctr["resources"]["requests"]["cpu"] == "32"
    assert "readinessProbe" not in ctr and "ports" not in ctr


def test_one_name_per_node_and_a_valid_pod_name_for_a_long_node() -> None:
    long = "n" * 200 + ".example.com"
    a, b = recheck.node_pod_name(NODE), recheck.node_pod_name(long)
    assert a == recheck.node_pod_name(NODE) and a != b
    assert len(b) <= 63 and b.startswith(f"{recheck.RECHECK}-node-")


@pytest.mark.parametrize(
    ("tolerations", "tolerated"),
    [
        ([], False),
        ([{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}], False),
        ([{"operator": "Exists"}], True),  # an empty key with Exists tolerates every taint
        ([{"key": LABEL_HEALTH, "operator": "Exists"}], True),
        ([{"key": LABEL_HEALTH, "value": HEALTH_FAIL, "effect": "NoSchedule"}], True),
        ([{"key": LABEL_HEALTH, "value": "rma", "effect": "NoSchedule"}], False),
        ([{"key": LABEL_HEALTH, "operator": "Exists", "effect": "NoExecute"}], False),
    ],
)
def test_tolerates_quarantine_follows_kubernetes_matching(
    tolerations: list[dict[str, str]], tolerated: bool
) -> None:
    assert recheck.tolerates_quarantine(tolerations) is tolerated


def test_a_broad_toleration_of_the_workers_is_not_carried_into_the_recheck_pod() -> None:
    c = replace(
        tcp_cluster(),
        scheduling=Scheduling(tolerations=(Toleration(key="", operator="Exists"),)),
    )
    pod = recheck.node_pod(c, NODE, _template(c, "tcp"), profile="quick")
    assert pod["spec"]["tolerations"] == [recheck.quarantine_toleration()]


@pytest.mark.parametrize("mode", ["rdma", "tcp"])
def test_the_workers_never_tolerate_the_quarantine_taint(mode: Mode) -> None:
    c = rdma_cluster() if mode == "rdma" else tcp_cluster()
    sts = one(render_cluster(c, mode), "StatefulSet")
    assert not recheck.tolerates_quarantine(sts["spec"]["template"]["spec"].get("tolerations"))


def test_the_suite_runs_through_the_pod_launcher_into_the_pods_folder() -> None:
    argv = recheck.node_suite_argv(
        "20261129-040000-abcdef", profile="quick", suite_args=["--checks", "compute"]
    )
    assert argv[:4] == ["python", "-m", "mlenv.pod", "run-torchrun"]
    assert argv[argv.index("--report-dir") + 1] == f"{recheck.NODE_DIR}/20261129-040000-abcdef"
    assert argv[argv.index("--run-id") + 1] == "20261129-040000-abcdef"
    assert argv[-3:] == ["--", "--checks", "compute"]
    assert "--" not in recheck.node_suite_argv(
        "20261129-040000-abcdef", profile="full", suite_args=[]
    )


def test_the_pod_launcher_reads_the_pods_env_as_a_world_of_one_node() -> None:
    from mlenv.pod.env import pod_env

    c = rdma_cluster()
    [ctr] = recheck.node_pod(c, NODE, _template(c), profile="quick")["spec"]["containers"]
    # the downward API's values, as the kubelet fills them in
    fields = {"metadata.namespace": c.namespace, "metadata.name": "x", "spec.nodeName": NODE}
    env = {
        e["name"]: e["value"]
        if "value" in e
        else fields.get(e["valueFrom"]["fieldRef"]["fieldPath"], "")
        for e in ctr["env"]
    }
    pe = pod_env(env)
    assert (pe.nnodes, pe.rank, pe.master_addr) == (1, 0, "127.0.0.1")
    assert env["MLENV_NODE_NAME"] == NODE
