"""The cluster verbs against the real control plane: what a user runs, as a
process, with the plane's kubeconfig and the tier's kubectl on PATH (no `oc`).

deploy → pods Running → status → logs → sync (files verified in the pods' volumes under
the tier's folder) → exec → teardown → deploy again, on both flavours, as admin and as the
namespace-scoped user; and the failures the fake could not show.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from _kubeenv import MISSING_IMAGE, ROOT, Plane, checkout, mlenv

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py
OPENSHIFT_KINDS = ("imagestream", "buildconfig", "route", "securitycontextconstraints")


def _ok(res, what: str) -> str:
    assert res.returncode == 0, (
        f"{what}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    )
    return res.stdout


def _config(root: Path, name: str, **changes) -> None:
    f = root / "clusters" / f"{name}.yaml"
    data = yaml.safe_load(f.read_text())
    for dotted, value in changes.items():
        node = data
        *path, last = dotted.split("__")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    f.write_text(yaml.safe_dump(data, sort_keys=False))


# An image the tier "pulls" (its pods run this machine's files, not an image's). On the OpenShift flavour a config
# without image.ref runs the BuildConfig's output, which no build ever pushes here: the
# tests that are not about the build name an image instead (the main flow builds).
PULLABLE = "registry.access.redhat.com/ubi9/ubi-minimal:latest"


def _setup(
    p: Plane,
    tmp_path: Path,
    prefix: str,
    *,
    user: bool,
    base: str = "local",
    image_ref: str | None = PULLABLE,
) -> tuple[Path, str, str]:
    ns = p.namespace(prefix, user_role="admin" if user else None)
    name = f"{prefix}-{ns.rsplit('-', 1)[1]}"
    root = checkout(tmp_path, name, base, ns, "tcp", p.flavor)
    if image_ref and p.flavor == "openshift":
        _config(root, name, image__ref=image_ref)
    return root, name, ns


def _push_build(p: Plane, ns: str) -> None:
    """What the registry reports when the BuildConfig's build has pushed ml-dev-env:latest
    (the tier has no build controller): the tag in the ImageStream's status."""
    p.ok(
        "patch",
        "imagestream",
        "-n",
        ns,
        "ml-dev-env",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {
                "status": {
                    "dockerImageRepository": f"image-registry.openshift-image-registry.svc:5000/{ns}/ml-dev-env",
                    "tags": [
                        {
                            "tag": "latest",
                            "items": [
                                {
                                    "created": "2026-11-27T12:00:00Z",
                                    "generation": 1,
                                    "dockerImageReference": f"image-registry.openshift-image-registry.svc:5000/{ns}/"
                                    "ml-dev-env@sha256:" + "0" * 64,
                                    "image": "sha256:" + "0" * 64,
                                }
                            ],
                        }
                    ],
                }
            }
        ),
    )


def _sts_uid(p: Plane, ns: str) -> str:
    return p.ok("get", "statefulset", "-n", ns, "ml-dev-env", "-o", "jsonpath={.metadata.uid}")


