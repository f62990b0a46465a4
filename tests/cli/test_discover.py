"""``mlenv discover`` writes a starting config from a live cluster (the fake, with
the objects a real GPU cluster carries: GPU-operator labels, RDMA device-plugin resources,
Multus networks, a default RWO class and a CephFS RWX class)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fakeenv import run

from mlenv.config import check_file
from mlenv.testing.fakecluster import FakeCluster

NS = "team-llm"


def cluster_state(tmp_path: Path) -> Path:
    fake = FakeCluster.typical(
        NS,
        ["gpu-b", "gpu-a"],
        gpus=8,
        resources={"rdma/rdma_shared_device_a": 1000},
        networks=["roce-rail-1", "roce-rail-2"],
        storage_classes=("ocs-storagecluster-ceph-rbd",),
    )
    fake.add_storage_class(
        "ocs-storagecluster-cephfs", provisioner="openshift-storage.cephfs.csi.ceph.com"
    )
    fake.add_node("infra-0", gpus=0)  # not a GPU node
    fake.add_node("gpu-down", gpus=8, ready=False)
    for k, obj in fake.objects.items():
        if k.startswith("Node|") and obj["metadata"]["name"].startswith("gpu-"):
            obj["metadata"]["labels"].update(
                {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
            )
    state = tmp_path / "fake.json"
    fake.save(str(state))
    return state


def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "repo"
    (r / "clusters").mkdir(parents=True)
    monkeypatch.setattr("_fakeenv.ROOT", r)
    return r


def test_discover_writes_valid_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = cluster_state(tmp_path)
    r = root(tmp_path, monkeypatch)
    res = run(["discover", "newcluster", "--namespace", NS], state, monkeypatch)
    assert res.exit_code == 0, res.output
    path = r / "clusters" / "newcluster.yaml"
    cfg, diags = check_file(path)
    assert cfg is not None, diags
    assert list(cfg.gpu_nodes) == ["gpu-a", "gpu-b"]  # sorted; infra and NotReady left out
    assert cfg.gpus.per_node == 8
    assert cfg.gpus.type == "NVIDIA-H100-80GB-HBM3"
    assert cfg.rdma.enabled
    assert {x.name: x.count for x in cfg.rdma.resources} == {"rdma/rdma_shared_device_a": 1}
    assert list(cfg.rdma.networks) == [f"{NS}/roce-rail-1", f"{NS}/roce-rail-2"]
    assert cfg.storage.class_rwx == "ocs-storagecluster-cephfs"
    assert cfg.storage.class_rwo == "ocs-storagecluster-ceph-rbd"
    assert "gpu-down is not Ready" in path.read_text()
    assert run(["validate", str(path)], None, monkeypatch).exit_code == 0


def test_discover_refuses_overwrite_and_dry_run_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = cluster_state(tmp_path)
    r = root(tmp_path, monkeypatch)
    path = r / "clusters" / "newcluster.yaml"
    path.write_text("mine\n")
    res = run(["discover", "newcluster", "--namespace", NS], state, monkeypatch)
    assert res.exit_code == 2 and "--force" in res.output
    assert path.read_text() == "mine\n"
    res = run(["discover", "newcluster", "--namespace", NS, "--dry-run"], state, monkeypatch)
    assert res.exit_code == 0 and "rdma/rdma_shared_device_a" in res.output
    assert path.read_text() == "mine\n"
    res = run(["discover", "newcluster", "--namespace", NS, "--force"], state, monkeypatch)
    assert res.exit_code == 0, res.output
    assert check_file(path)[0] is not None


def test_discover_tcp_cluster_without_gpus_still_valid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCluster.typical(NS, [], storage_classes=("standard",))
    fake.add_node("cpu-0", gpus=0)
    state = tmp_path / "fake.json"
    fake.save(str(state))
    r = root(tmp_path, monkeypatch)
    res = run(["discover", "plain", "-n", NS], state, monkeypatch)
    assert res.exit_code == 0, res.output
    cfg, diags = check_file(r / "clusters" / "plain.yaml")
    assert cfg is not None, diags
    assert not cfg.rdma.enabled and list(cfg.gpu_nodes) == []
    assert run(["discover", "Bad;name", "-n", NS], state, monkeypatch).exit_code == 2


def test_discover_takes_the_global_namespace_before_the_verb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = cluster_state(tmp_path)
    root(tmp_path, monkeypatch)
    for args in (
        ["-n", NS, "discover", "newcluster", "--dry-run"],
        ["discover", "newcluster", "-n", NS, "--dry-run"],
    ):
        res = run(args, state, monkeypatch)
        assert res.exit_code == 0, res.output
        assert f"namespace: {NS}" in res.stdout.replace('"', "")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    res = run(["discover", "newcluster", "--dry-run"], state, monkeypatch)
    assert "namespace: ml-dev-env" in res.stdout.replace('"', "")


def test_discover_defaults_to_the_current_contexts_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's discover_cluster.py took the namespace you work in (`oc project -q`);
    ours took a fixed `ml-dev-env`. The kubeconfig's current context (or --context's)
    namespace is the default now; KUBECONFIG's files merge as kubectl merges them."""
    state = cluster_state(tmp_path)
    root(tmp_path, monkeypatch)
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("current-context: work\n")
    second.write_text(
        "contexts:\n"
        "- name: work\n  context: {cluster: c, user: u, namespace: team-llm}\n"
        "- name: other\n  context: {cluster: c, user: u, namespace: team-b}\n"
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    res = run(["discover", "newcluster", "--dry-run"], state, monkeypatch)
    assert res.exit_code == 0, res.output
    assert f"namespace: {NS}" in res.stdout.replace('"', "")
    from mlenv.cluster.kubeconfig import current_namespace

    assert current_namespace(None, "other") == "team-b"
    assert current_namespace(str(second), None) is None  # no current context in that file
    assert current_namespace(str(tmp_path / "missing"), None) is None


def test_wizard_asks_and_writes_a_config_that_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's `make wizard`: discovery plus questions, answered here on stdin (name,
    namespace, pods, RDMA, VS Code, Jupyter)."""
    state = cluster_state(tmp_path)
    r = root(tmp_path, monkeypatch)
    res = run(["wizard"], state, monkeypatch, input=f"mine\n{NS}\n1\nn\ny\n\n")
    assert res.exit_code == 0, res.output
    assert "found on" in res.output and "2 GPU node(s)" in res.output
    assert "next: make deploy-cluster CLUSTER=mine (mode tcp)" in res.output
    cfg, diags = check_file(r / "clusters" / "mine.yaml")
    assert cfg is not None, diags
    assert cfg.namespace == NS and cfg.gpus.default_nodes == 1 and not cfg.rdma.enabled
    assert cfg.dev_tools.vscode and not cfg.dev_tools.jupyter
    # defaults (empty answers): 2 pods, RDMA on, no dev tools; an existing file is asked about
    res = run(["wizard", "mine", "-n", NS], state, monkeypatch, input="\n\n\n\nn\n")
    assert res.exit_code == 2 and "exists and was kept" in res.output
    assert check_file(r / "clusters" / "mine.yaml")[0].gpus.default_nodes == 1  # type: ignore[union-attr]
    res = run(["wizard", "mine", "-n", NS], state, monkeypatch, input="\n\n\n\ny\n")
    assert res.exit_code == 0, res.output
    cfg = check_file(r / "clusters" / "mine.yaml")[0]
    assert cfg is not None and cfg.gpus.default_nodes == 2 and cfg.rdma.enabled
    assert not cfg.dev_tools.vscode


def test_wizard_refuses_bad_answers_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = cluster_state(tmp_path)
    r = root(tmp_path, monkeypatch)
    res = run(["wizard"], state, monkeypatch, input="Bad Name\n")
    assert res.exit_code == 2 and "must be a DNS-1123 label" in res.output
    res = run(["wizard", "mine", "-n", NS], state, monkeypatch, input="7\n")
    assert res.exit_code == 2 and "pods: 7 is not between 1 and 2" in res.output
    assert not (r / "clusters" / "mine.yaml").exists()


def test_discover_dry_run_output_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = cluster_state(tmp_path)
    root(tmp_path, monkeypatch)
    res = run(["discover", "newcluster", "--namespace", NS, "--dry-run"], state, monkeypatch)
    assert res.exit_code == 0
    out = tmp_path / "printed.yaml"
    out.write_text(res.stdout)
    assert check_file(out)[0] is not None


def test_discover_dry_run_prints_json_with_o(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """discover --dry-run printed data (the config) with no -o json|yaml."""
    import json

    state = cluster_state(tmp_path)
    root(tmp_path, monkeypatch)
    res = run(["discover", "newcluster", "-n", NS, "--dry-run", "-o", "json"], state, monkeypatch)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["cluster"]["name"] == "newcluster" and doc["cluster"]["namespace"] == NS
    res = run(["discover", "newcluster", "-n", NS, "-o", "json"], state, monkeypatch)
    assert res.exit_code == 2 and "goes with --dry-run" in res.stderr
