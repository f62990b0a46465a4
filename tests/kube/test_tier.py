"""The kube tier itself: what the plane is, proven against it.

Real parts only: the apiserver's version and TLS, RBAC for the non-admin identity,
discovery per flavour, kwok nodes as the GPU Operator leaves them, claims that bind, a
pod that cannot pull its image, and exec/logs/cp reaching a confined local process.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from _kubeenv import MISSING_IMAGE, Plane, until

from mlenv.testing.kube import build, manifests, pki

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py


def _pod(
    ns: str,
    name: str,
    image: str = "registry.access.redhat.com/ubi9/ubi-minimal:latest",
    claim: str | None = None,
    node: str | None = None,
    run_as: int | None = None,
) -> dict:
    spec: dict = {
        "containers": [
            {
                "name": "main",
                "image": image,
                "command": ["sleep", "infinity"],
                "env": [
                    {"name": "GREETING", "value": "hello from the pod spec"},
                    {"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "volumeMounts": [{"name": "ws", "mountPath": "/workspace"}],
            }
        ],
        "volumes": [
            {"name": "ws", "persistentVolumeClaim": {"claimName": claim}}
            if claim
            else {"name": "ws", "emptyDir": {}}
        ],
    }
    if node:
        spec["nodeName"] = node
    if run_as is not None:
        spec["securityContext"] = {"runAsUser": run_as}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def _claim(ns: str, name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


_wait = until


def _running(p: Plane, ns: str, name: str) -> bool:
    res = p.run("get", "pod", "-n", ns, name, "-o", "jsonpath={.status.phase}")
    return res.stdout.strip() == "Running"


@pytest.mark.parametrize("flavor", ["openshift", "plain"])
def test_the_server_is_the_pinned_release_over_tls_with_rbac(flavor: str, request) -> None:
    p: Plane = request.getfixturevalue(flavor)
    version = json.loads(p.ok("version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == build.K8S_VERSION
    assert version["clientVersion"]["gitVersion"] == build.K8S_VERSION
    server = p.ok("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
    assert server.startswith("https://127.0.0.1:")
    # the apiserver's authorizer is Node,RBAC: the user is who its certificate says, and
    # may do nothing in a namespace nobody gave it
    assert (
        p.ok("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", user=True)
        == pki.USER_NAME
    )
    ns = p.namespace("rbac", user_role=None)
    denied = p.run("get", "pods", "-n", ns, user=True)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()
    mine = p.namespace("rbac-mine", user_role="edit")
    assert p.run("auth", "can-i", "create", "pods", "-n", mine, user=True).stdout.strip() == "yes"
    assert p.run("auth", "can-i", "create", "pods", "-n", ns, user=True).stdout.strip() == "no"
    assert p.run("auth", "can-i", "create", "clusterrolebindings", user=True).stdout.strip() == "no"


# One plane per test (each xdist worker starts one flavour: conftest.py), so each flavour's
# discovery is its own test.
@pytest.mark.parametrize("flavor", ["openshift", "plain"])
def test_discovery_shows_the_openshift_kinds_only_in_the_openshift_flavour(
    flavor: str, request
) -> None:
    p: Plane = request.getfixturevalue(flavor)
    kinds = set(p.ok("api-resources", "-o", "name").split())
    assert "statefulsets.apps" in kinds  # discovery answered
    if flavor == "plain":
        assert not {k for k in kinds if "openshift.io" in k}
        return
    openshift = p
    ours = {
        "securitycontextconstraints.security.openshift.io",
        "routes.route.openshift.io",
        "buildconfigs.build.openshift.io",
        "imagestreams.image.openshift.io",
    }
    assert ours <= kinds
    # the SCC and Route schemas are openshift/api's (a bad field is refused), ours are marked
    bad = openshift.run(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "security.openshift.io/v1",
                "kind": "SecurityContextConstraints",
                "metadata": {"name": "x"},
                "allowPrivilegedContainer": "not-a-bool",
            }
        ),
    )
    assert bad.returncode != 0 and "allowPrivilegedContainer" in bad.stderr
    crd = openshift.json("get", "crd", "imagestreams.image.openshift.io")
    assert manifests.OURS in crd["metadata"]["annotations"]


def test_nodes_look_like_gpu_operator_nodes_and_cpu_only_nodes(openshift: Plane) -> None:
    nodes = {n["metadata"]["name"]: n for n in openshift.json("get", "nodes")["items"]}
    gpu = [
        n for n in nodes.values() if n["metadata"]["labels"].get("nvidia.com/gpu.present") == "true"
    ]
    cpu = [n for n in nodes.values() if "nvidia.com/gpu" not in n["status"]["allocatable"]]
    assert gpu and cpu
    for n in gpu:
        alloc = n["status"]["allocatable"]
        assert int(alloc["nvidia.com/gpu"]) > 0 and "rdma/rdma_shared_device_a" in alloc
        assert manifests.SRIOV_POOL in alloc
        assert n["metadata"]["labels"]["nvidia.com/gpu.product"]
    for n in nodes.values():
        ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", n["metadata"]["name"]


def test_a_claim_binds_and_a_missing_image_is_errimagepull(openshift: Plane) -> None:
    ns = openshift.namespace("storage")
    openshift.apply(_claim(ns, "data"), user=True)
    _wait(
        "the claim bound",
        lambda: (
            openshift.run("get", "pvc", "-n", ns, "data", "-o", "jsonpath={.status.phase}").stdout
            == "Bound"
        ),
    )
    sc = openshift.ok("get", "pvc", "-n", ns, "data", "-o", "jsonpath={.spec.storageClassName}")
    assert sc == manifests.DEFAULT_STORAGE_CLASS  # the default class, set by admission
    openshift.apply(_pod(ns, "pulls-nothing", image=MISSING_IMAGE), user=True)

    def reason() -> str:
        return openshift.run(
            "get",
            "pod",
            "-n",
            ns,
            "pulls-nothing",
            "-o",
            "jsonpath={.status.containerStatuses[0].state.waiting.reason}",
        ).stdout

    assert _wait("ErrImagePull", reason, 30) in ("ErrImagePull", "ImagePullBackOff")
    assert _wait("ImagePullBackOff", lambda: reason() == "ImagePullBackOff", 30)
    assert (
        openshift.ok("get", "pod", "-n", ns, "pulls-nothing", "-o", "jsonpath={.status.phase}")
        == "Pending"
    )


def test_exec_runs_confined_to_the_pods_own_root(openshift: Plane) -> None:
    """Host safety: what a pod's process writes lands in the pod's folder under the tier,
    never on this machine; a command named by absolute path (which bypasses the per-pod
    wrapper) finds the host read-only."""
    ns = openshift.namespace("confine")
    # root, as the image's user: a namespace user's pod would run as the namespace's range
    # UID (restricted-v2), which may not write /root; root is what could reach the host
    openshift.apply(_claim(ns, "ws"), user=True)
    openshift.apply(_pod(ns, "p0", claim="ws", run_as=0))
    _wait("pod Running", lambda: _running(openshift, ns, "p0"))
    token = uuid.uuid4().hex
    host_ws, host_root = Path("/workspace") / token, Path("/root") / token
    res = openshift.run(
        "exec",
        "-n",
        ns,
        "p0",
        "--",
        "sh",
        "-c",
        f"echo ws > /workspace/{token} && echo home > /root/{token} && echo tmp > /tmp/{token}"
        ' && hostname && echo "$GREETING|$MY_POD|$HOME"',
        user=True,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:2] == ["p0", "hello from the pod spec|p0|/root"]
    assert not host_ws.exists() and not host_root.exists() and not (Path("/tmp") / token).exists()
    vol = openshift.volume_dir(ns, "ws")
    assert (vol / token).read_text() == "ws\n"  # /workspace is the claim's volume
    root = openshift.pod_dir(ns, "p0") / "upper"
    assert (root / "root" / token).read_text() == "home\n"
    assert (root / "tmp" / token).read_text() == "tmp\n"
    # the tier's own folder (keys, other pods) is hidden from the pod
    peek = openshift.run("exec", "-n", ns, "p0", "--", "ls", str(openshift.tier.folder / "pki"))
    assert peek.returncode != 0
    # by absolute path: kwok's own namespace, where the host is read-only
    bypass = openshift.run(
        "exec", "-n", ns, "p0", "--", "/bin/sh", "-c", f"echo x > /root/{token}.abs"
    )
    assert bypass.returncode != 0 and "Read-only file system" in bypass.stderr + bypass.stdout
    assert not Path(f"/root/{token}.abs").exists()


def test_logs_and_cp_reach_the_pod(openshift: Plane, tmp_path: Path) -> None:
    ns = openshift.namespace("logs")
    pod = _pod(ns, "p1", node="cpu-node-0")
    # the container's command runs (the tier's kubelet): what it prints is the pod's log
    pod["spec"]["containers"][0]["command"] = [
        "sh", "-c", 'echo "$GREETING in $MY_POD"; exec sleep infinity'
    ]  # fmt: skip
    openshift.apply(pod, user=True)
    _wait("pod Running", lambda: _running(openshift, ns, "p1"))
    log = _wait("the pod's log", lambda: openshift.ok("logs", "-n", ns, "p1", user=True))
    assert log == "hello from the pod spec in p1\n", log
    src = tmp_path / "payload.txt"
    src.write_text("copied in\n")
    openshift.ok("cp", str(src), f"{ns}/p1:/workspace/payload.txt", user=True)
    ws = openshift.pod_dir(ns, "p1") / "volumes" / "ws"
    assert (ws / "payload.txt").read_text() == "copied in\n"
    back = tmp_path / "back.txt"
    openshift.ok("cp", f"{ns}/p1:/workspace/payload.txt", str(back), user=True)
    assert back.read_text() == "copied in\n"


def test_a_pod_whose_node_does_not_answer_is_unreachable_not_a_failed_command(
    openshift: Plane,
) -> None:
    """On the real server: exec and logs reach a pod through its node's kubelet. A
    node that kwok does not serve (its kubelet port closed) makes the server answer with a
    refused dial; mlenv says exit 3 naming the pod and the node's dial, where it said
    "exec failed (exit 1)" (or, with check=False, handed exit 1 to the caller as the
    command's), and logs said a generic API error."""
    from mlenv.cluster.api import NodeUnreachable
    from mlenv.cluster.oc import OcCluster

    node = f"lost-{uuid.uuid4().hex[:6]}"
    ns = openshift.namespace("lost")
    openshift.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "spec": {"taints": [{"key": "mlenv-tests/lost", "effect": "NoSchedule"}]},
        }
    )
    try:
        now = "2026-11-27T12:00:00Z"
        openshift.ok(
            "patch",
            "node",
            node,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(
                {
                    "status": {
                        "daemonEndpoints": {
                            "kubeletEndpoint": {"Port": 1}
                        },  # nothing listens there
                        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "True",
                                "reason": "Test",
                                "message": "test",
                                "lastHeartbeatTime": now,
                                "lastTransitionTime": now,
                            }
                        ],
                    }
                }
            ),
        )
        openshift.apply(_pod(ns, "p0", node=node))
        openshift.ok(
            "patch",
            "pod",
            "-n",
            ns,
            "p0",
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(
                {
                    "status": {
                        "phase": "Running",
                        "containerStatuses": [
                            {
                                "name": "main",
                                "image": "x",
                                "imageID": "",
                                "ready": True,
                                "restartCount": 0,
                                "state": {"running": {"startedAt": now}},
                            }
                        ],
                    }
                }
            ),
        )
        client = OcCluster(openshift.kubectl, kubeconfig=str(openshift.kubeconfig()))
        for check in (True, False):
            with pytest.raises(
                NodeUnreachable,
                match=r"pod p0: .*could not reach the node.*dial tcp 127\.0\.0\.1:1",
            ):
                client.exec("p0", ns, ["true"], check=check, timeout=30)
        with pytest.raises(NodeUnreachable, match="pod p0"):
            client.logs("p0", ns)
    finally:
        openshift.run("delete", "node", node, "--wait=false")