@pytest.mark.parametrize(
    ("flavor", "user"),
    [("openshift", False), ("plain", True)],
    ids=["openshift-admin", "plain-user"],
)
def test_deploy_status_logs_sync_exec_teardown_deploy(
    flavor: str, user: bool, tmp_path: Path, request
) -> None:
    p: Plane = request.getfixturevalue(flavor)
    root, name, ns = _setup(p, tmp_path, f"flow-{flavor[:5]}", user=user, image_ref=None)
    if flavor == "openshift":
        # item 8: the first deploy starts no pod on an image the ImageStream does not have
        first = mlenv(root, p, "deploy", name, "--mode", "tcp", user=user)
        assert first.returncode == 3, first.stdout[-2000:] + first.stderr[-2000:]
        assert (
            "statefulset/ml-dev-env, pod/ml-dev-env-dev not started: ImageStream ml-dev-env has no image "
            "tagged latest yet"
            in first.stderr
            and "make build-image" in first.stderr
        ), first.stderr
        assert p.run("get", "statefulset", "-n", ns, "ml-dev-env").returncode != 0
        assert p.ok("get", "pods", "-n", ns, "-o", "name").strip() == ""
        _push_build(p, ns)
    out = _ok(mlenv(root, p, "deploy", name, "--mode", "tcp", user=user), "deploy")
    assert f"deployed {name}: 2/2 pods Ready" in out
    sent = p.ok("get", "all,secret,serviceaccount,networkpolicy,pvc", "-n", ns, "-o", "name")
    if flavor == "plain":
        # no OpenShift kind is sent (the server has none), and the output says what is off
        assert not any(k in out.lower() for k in ("imagestream/", "buildconfig/", "route/"))
    else:
        assert (
            "imagestream/ml-dev-env created" in first.stdout
            and "buildconfig/ml-dev-env created" in first.stdout
        )
    assert "statefulset.apps/ml-dev-env" in sent

    status = _ok(mlenv(root, p, "status", name, user=user), "status")
    for pod in ("ml-dev-env-0", "ml-dev-env-1"):
        assert pod in status
    assert "Running" in status
    # pod 0's log is its container's output: pod init, then sshd in the foreground
    logs = _ok(mlenv(root, p, "logs", name, user=user), "logs")
    assert "mlenv.pod: node rank 0 of 2" in logs and "mlenv.pod: exec sshd on port" in logs, logs

    _ok(mlenv(root, p, "sync", name, user=user), "sync")
    for i in (0, 1):  # the files are in each pod's own workspace volume, as the pod sees it
        ws = p.volume_dir(ns, f"workspace-ml-dev-env-{i}")
        assert (ws / "train_probe.py").read_text() == (
            root / "workspace" / "train_probe.py"
        ).read_text()
        assert (ws / "data" / "notes.txt").read_text() == f"{name} tcp\n"
    # again, one file added: only it crosses the stream (kubectl plans inside each pod's
    # exec), the files the pods hold are not rewritten, and every file is proven
    held = p.volume_dir(ns, "workspace-ml-dev-env-1") / "train_probe.py"
    before = held.stat().st_ctime_ns
    (root / "workspace" / "data" / "more.txt").write_text("more\n")
    again = _ok(mlenv(root, p, "sync", name, user=user), "sync again")
    assert again.count("1 added, 0 updated") == 2 and "verified 2 pod(s)" in again, again
    assert held.stat().st_ctime_ns == before
    assert (p.volume_dir(ns, "workspace-ml-dev-env-1") / "data" / "more.txt").exists()
    shown = _ok(
        mlenv(
            root,
            p,
            "shell",
            name,
            "--pod",
            "1",
            "--",
            "cat",
            "/workspace/data/notes.txt",
            user=user,
        ),
        "shell -- cat",
    )
    assert f"{name} tcp" in shown
    # the pod's rank is in its environment (the workload's rank label, by the downward
    # API): read with a hostname that holds no rank, it is still pod 1's
    probe = (
        "import os; from mlenv.pod.env import node_rank; "
        "print('rank', os.environ['MLENV_POD_INDEX'], node_rank(os.environ, hostname='no-rank'))"
    )
    ranked = _ok(
        mlenv(root, p, "shell", name, "--pod", "1", "--", "python3", "-c", probe, user=user),
        "shell -- python3 (rank)",
    )
    assert "rank 1 1" in ranked, ranked

    _ok(mlenv(root, p, "teardown", name, user=user), "teardown")
    # gone, or Terminating while its pods have their grace period (foreground delete)
    left = p.run("get", "statefulset", "-n", ns, "ml-dev-env", "-o", "json")
    assert left.returncode != 0 or "deletionTimestamp" in json.loads(left.stdout)["metadata"]
    # and straight back up: deploy waits for what is still Terminating, then applies
    out = _ok(mlenv(root, p, "deploy", name, "--mode", "tcp", user=user), "deploy after teardown")
    assert f"deployed {name}: 2/2 pods Ready" in out
    # the claims were kept by teardown: the synced files are still there
    assert (p.volume_dir(ns, "workspace-ml-dev-env-0") / "train_probe.py").exists()
    _ok(mlenv(root, p, "teardown", name, "--purge", "--yes", user=user), "teardown --purge")
    deadline = time.monotonic() + 60
    while p.ok("get", "pvc", "-n", ns, "-o", "name").strip() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not p.ok("get", "pvc", "-n", ns, "-o", "name").strip()


