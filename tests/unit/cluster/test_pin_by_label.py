"""``nodes.pin_by: label``: deploy labels the pinned nodes, the pods select that one label
(a pod the same size whatever the node count), teardown takes it off; without rights on
Nodes an admin labels them once."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mlenv.cluster.deploy import DeployOptions, PreflightFailed, deploy
from mlenv.cluster.teardown import teardown
from mlenv.render.names import pool_label

KEY = "pool.ml-dev-env.io/ml-dev-env"  # the namespace of clusters/barcelona.yaml


@pytest.fixture
def pinned(barcelona):
    return dataclasses.replace(barcelona, pin_by="label")


def _pool(fake, cfg) -> dict[str, str | None]:
    """Each pinned node's pool label value (None: none)."""
    key = pool_label(cfg)[0]
    return {
        n: (fake.objects[f"Node||{n}"]["metadata"].get("labels") or {}).get(key)
        for n in cfg.gpu_nodes
    }


def _labels(fake) -> list[list[str]]:
    return [c for c in fake.calls if c[0] == "label"]


def _template(manifests) -> dict:
    sts = next(m for m in manifests if m["kind"] == "StatefulSet")
    return sts["spec"]["template"]["spec"]


def test_pods_select_one_label_and_stay_the_same_size_whatever_the_node_count(pinned) -> None:
    """With ``name`` each pod names every pinned node (a pod list grows with N²); with
    ``label`` the pod template is the same size at 4 and at 512 pinned nodes."""
    from mlenv.cluster.deploy import plan

    assert pool_label(pinned) == (KEY, pinned.name)

    def size(cfg, nodes: int) -> int:
        many = dataclasses.replace(cfg, gpu_nodes=tuple(f"gpu-{i:04d}" for i in range(nodes)))
        return len(json.dumps(_template(plan(many, "tcp", 4))))

    spec = _template(plan(pinned, "tcp", 4))
    assert spec["nodeSelector"][KEY] == pinned.name
    assert "nodeAffinity" not in spec["affinity"]
    assert "podAntiAffinity" in spec["affinity"]  # still one pod per node
    assert size(pinned, 512) == size(pinned, 4)
    by_name = dataclasses.replace(pinned, pin_by="name")
    terms = _template(plan(by_name, "tcp", 4))["affinity"]["nodeAffinity"]
    assert all(n in json.dumps(terms) for n in pinned.gpu_nodes)
    assert KEY not in (_template(plan(by_name, "tcp", 4)).get("nodeSelector") or {})
    assert size(by_name, 512) > size(by_name, 4) + 512 * 8


def test_deploy_labels_the_pinned_nodes_once_and_the_pods_land_on_them(pinned, fake_for) -> None:
    fake = fake_for(pinned)
    # one node more than pinned, which the pods must not use
    extra = json.loads(json.dumps(fake.objects[f"Node||{pinned.gpu_nodes[0]}"]))
    extra["metadata"]["name"] = "gpu-spare"
    extra["metadata"]["labels"]["kubernetes.io/hostname"] = "gpu-spare"
    fake.objects["Node||gpu-spare"] = extra
    said: list[str] = []
    rep = deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake, say=said.append)
    assert rep.ready == 4
    assert set(_pool(fake, pinned).values()) == {pinned.name}
    assert KEY not in (extra["metadata"].get("labels") or {})
    assert _labels(fake) == [["label", *pinned.gpu_nodes]]  # one call for every node
    assert any(f"labelled 4 pinned node(s) {KEY}={pinned.name}" in s for s in said), said
    on = {p["spec"].get("nodeName") for p in fake.list("Pod", pinned.namespace)}
    assert "gpu-spare" not in on
    # a re-deploy finds them labelled and patches no node
    fake.calls.clear()
    deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake)
    assert _labels(fake) == []


@pytest.mark.parametrize("denied", ["patch nodes", "list nodes"])
def test_without_rights_on_nodes_the_admin_commands_are_given_and_then_suffice(
    pinned, fake_for, denied: str
) -> None:
    fake = fake_for(pinned)
    fake.denied = [denied]
    with pytest.raises(PreflightFailed) as e:
        deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake)
    msg = str(e.value)
    assert "4 pinned node(s) lack the label" in msg and "may not list and patch nodes" in msg
    chosen = f"'--selector=kubernetes.io/hostname in ({','.join(pinned.gpu_nodes)})'"
    assert f"oc label {chosen} -- node {KEY}={pinned.name}" in msg
    assert fake.list("StatefulSet", pinned.namespace) == []  # nothing applied
    # the admin runs the command: the same user now deploys without touching a node
    for n in pinned.gpu_nodes:
        fake.objects[f"Node||{n}"]["metadata"].setdefault("labels", {})[KEY] = pinned.name
    assert deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake).ready == 4
    assert _labels(fake) == []


def test_a_user_who_may_not_read_nodes_deploys_onto_nodes_an_admin_labelled(
    pinned, fake_for
) -> None:
    """The usual namespace user may not even get a Node: preflight cannot tell labelled
    from unlabelled, so it says what an admin runs and goes on, labelling nothing."""
    fake = fake_for(pinned)
    fake.denied = ["get nodes", "list nodes", "patch nodes"]
    for n in pinned.gpu_nodes:
        fake.objects[f"Node||{n}"]["metadata"].setdefault("labels", {})[KEY] = pinned.name
    said: list[str] = []
    assert (
        deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake, say=said.append).ready
        == 4
    )
    assert _labels(fake) == []
    told = "\n".join(said)
    assert f"label {KEY}={pinned.name} not checked (cannot read nodes)" in told, told
    assert "oc label '--selector=kubernetes.io/hostname in (" in told


