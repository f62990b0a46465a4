"""Preflight counts only nodes the planned pods can be scheduled on, and says which it
left out and why."""

from __future__ import annotations

import dataclasses

import pytest

from mlenv.cluster.deploy import DeployOptions, PreflightFailed, deploy
from mlenv.cluster.preflight import unschedulable


def _first_node(fake) -> dict:
    return next(o for k, o in sorted(fake.objects.items()) if k.startswith("Node|"))


def _refused(cfg, fake) -> str:
    with pytest.raises(PreflightFailed) as e:
        deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert fake.list("StatefulSet", cfg.namespace) == []
    return str(e.value)


def test_a_cordoned_node_is_not_counted(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    node = _first_node(fake)
    node.setdefault("spec", {})["unschedulable"] = True
    msg = _refused(local_cfg, fake)
    assert f"left out: {node['metadata']['name']} (cordoned)" in msg


def test_a_taint_the_pods_do_not_tolerate_leaves_the_node_out(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    node = _first_node(fake)
    node.setdefault("spec", {})["taints"] = [
        {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    ]
    msg = _refused(local_cfg, fake)
    assert "(taint dedicated=infra:NoSchedule not tolerated)" in msg


def test_nodes_without_the_node_selector_labels_are_left_out(local_cfg, fake_for) -> None:
    cfg = dataclasses.replace(
        local_cfg,
        scheduling=dataclasses.replace(local_cfg.scheduling, node_selector=(("pool", "a"),)),
    )
    fake = fake_for(cfg)
    msg = _refused(cfg, fake)
    assert "no label pool=a (scheduling.node_selector)" in msg
    for k, node in fake.objects.items():
        if k.startswith("Node|"):
            node["metadata"].setdefault("labels", {})["pool"] = "a"
    assert deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake).ready > 0


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "value": "v"}, True),  # every effect
        ({"key": "k", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # every taint
        ({"key": "k", "value": "other"}, False),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
    ],
)
def test_tolerations_match_as_the_scheduler_matches_them(toleration, tolerated: bool) -> None:
    node = {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}
    assert (unschedulable(node, {"tolerations": [toleration]}) == "") is tolerated
    soft = {"spec": {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}}
    assert unschedulable(soft, {}) == ""


def test_the_pinned_nodes_are_read_in_one_call_and_a_missing_one_is_named(
    barcelona, fake_for
) -> None:
    """Preflight read each pinned node with a process of its own (512 at 512 nodes). Now
    one ``get`` reads them all, and a pinned node that does not exist is still named.
    Fails on the code before: one call per pinned node."""
    from mlenv.cluster.deploy import plan
    from mlenv.cluster.preflight import run_preflight
    from mlenv.testing.kubectl_cli import InProcess

    fake = fake_for(barcelona)
    client = InProcess(fake)
    manifests = plan(barcelona, "rdma", 4)
    rep = run_preflight(barcelona, "rdma", 4, manifests, client)
    node_reads = [c for c in client.calls if c[0] == "get" and any("node" in w for w in c)]
    assert len(node_reads) == 1, node_reads
    assert not [p for p in rep.problems if "node" in p.message], rep.problems
    gone = barcelona.gpu_nodes[2]
    del fake.objects[f"Node||{gone}"]
    rep = run_preflight(barcelona, "rdma", 4, manifests, InProcess(fake))
    assert any(f"node {gone} (nodes.gpu_nodes) does not exist" in p.message for p in rep.problems)
    # a user who may not read nodes is told capacity was not checked, as before
    fake.denied = ["get nodes"]
    rep = run_preflight(barcelona, "rdma", 4, manifests, InProcess(fake))
    assert any("cannot read nodes (forbidden)" in n for n in rep.notes), rep.notes