def test_a_no_op_redeploy_recreates_nothing_even_for_1024Gi(
    openshift: Plane, tmp_path: Path
) -> None:
    """The server returns 1024Gi as 1Ti: the StatefulSet's claim templates must still compare
    equal, or every deploy would delete and recreate it (item 7)."""
    root, name, ns = _setup(openshift, tmp_path, "noop", user=False)
    _config(root, name, storage__workspace_size="1024Gi")
    _ok(mlenv(root, openshift, "deploy", name, "--mode", "tcp"), "deploy")
    tpl = openshift.json("get", "statefulset", "-n", ns, "ml-dev-env")["spec"][
        "volumeClaimTemplates"
    ]
    sizes = {t["metadata"]["name"]: t["spec"]["resources"]["requests"]["storage"] for t in tpl}
    assert sizes["workspace"] == "1Ti"  # what the real server does to the quantity
    uid = _sts_uid(openshift, ns)
    again = _ok(mlenv(root, openshift, "deploy", name, "--mode", "tcp"), "re-deploy")
    assert "unchanged" in again and "recreat" not in again.lower()
    assert _sts_uid(openshift, ns) == uid


def test_a_neighbour_pod_with_our_labels_is_not_ours(openshift: Plane, tmp_path: Path) -> None:
    """Selected by the StatefulSet's ownership and ordinals, not by labels (item 10)."""
    root, name, ns = _setup(openshift, tmp_path, "neigh", user=False)
    _ok(mlenv(root, openshift, "deploy", name, "--mode", "tcp"), "deploy")
    ours = openshift.json("get", "pod", "-n", ns, "ml-dev-env-0")
    # An orphan pod matching our selector is adopted by our StatefulSet and deleted (seen
    # here: the real controller does what the fake never did); a neighbour's pod that
    # another controller owns is not, and that is the one to be careful of.
    openshift.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "neighbour", "namespace": ns},
        }
    )
    owner_uid = openshift.ok(
        "get", "configmap", "-n", ns, "neighbour", "-o", "jsonpath={.metadata.uid}"
    )
    intruder = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "ml-dev-env-7",
            "namespace": ns,
            "labels": ours["metadata"]["labels"],
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "neighbour",
                    "uid": owner_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example/neighbour:1",
                    "volumeMounts": [{"name": "ws", "mountPath": "/workspace"}],
                }
            ],
            "volumes": [{"name": "ws", "emptyDir": {}}],
        },
    }
    openshift.apply(intruder)  # anyone who may create pods in the namespace
    deadline = time.monotonic() + 60
    while (
        openshift.ok("get", "pod", "-n", ns, "ml-dev-env-7", "-o", "jsonpath={.status.phase}")
        != "Running"
    ):
        assert time.monotonic() < deadline, "the neighbour pod never ran"
        time.sleep(0.5)
    status = _ok(mlenv(root, openshift, "status", name), "status")
    assert "ml-dev-env-7" not in status.split("warning")[0]
    _ok(mlenv(root, openshift, "sync", name), "sync")
    ws = openshift.pod_dir(ns, "ml-dev-env-7") / "volumes" / "ws"
    assert not (ws / "train_probe.py").exists()  # the workspace did not reach it
    _ok(mlenv(root, openshift, "teardown", name), "teardown")
    assert (
        openshift.run("get", "pod", "-n", ns, "ml-dev-env-7").returncode == 0
    )  # not ours to delete