def test_a_node_whose_hostname_label_is_not_its_name_is_labelled_by_name(pinned, fake_for) -> None:
    """A hostname selector passes over a node it does not match without a word (a
    kubelet's --hostname-override): that node is named, on and off."""
    fake = fake_for(pinned)
    odd = pinned.gpu_nodes[2]
    fake.objects[f"Node||{odd}"]["metadata"]["labels"]["kubernetes.io/hostname"] = "ip-10-0-0-7"
    assert deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake).ready == 4
    assert set(_pool(fake, pinned).values()) == {pinned.name}
    rest = [n for n in pinned.gpu_nodes if n != odd]
    assert _labels(fake) == [["label", *rest], ["label", odd]]
    rep = teardown(pinned, fake)
    assert rep.unlabelled == sorted(pinned.gpu_nodes) and rep.left == []
    assert set(_pool(fake, pinned).values()) == {None}


def test_a_node_pinned_by_another_deployment_of_the_namespace_is_refused_not_taken(
    pinned, fake_for
) -> None:
    fake = fake_for(pinned)
    taken = pinned.gpu_nodes[1]
    fake.objects[f"Node||{taken}"]["metadata"].setdefault("labels", {})[KEY] = "other"
    with pytest.raises(PreflightFailed) as e:
        deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake)
    assert f"node {taken} (nodes.gpu_nodes) carries {KEY}=other" in str(e.value)
    assert _pool(fake, pinned)[taken] == "other"
    assert _labels(fake) == []


def test_teardown_takes_off_only_this_deployments_label_before_deleting(
    pinned, fake_for, monkeypatch
) -> None:
    fake = fake_for(pinned)
    deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake)
    # the label goes first: a Node patch waits behind hundreds of pods' deletions
    workload_then: list[bool] = []
    marks = fake.run_marks

    def spy(calls):
        workload_then.append(fake.get("StatefulSet", "ml-dev-env", pinned.namespace) is not None)
        return marks(calls)

    monkeypatch.setattr(fake, "run_marks", spy)
    # a label of the same key prefix for another namespace stays
    other = "pool.ml-dev-env.io/another-team"
    first = fake.objects[f"Node||{pinned.gpu_nodes[0]}"]["metadata"]["labels"]
    first[other] = "x"
    dry = teardown(pinned, fake, dry_run=True)
    assert dry.unlabelled == sorted(pinned.gpu_nodes)
    assert set(_pool(fake, pinned).values()) == {pinned.name}  # a dry run changes nothing
    rep = teardown(pinned, fake)
    assert rep.unlabelled == sorted(pinned.gpu_nodes) and rep.left == []
    assert workload_then == [True]
    assert fake.get("StatefulSet", "ml-dev-env", pinned.namespace) is None
    assert set(_pool(fake, pinned).values()) == {None}
    assert first[other] == "x"


def test_a_node_taken_out_of_the_list_loses_the_label_at_the_next_deploy(pinned, fake_for) -> None:
    fake = fake_for(pinned)
    deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake)
    fewer = dataclasses.replace(pinned, gpu_nodes=pinned.gpu_nodes[:3])
    said: list[str] = []
    deploy(
        fewer,
        DeployOptions(mode="tcp", timeout=60, nodes=3, scale_down=True),
        fake,
        say=said.append,
    )
    left = pinned.gpu_nodes[3]
    assert _pool(fake, pinned)[left] is None
    assert [v for n, v in _pool(fake, pinned).items() if n != left] == [pinned.name] * 3
    assert any(f"took {KEY}={pinned.name} off 1 node(s)" in s for s in said), said


def test_teardown_without_rights_on_nodes_leaves_the_label_and_says_how(pinned, fake_for) -> None:
    fake = fake_for(pinned)
    deploy(pinned, DeployOptions(mode="tcp", timeout=60, nodes=4), fake)
    fake.denied = ["list nodes"]
    rep = teardown(pinned, fake)
    assert rep.unlabelled == []
    assert any(f"oc label nodes -l {KEY}={pinned.name} {KEY}-" in x for x in rep.left)
    assert set(_pool(fake, pinned).values()) == {pinned.name}


def test_the_label_calls_choose_the_nodes_by_hostname_200_at_a_time(pinned) -> None:
    """kubectl reads each named node with its own GET under its client-side rate limit
    (4.5 s for 32 nodes on the kube tier); a hostname selector is one list (0.7 s)."""
    from mlenv.argv import UnsafeArgument
    from mlenv.cluster.nodepool import label_calls

    names = [f"gpu-{i:03d}" for i in range(450)]
    long = "n" * 70 + ".example.com"  # too long for a label value: named
    calls = label_calls(pinned, [*names, long])
    assert [(c.by_hostname, len(c.nodes)) for c in calls] == [
        (True, 200),
        (True, 200),
        (True, 50),
        (False, 1),
    ]
    assert calls[2].words() == [
        "label",
        f"--selector=kubernetes.io/hostname in ({','.join(names[400:])})",
        "--",
        "node",
        f"{KEY}={pinned.name}",
    ]
    assert calls[3].words() == ["label", "--", "node", long, f"{KEY}={pinned.name}"]
    assert label_calls(pinned, names[:1], remove=True)[0].words()[-1] == f"{KEY}-"
    for hostile in ("a,b", "a) ,x in (b", "--overwrite", "A B"):
        with pytest.raises(UnsafeArgument):
            label_calls(pinned, [hostile])