@pytest.mark.parametrize(
    ("flavor", "user"),
    [("openshift", False), ("plain", True)],
    ids=["openshift-admin", "plain-user"],
)
def test_the_cluster_live_tier_passes_against_the_plane(flavor: str, user: bool, request) -> None:
    """§2: tests/cluster_live (written for a developer's own cluster; it skips without one)
    runs against the plane as part of make test: as the admin on the OpenShift flavour,
    and as the namespace-scoped user on the plain one. Nothing may skip."""
    import subprocess
    import sys

    p: Plane = request.getfixturevalue(flavor)
    ns = p.namespace("live")
    env = {
        **p.env(user),
        "MLENV_LIVE_NAMESPACE": ns,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-rs",
            "tests/cluster_live",
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    tail = res.stdout[-3000:] + res.stderr[-2000:]
    assert res.returncode == 0, tail
    assert " passed" in res.stdout and "skipped" not in res.stdout, tail


def test_the_plain_flavour_is_a_gpu_less_cluster(plain: Plane) -> None:
    """This needs a cluster without GPUs (kind, CRC): the plain flavour's nodes have no
    nvidia.com/gpu, so its main flow proves the `local` example deploys there."""
    nodes = plain.json("get", "nodes")["items"]
    assert nodes and all(
        "nvidia.com/gpu" not in (n["status"].get("allocatable") or {}) for n in nodes
    )


def test_a_dead_component_is_not_taken_for_a_live_one(tmp_path: Path) -> None:
    """A component that exited but is not reaped yet (a zombie) keeps its pid and start
    time: `status`, and so `up`, must not count it as running."""
    import subprocess

    from mlenv.testing.kube import plane, podnet

    tier = plane.Tier(tmp_path)
    (tmp_path / "pids").mkdir()
    child = subprocess.Popen(["sleep", "0.1"])
    try:
        tier.pid_file("etcd").write_text(f"{child.pid} {podnet.start_time(child.pid)}\n")
        assert plane._alive(tier, "etcd") == child.pid
        deadline = time.monotonic() + 10
        while not plane._zombie(child.pid):  # exited, not reaped
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert plane._alive(tier, "etcd") is None
    finally:
        child.wait()


def test_the_control_plane_restarts_keeping_etcd_and_pods_start_after_it(plain: Plane) -> None:
    """`restart` replaces the apiserver, controller-manager and scheduler; etcd keeps the
    state, and the pod-root controller (whose watch the restart cut) prepares a pod
    created after it within seconds."""
    from mlenv.testing.kube import plane

    ns = plain.namespace("restart", user_role=None)
    plain.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept", "namespace": ns}}
    )
    plane.restart(folder=plain.tier.folder)
    assert plain.json("get", "configmap", "-n", ns, "kept")["metadata"]["name"] == "kept"
    t0 = time.monotonic()
    plain.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "after", "namespace": ns},
            "spec": {
                "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "1d"]}]
            },
        }
    )
    while True:
        pod = plain.json("get", "pod", "-n", ns, "after")
        ready = [c for c in pod.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        if ready and ready[0]["status"] == "True":
            break
        assert time.monotonic() - t0 < 60, pod.get("status")
        time.sleep(0.5)


def test_the_pod_root_controller_catches_up_past_500_pods_and_missed_deletions(
    plain: Plane,
) -> None:
    """Stopped and started again (as after a crash), the controller catches up from one
    list: with more than 500 pods (kubectl's page) it still starts a pod created while it
    was away, and a pod deleted while it was away loses its folder, network holder and
    address. A pod's /etc/hosts is its namespace's one names file: a pod started later is
    known to the earlier ones without their files being rewritten."""
    from mlenv.testing.kube import plane, podnet

    crowd = plain.namespace("crowd", user_role=None)
    # Pending pods (no node matches), enough for the pod list to need two of kubectl's pages.
    unschedulable = {"nodeSelector": {"kube-tier.mlenv.dev/nowhere": "x"}}
    items = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"idle-{i}", "namespace": crowd},
            "spec": {**unschedulable, "containers": [{"name": "main", "image": "busybox"}]},
        }
        for i in range(510)
    ]
    plain.ok(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    ns = plain.namespace("catchup", user_role=None)
    plain.apply(_pod(ns, "early"), _pod(ns, "gone"))
    for name in ("early", "gone"):
        _wait(f"{name} Running", lambda name=name: _running(plain, ns, name))
    gone = plain.pod_dir(ns, "gone")
    rec = podnet.read_record(gone)
    assert rec is not None and podnet.holder_alive(rec)
    link = plain.pod_dir(ns, "early") / "upper" / "etc" / "hosts"
    assert link.is_symlink(), "a pod's /etc/hosts is a link to its namespace's names file"
    before = link.lstat()

    assert plane._stop(plain.tier, "podroots")
    try:
        plain.ok("delete", "pod", "-n", ns, "gone", "--grace-period=0", "--force")
        plain.apply(_pod(ns, "late"))
    finally:
        plane.start_podroots(plain.tier, build.paths().kube("kubectl"))

    _wait("late Running", lambda: _running(plain, ns, "late"), seconds=60)
    _wait("the deleted pod's folder gone", lambda: not gone.exists(), seconds=30)
    assert not podnet.holder_alive(rec), "the deleted pod's network holder still runs"
    hosts = plain.ok("exec", "-n", ns, "early", "--", "cat", "/etc/hosts")
    assert "\tlate\n" in hosts and "\tgone\n" not in hosts, hosts
    assert link.lstat().st_mtime_ns == before.st_mtime_ns, "the pod's own file was rewritten"
    plain.ok("delete", "namespace", crowd, ns, "--wait=false")


def test_a_scale_node_runs_kwok_only_pods_in_the_shared_root(openshift: Plane) -> None:
    """A scale node (what KUBE_SCALE_NODES adds at up) is a GPU node whose pods have no
    folder or network of their own: Running at an address of the node's podCIDR, their
    execs in the one shared root, each with a ``/workspace`` of its own (its per-pod
    claim: sync copies into every pod at once, and one shared folder had the copies
    overwrite each other under the check). Tainted here so no other test's pod is
    scheduled onto it while it exists."""
    node = manifests.scale_node(16383)
    name = node["metadata"]["name"]
    node["spec"]["taints"] = [{"key": manifests.SCALE_NODE_LABEL, "effect": "NoSchedule"}]
    openshift.apply(node)
    try:
        ns = openshift.namespace("scale")
        for pod_name in ("lite", "lite2"):
            pod = _pod(ns, pod_name, node=name)
            pod["spec"].pop("volumes", None)
            pod["spec"]["containers"][0].pop("volumeMounts", None)
            openshift.apply(pod, user=True)
        for pod_name in ("lite", "lite2"):
            _wait("scale pod Running", lambda n=pod_name: _running(openshift, ns, n))
        got = openshift.json("get", "pod", "-n", ns, "lite")
        assert got["status"]["podIP"].startswith("100.127.255.")  # the node's /24
        # started once its own Exec was written
        assert manifests.ROOT_READY in (got["metadata"].get("annotations") or {})
        token = uuid.uuid4().hex
        for pod_name in ("lite", "lite2"):
            res = openshift.run(
                "exec",
                "-n",
                ns,
                pod_name,
                "--",
                "sh",
                "-c",
                f"echo {pod_name} > /workspace/{token} && hostname",
            )
            assert res.returncode == 0, res.stderr
            assert res.stdout.strip() == pod_name
        shared = openshift.tier.folder / "pods" / "_scale" / "shared"
        for pod_name in ("lite", "lite2"):
            mine = shared / manifests.SCALE_WORKSPACES / ns / pod_name / token
            assert mine.read_text() == f"{pod_name}\n"
        assert not openshift.pod_dir(ns, "lite").exists()
    finally:
        openshift.run("delete", "node", name, "--wait=false")