# The three flows from here to the non-admin RDMA deploy do the same on either flavour:
# they run on the plain plane, so that make test's two kube workers (one per plane,
# tests/kube/conftest.py) carry about equal work (7 min 22 s for the tier with them on the
# OpenShift plane: its worker had about 430 s of tests, the other 285 s). Not the
# neighbour test above: the plain plane's two CPU nodes hold our two pods, whose required
# anti-affinity (symmetric) keeps a pod carrying our labels off both, so it never runs.
def test_an_image_that_cannot_be_pulled_is_reported_in_seconds(
    plain: Plane, tmp_path: Path
) -> None:
    root, name, ns = _setup(plain, tmp_path, "pull", user=False)
    _config(root, name, image__ref=MISSING_IMAGE)
    t0 = time.monotonic()
    res = mlenv(root, plain, "deploy", name, "--mode", "tcp", "--timeout", "600")
    took = time.monotonic() - t0
    said = res.stdout + res.stderr
    assert res.returncode != 0, said
    assert MISSING_IMAGE in said and ("ImagePullBackOff" in said or "ErrImagePull" in said), said
    assert took < 120, f"reported after {took:.0f} s, not before the 600 s timeout"
    assert (
        json.loads(plain.ok("get", "pod", "-n", ns, "ml-dev-env-0", "-o", "json"))["status"][
            "phase"
        ]
        == "Pending"
    )


def test_a_changed_spec_is_rolled_out_before_deploy_says_done(plain: Plane, tmp_path: Path) -> None:
    """item 5: the real controller replaces pods one by one; deploy returns when every pod
    runs the new revision (the old ones stayed Ready meanwhile)."""
    root, name, ns = _setup(plain, tmp_path, "roll", user=False)
    _ok(mlenv(root, plain, "deploy", name, "--mode", "tcp"), "deploy")
    uids = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in plain.json("get", "pods", "-n", ns, "-l", "apps.kubernetes.io/pod-index")["items"]
    }
    _config(root, name, nccl__debug="WARN")
    out = _ok(mlenv(root, plain, "deploy", name, "--mode", "tcp"), "deploy of a changed spec")
    assert f"deployed {name}: 2/2 pods Ready" in out
    sts = plain.json("get", "statefulset", "-n", ns, "ml-dev-env")
    rev = sts["status"]["updateRevision"]
    pods = plain.json("get", "pods", "-n", ns, "-l", "apps.kubernetes.io/pod-index")["items"]
    assert len(pods) == 2
    for p in pods:
        assert p["metadata"]["labels"]["controller-revision-hash"] == rev, p["metadata"]["name"]
        assert p["metadata"]["uid"] != uids[p["metadata"]["name"]]
    # an immutable change (the claim templates) takes the recreate path, and the new
    # StatefulSet's pods are awaited as well
    uid = _sts_uid(plain, ns)
    # (a claim template only: the dev Pod's own claim takes workspace_size too, and the real
    # server refuses to shrink a bound claim, or to grow one whose class cannot expand)
    _config(root, name, storage__datasets_size="7Gi")
    out = _ok(mlenv(root, plain, "deploy", name, "--mode", "tcp"), "deploy of an immutable change")
    assert "deleting and recreating it" in out and f"deployed {name}: 2/2 pods Ready" in out, out[
        -2000:
    ]
    assert _sts_uid(plain, ns) != uid
    sts = plain.json("get", "statefulset", "-n", ns, "ml-dev-env")
    sizes = {
        t["metadata"]["name"]: t["spec"]["resources"]["requests"]["storage"]
        for t in sts["spec"]["volumeClaimTemplates"]
    }
    assert sizes["datasets"] == "7Gi"
    pods = plain.json("get", "pods", "-n", ns, "-l", "apps.kubernetes.io/pod-index")["items"]
    assert len(pods) == 2 and all(
        p["metadata"]["labels"]["controller-revision-hash"] == sts["status"]["updateRevision"]
        for p in pods
    )


