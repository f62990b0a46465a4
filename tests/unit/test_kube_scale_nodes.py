"""The kube tier's scale nodes, as data: GPU nodes whose pods kwok alone runs."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from mlenv.testing.kube import manifests, plane, podroots
from mlenv.testing.kube.kubelet import Kubelet


def test_a_scale_node_is_a_gpu_node_with_a_pod_range_of_its_own() -> None:
    gpu = manifests.gpu_node("gpu-node-0")
    nodes = [manifests.scale_node(i) for i in (0, 1, 511, 16383)]
    cidrs = [ipaddress.IPv4Network(n["spec"]["podCIDR"]) for n in nodes]
    assert len(set(cidrs)) == len(cidrs)
    shared = ipaddress.IPv4Network("100.64.0.0/10")
    assert all(c.subnet_of(shared) and c.prefixlen == 24 for c in cidrs)
    for n in nodes:
        assert n["metadata"]["name"].startswith(manifests.SCALE_NODE_PREFIX)
        assert n["status"]["allocatable"] == gpu["status"]["allocatable"]
        labels = n["metadata"]["labels"]
        assert labels[manifests.SCALE_NODE_LABEL] == "true"
        same = {k: v for k, v in gpu["metadata"]["labels"].items() if k != "kubernetes.io/hostname"}
        assert labels.items() >= same.items()


def test_only_pods_on_scale_nodes_are_scale_pods() -> None:
    assert manifests.is_scale_pod({"spec": {"nodeName": "scale-node-7"}})
    assert not manifests.is_scale_pod({"spec": {"nodeName": "gpu-node-0"}})
    assert not manifests.is_scale_pod({"spec": {}})


def test_kwok_starts_scale_pods_without_a_root_and_execs_them_in_the_shared_one() -> None:
    root = Path("/tier/pods/_scale/shared")
    docs = list(
        yaml.safe_load_all(
            manifests.kwok_config([], [manifests.scale_exec(root, {"PYTHONPATH": "/repo"})])
        )
    )
    stages = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Stage"}
    scale = json.dumps(stages["pod-ready-scale"]["spec"]["selector"])
    assert f"startsWith('{manifests.SCALE_NODE_PREFIX}')" in scale
    # started once the pod-root controller wrote its own Exec; no address of the plane's
    assert manifests.ROOT_READY in scale and manifests.POD_IP not in scale
    assert "PodIPWith .spec.nodeName" in stages["pod-ready-scale"]["spec"]["next"]["statusTemplate"]
    # the ordinary pods still wait for their root
    assert manifests.ROOT_READY in json.dumps(stages["pod-ready"]["spec"]["selector"])
    (cluster_exec,) = [d for d in docs if d["kind"] == "ClusterExec"]
    env = {e["name"]: e["value"] for e in cluster_exec["spec"]["execs"][0]["local"]["envs"]}
    assert env["MLENV_KUBE_POD_ROOT"] == str(root)
    assert env["MLENV_KUBE_MOUNTS"] == f"/workspace={root / 'workspace'}"
    assert env["MLENV_KUBE_SHARED_ROOT"] == "1"  # an overlay per exec: they run at once
    assert env["PYTHONPATH"] == "/repo"


def test_each_scale_pod_gets_an_exec_of_its_own_with_its_own_workspace() -> None:
    root = Path("/tier/pods/_scale/shared")
    env = {"PYTHONPATH": "/repo", "MLENV_KUBE_POD_NAME": "x"}
    pod = {"metadata": {"namespace": "team", "name": "ml-dev-env-7", "uid": "u7"}}
    own = manifests.scale_pod_exec(root, env, pod)
    assert own["kind"] == "Exec" and own["metadata"]["name"] == "ml-dev-env-7"
    assert own["metadata"]["namespace"] == "team"
    assert own["metadata"]["ownerReferences"][0]["uid"] == "u7"  # goes with the pod
    env = {e["name"]: e["value"] for e in own["spec"]["execs"][0]["local"]["envs"]}
    assert env["MLENV_KUBE_MOUNTS"] == f"/workspace={root / 'workspaces' / 'team' / 'ml-dev-env-7'}"
    assert env["MLENV_KUBE_POD_NAME"] == "ml-dev-env-7"
    assert env["MLENV_KUBE_POD_ROOT"] == str(root) and env["MLENV_KUBE_SHARED_ROOT"] == "1"
    assert env["PYTHONPATH"] == "/repo"
    # kwok's fallback for every other scale pod keeps the shared folder
    shared = manifests.scale_exec(root, {"PYTHONPATH": "/repo"})
    assert "workspaces" not in json.dumps(shared)


def test_the_pod_root_controller_gives_scale_pods_no_root_and_writes_their_execs_in_one_call(
    tmp_path: Path,
) -> None:
    prepared: list[str] = []
    calls: list[tuple[str, ...]] = []

    class Recording(podroots.Controller):
        def __init__(self) -> None:  # no tier, no kubectl: only handle() is exercised
            self.terminating = set()
            self.pods: dict[tuple[str, str], dict[str, Any]] = {}
            self.dirty: set[str] = set()
            self.unannotated: dict[tuple[str, str], str] = {}
            self.scale_pending: dict[tuple[str, str], dict[str, Any]] = {}
            self.retry: set[tuple[str, str]] = set()
            self.sweep = False

        def kubectl(self, *args: str, stdin: str | None = None) -> Any:
            calls.append(args)
            return subprocess.CompletedProcess(args, 0, "", "")

        def write_hosts(self, ns: str) -> None:
            pass

        def folder_uid(self, ns: str, name: str) -> str | None:
            return None  # no pod folder yet

        def prepare(self, pod: dict[str, Any]) -> bool:
            prepared.append(pod["metadata"]["name"])
            return True

    ctl = Recording()
    ctl.tier = tmp_path
    # the kubelet only hears of the pods here (it runs no container of a scale pod)
    ctl.kubelet = Kubelet(tmp_path, ctl.kubectl, lambda line: None, lambda ns: 0.0, lambda ns: {})
    for name, node in (("lite", "scale-node-3"), ("lite2", "scale-node-4"), ("real", "gpu-node-0")):
        pod = {
            "metadata": {"namespace": "ns", "name": name, "uid": name},
            "spec": {"nodeName": node},
        }
        assert ctl.handle("ADDED", pod)
    assert prepared == ["real"]
    ctl.flush()
    # one apply of both Execs, one annotate of both pods
    assert [c[0] for c in calls] == ["apply", "annotate"]
    assert calls[1][3:6] == ("ns", "lite", "lite2")
    for name in ("lite", "lite2"):
        assert (tmp_path / "pods" / "_scale" / "shared" / "workspaces" / "ns" / name).is_dir()
    assert ctl.scale_pending == {}


def test_a_relist_leaves_the_scale_nodes_shared_root_and_forgets_a_pod_missed(
    tmp_path: Path,
) -> None:
    """After a list, a pod folder whose pod is gone is a deletion the watch missed; the
    scale nodes' shared root is no pod's folder, and releasing it left their execs with no
    network ("has no network ... refusing to run")."""
    forgotten: list[tuple[str, str]] = []

    class Sweeping(podroots.Controller):
        def __init__(self) -> None:  # a tier folder, and a server that lists no pod
            self.tier = tmp_path
            self.pods: dict[tuple[str, str], dict[str, Any]] = {}

        def kubectl(self, *args: str, stdin: str | None = None) -> Any:
            return subprocess.CompletedProcess(args, 0, '{"items": [], "metadata": {}}', "")

        def say(self, line: str) -> None:
            pass

        def forget(self, ns: str, name: str) -> None:
            forgotten.append((ns, name))

        def flush(self) -> None:
            pass

    for ns, name in ((*plane.SCALE_ROOT,), ("team", "gone")):
        (tmp_path / "pods" / ns / name).mkdir(parents=True)
    Sweeping().relist()
    assert forgotten == [("team", "gone")]


def test_a_slow_annotate_of_many_scale_pods_is_chunked_and_retried_not_fatal(
    tmp_path: Path, monkeypatch
) -> None:
    """At 512 pods one ``kubectl annotate`` of every new scale pod outlasted its minute on
    the loaded plane: the TimeoutExpired ended the controller's watch, and no pod created
    after it ever started (deploy waited for ever). Now at most SCALE_ANNOTATE_CHUNK pods
    per call, and a call past its minute is a failed call, its pods retried."""
    ctl = podroots.Controller.__new__(podroots.Controller)
    ctl.base = ["kubectl"]
    ctl.tier = tmp_path
    ctl.pods = {}
    ctl.retry = set()
    ctl.scale_pending = {}
    said: list[str] = []
    ctl.say = said.append  # type: ignore[method-assign,assignment]
    calls: list[list[str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if argv[1] == "annotate" and "ml-dev-env-000" in argv:
            raise subprocess.TimeoutExpired(argv, 60)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)  # the module podroots calls it through
    n = 2 * podroots.SCALE_ANNOTATE_CHUNK + 10
    for i in range(n):
        key = ("ns", f"ml-dev-env-{i:03d}")
        pod = {"metadata": {"namespace": "ns", "name": key[1], "uid": str(i)}}
        ctl.pods[key] = pod
        ctl.scale_pending[key] = pod
    ctl.flush_scale()
    annotates = [c for c in calls if c[1] == "annotate"]
    # kubectl annotate pod -n ns NAME… KEY=true --overwrite
    assert [len(c) - 7 for c in annotates] == [podroots.SCALE_ANNOTATE_CHUNK] * 2 + [10]
    # the first chunk's call timed out: its pods are retried, the others were annotated
    assert ctl.retry == {
        ("ns", f"ml-dev-env-{i:03d}") for i in range(podroots.SCALE_ANNOTATE_CHUNK)
    }
    assert any("not annotated" in line and "no answer within 60 s" in line for line in said)