def test_an_unresponsive_api_server_ends_every_verb_within_the_timeout(
    plain: Plane, tmp_path: Path
) -> None:
    """item 11 on the real server: the apiserver stopped (SIGSTOP: connections are accepted
    by the kernel, nothing answers). Each verb exits 3 within MLENV_API_TIMEOUT_S + 5 s
    with one line naming the server, and the plane carries on once it is continued."""
    import os
    import signal

    root, name, ns = _setup(plain, tmp_path, "hung", user=False)
    server = plain.ok("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
    pid = int(plain.tier.pid_file("kube-apiserver").read_text().split()[0])
    timeout_s = 3
    # What the bound is about is the API calls, not this machine's Python start-up: under
    # make test's load one `mlenv` start alone took seconds (CI: 9.0 s against a bare 8 s
    # bound), so the start-up of a verb that calls nothing is measured now and added.
    t0 = time.monotonic()
    _ok(mlenv(root, plain, "validate", name), "validate")
    start_up = time.monotonic() - t0
    os.kill(pid, signal.SIGSTOP)
    try:
        for verb in (
            ["status", name],
            ["logs", name],
            ["deploy", name, "--mode", "tcp"],
            ["teardown", name],
        ):
            t0 = time.monotonic()
            res = mlenv(root, plain, *verb, "--request-timeout", str(timeout_s), timeout=120)
            took = time.monotonic() - t0
            assert res.returncode == 3, (verb, res.stdout, res.stderr)
            assert took < timeout_s + 5 + start_up, (
                f"{verb[0]}: {took:.1f} s (start-up {start_up:.1f} s)"
            )
            errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error")]
            assert len(errors) == 1 and server.removeprefix("https://") in errors[0], (
                verb,
                res.stderr,
            )
    finally:
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 60
    while plain.run("get", "--raw", "/readyz").returncode != 0:
        assert time.monotonic() < deadline, "the apiserver did not come back"
        time.sleep(0.5)


def test_a_non_admin_rdma_deploy_is_told_what_rbac_refuses_before_applying(
    openshift: Plane, tmp_path: Path
) -> None:
    """item 3 on the real RBAC: a namespace admin may create RoleBindings, but binding the
    SCC's `use` ClusterRole needs `bind` on it or holding `use` of the SCC. With the SCC and
    its role applied by a cluster admin, the user's RDMA deploy is stopped by preflight
    naming that (--no-fallback), or falls back to TCP saying so; nothing half-applied."""
    from _kubeenv import networks_for

    from mlenv.config import load
    from mlenv.render.plan import render_cluster

    root, name, ns = _setup(openshift, tmp_path, "rbac", user=True, base="barcelona")
    networks_for(openshift, root, name)
    cfg = load(name, root)
    # the cluster admin applies them as the hint says (`apply --server-side`: a client-side
    # apply drops the SCC's `priority: null`, which the CRD requires, and is refused)
    admin_objs = [
        m
        for m in render_cluster(cfg, "rdma")
        if m["kind"] in ("SecurityContextConstraints", "ClusterRole")
    ]
    openshift.ok(
        "apply",
        "--server-side",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": admin_objs}),
    )
    strict = mlenv(root, openshift, "deploy", name, "--mode", "rdma", "--no-fallback", user=True)
    said = strict.stdout + strict.stderr
    assert strict.returncode == 3, said
    assert "may not bind clusterrole" in said and "use securitycontextconstraints/" in said, said
    assert (
        openshift.run("get", "statefulset", "-n", ns, "ml-dev-env").returncode != 0
    )  # nothing applied
    loose = _ok(
        mlenv(root, openshift, "deploy", name, "--mode", "rdma", user=True), "deploy with fallback"
    )
    assert "may not bind clusterrole" in loose and "(tcp mode, fell back from rdma)" in loose, loose


# OpenShift's namespace ranges, as its cluster-policy-controller writes them: the tier's SCC
# admission gives a pod that names no UID the first (and, as restricted-v2, that fsGroup).
# The plane already gave the namespace a block of its own; the test sets a known one.
RANGE_UID = 1000680000
RANGES = (
    f"openshift.io/sa.scc.uid-range={RANGE_UID}/10000",
    f"openshift.io/sa.scc.supplemental-groups={RANGE_UID}/10000",
)


@pytest.mark.parametrize(
    "flavor,storage",
    [
        ("openshift", "volumeClaimTemplates"),
        ("openshift", "rwx"),
        ("plain", "volumeClaimTemplates"),
    ],
)
def test_launch_runs_deepspeed_over_ssh_across_the_pods_to_a_verdict_and_names_a_peer_it_cannot_reach(
    flavor: str, storage: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """§2's launch on the product's main path. Each pod has a network namespace and an
    address of its own (status.podIP, on the plane's bridge) and resolves the others' names
    to their addresses (the tier writes each pod's /etc/hosts, as cluster DNS would answer);
    pod init starts each pod's sshd on the same port. `mlenv launch NAME` runs pod 0's
    launcher through exec: its peer preflight, then DeepSpeed's runner, which starts the
    other pod's rank over pdsh/ssh; one CPU rank per pod ends in a verdict written to pod 0's
    volume. Then pod 1's sshd is stopped: the preflight names that peer (and only it) and
    exits 3, and so does `mlenv launch` (found here: kwok sent every failed exec as an
    internal error, so kubectl exited 1, an acceptance FAIL). The ssh-less path
    (`--torchrun`) runs across the pods in test_launch_reads_the_racks_from_a_node_label.

    The random-UID path: the namespace carries OpenShift's ranges, so every process of the
    pods (pod init, sshd and the ranks it starts, sync's tar, shell) runs as the range's
    first UID with GID 0, the fsGroup and no capability, with per-pod claims and with RWX
    ones; the quick profile PASSes over DeepSpeed/ssh and over torchrun. On the plain
    flavour the quick profile over DeepSpeed/ssh PASSes too (its torchrun launch is the rack
    test's), as the same non-root UID: no SCC there, the tier gives a pod without runAsUser
    the namespace's range, standing in for the image's non-root user (the tier's "image"
    user is root, which the pods' runAsNonRoot would refuse on a real node, and as root
    pdsh's ssh exits 255)."""
    import os
    import signal

    p: Plane = request.getfixturevalue(flavor)
    uid = RANGE_UID
    root, name, ns = _setup(p, tmp_path, "launch", user=False)
    p.ok("annotate", "--overwrite", "namespace", ns, *RANGES)
    if storage == "rwx":
        _config(root, name, storage__mode="rwx", storage__workspace_size="1Gi")
    _ok(mlenv(root, p, "deploy", name, "--mode", "tcp"), "deploy")
    _ok(mlenv(root, p, "sync", name), "sync as the range's UID")
    for i in (0, 1):
        who = _ok(
            mlenv(
                root,
                p,
                "shell",
                name,
                "--pod",
                str(i),
                "--",
                "sh",
                "-c",
                "id -u; id -G; cat /workspace/data/notes.txt",
            ),
            f"shell in pod {i}",
        )
        assert who.split("\n")[:2] == [str(uid), f"0 {uid}"], who
        assert f"{name} tcp" in who, who
    pods = ("ml-dev-env-0", "ml-dev-env-1")
    ips = {
        pod: p.ok("get", "pod", "-n", ns, pod, "-o", "jsonpath={.status.podIP}").strip()
        for pod in pods
    }
    assert len(set(ips.values())) == 2 and not any(ip.startswith("127.") for ip in ips.values()), (
        ips
    )
    # the headless Service's endpoints are those addresses (the real controller's; it refuses
    # loopback ones, which is why the pods could not all be 127.0.0.1)
    listed: list[str] = []
    deadline = time.monotonic() + 30
    while not set(ips.values()) <= set(listed):
        assert time.monotonic() < deadline, f"endpoints {listed}, pods {ips}"
        time.sleep(0.5)
        listed = p.ok(
            "get",
            "endpointslices",
            "-n",
            ns,
            "-l",
            "kubernetes.io/service-name=ml-dev-env-headless",
            "-o",
            "jsonpath={.items[*].endpoints[*].addresses[*]}",
        ).split()
    for i, pod in enumerate(pods):
        # the container command (scripts/pod-init.sh, as the tier's kubelet runs it) did the
        # pod's init and is sshd now; what it said is the pod's log. The range's UID has no
        # passwd entry and the pod's /etc/passwd is not writable: sshd admits it through
        # nss_wrapper
        said = p.ok("logs", "-n", ns, pod)
        assert f"admits mlenv-{uid}" in said and "served by nss_wrapper" in said, said
        assert (
            p.ok(
                "get",
                "pod",
                "-n",
                ns,
                pod,
                "-o",
                "jsonpath={.status.containerStatuses[0].restartCount}",
            ).strip()
            == "0"
        ), f"pod {i} restarted:\n{said}"
    # the pod's eth0 holds its status.podIP, and pod 0 resolves pod 1's name to pod 1's
    seen = _ok(
        p.run(
            "exec",
            "-n",
            ns,
            pods[0],
            "--",
            "sh",
            "-c",
            f"ip -4 -o addr show dev eth0; getent hosts {pods[1]}.ml-dev-env-headless.{ns}.svc",
        ),
        "addresses in pod 0",
    )
    assert f"inet {ips[pods[0]]}/" in seen and seen.split("\n")[1].split()[0] == ips[pods[1]], seen

    # the quick profile, training included (its ranks' processes, started over ssh by sshd,
    # see the files the execs wrote: one root per pod), at the harness's small sizes and
    # with its peer-outlier bars for ranks sharing two cores (tests/integration/harness;
    # the checkout is in the pods' image, read-only)
    harness = ROOT / "tests" / "integration" / "harness"
    suite = ["--options", str(harness / "acceptance_small.json")]
    suite += ["--baseline", str(harness / "baseline_harness.yaml")]
    started = time.monotonic()
    res = mlenv(root, p, "launch", name, "--", "--profile", "quick", *suite, timeout=600)
    took = time.monotonic() - started
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "verdict: PASS" in out, out[-4000:]
    assert "preflight: all 2 peer(s) answer on port 2222" in out, out[-4000:]
    workspace = "workspace-ml-dev-env-0" if storage != "rwx" else "ml-dev-env-workspace"
    results = sorted((p.volume_dir(ns, workspace) / "results").glob("*/results.json"))
    assert len(results) == 1, results
    assert results[0].stat().st_uid == uid, results[0].stat()
    doc = json.loads(results[0].read_text())
    assert doc["verdict"] == "PASS", doc["reasons"]
    assert doc["world"]["ranks"] == 2 and doc["world"]["hosts"] == list(pods), doc["world"]
    assert doc.get("profile", "quick") == "quick", doc.get("profile")
    assert sorted(c["rank"] for c in doc["checks"] if c["name"] == "environment") == [0, 1]
    print(
        f"\n[measured] kube tier ({flavor}, {storage}, UID {uid}): mlenv launch (DeepSpeed over ssh, "
        f"2 pods, quick profile): {took:.1f} s; pod addresses {ips}"
    )
    if flavor == "plain":
        return  # torchrun on the plain plane: the rack test
    # the ssh-less path of the same profile, as the same UID
    started = time.monotonic()
    res = mlenv(
        root,
        p,
        "launch",
        name,
        "--torchrun",
        "--",
        "--profile",
        "quick",
        *suite,
        timeout=600,
    )
    took = time.monotonic() - started
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "verdict: PASS" in out, out[-4000:]
    print(
        f"\n[measured] kube tier ({storage}): mlenv launch --torchrun, quick profile: {took:.1f} s"
    )
    if storage == "rwx":
        return  # the missing peer below is the same on either storage

    # pod 1's sshd freezes; pod 0's stays. sshd is pod 1's container process (pod init
    # exec'd it): a stopped one would be restarted by the kubelet, a frozen one is not (its
    # kernel still completes TCP connects from the listen backlog, so the liveness probe
    # passes), which is the case the preflight's banner read exists for.
    record = json.loads((p.pod_dir(ns, pods[1]) / "containers" / "worker.json").read_text())
    pid = int(record["pid"])
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "sshd"
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = 6.0
        started = time.monotonic()
        res = mlenv(root, p, "launch", name, "--peer-deadline", f"{deadline:g}", timeout=300)
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    out = res.stdout + res.stderr
    assert res.returncode == 3, out[-3000:]
    assert (
        f"{pods[1]}.ml-dev-env-headless.{ns}.svc: port 2222 accepts connections but the server "
        "does not answer" in out
    ), out[-3000:]
    assert f"{pods[0]}.ml-dev-env-headless.{ns}.svc: port" not in out, out[-3000:]
    assert f"1 of 2 peer(s) missing after {deadline:g} s" in out, out[-3000:]
    # the deadline, plus two Python start-ups and an exec on a loaded 2-core machine
    assert took < deadline + 45, took
    # nothing was restarted meanwhile: the frozen sshd is the same process
    assert (
        p.ok(
            "get",
            "pod",
            "-n",
            ns,
            pods[1],
            "-o",
            "jsonpath={.status.containerStatuses[0].restartCount}",
        ).strip()
        == "0"
    )


# -- racks from a Node label. The kwok nodes the two pods run on carry a rack
# label each; `mlenv launch --torchrun` reads those Nodes and fabric.localize's racks are
# the label's values (as rack names). The refused `get nodes` is the fake's
# (tests/cli/test_launch.py): the tier's developer may read Nodes, as OpenShift's
# cluster-reader may. On the plain plane (its two CPU nodes take one pod each), to balance
# make test's two kube workers, now that the OpenShift one runs DeepSpeed over ssh.

RACK_LABEL = "example.com/rack"


def test_launch_reads_the_racks_from_a_node_label(plain: Plane, tmp_path: Path) -> None:
    root, name, ns = _setup(plain, tmp_path, "topo", user=False)
    _config(root, name, nodes__topology_label=RACK_LABEL)
    # Pod Security's warn level at restricted: the TCP pods meet it (no warning to say)
    plain.ok("label", "namespace", ns, "pod-security.kubernetes.io/warn=restricted")
    res = mlenv(root, plain, "deploy", name, "--mode", "tcp")
    _ok(res, "deploy")
    assert "server warning" not in res.stdout + res.stderr, res.stdout + res.stderr
    on = {
        p: plain.ok("get", "pod", "-n", ns, p, "-o", "jsonpath={.spec.nodeName}").strip()
        for p in ("ml-dev-env-0", "ml-dev-env-1")
    }
    assert len(set(on.values())) == 2, on  # one pod per node (the StatefulSet's anti-affinity)
    values = {
        on["ml-dev-env-0"]: "Rack_A",
        on["ml-dev-env-1"]: "rack-b",
    }  # the first is no DNS label
    for n, v in values.items():
        plain.ok("label", "node", n, f"{RACK_LABEL}={v}", "--overwrite")
    try:
        res = mlenv(
            root,
            plain,
            "launch",
            name,
            "--torchrun",
            "--",
            "--checks",
            "fabric.localize",
            "--localize",
            timeout=600,
        )
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-4000:]
        assert f"topology: 2 of 2 node(s) in 2 rack(s) from the Node label {RACK_LABEL}" in out, (
            out[-3000:]
        )
        assert "label value 'Rack_A' used as rack rack-a" in res.stderr
        results = list(
            (plain.volume_dir(ns, "workspace-ml-dev-env-0") / "results").glob("*/results.json")
        )
        assert len(results) == 1, results
        doc = json.loads(results[0].read_text())
        (entry,) = [c for c in doc["checks"] if c["name"] == "fabric.localize"]
        assert entry["details"].get("racks") == {
            "ml-dev-env-0": "rack-a",
            "ml-dev-env-1": "rack-b",
        }, entry
        print(
            f"\n[measured] kube tier: pods on {on}; localize {entry['status']}, racks {entry['details']['racks']}"
        )
    finally:
        for n in values:
            plain.run("label", "node", n, f"{RACK_LABEL}-")
