"""deploy against the fake with the real renderer and the example configs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from mlenv.cluster import treehash
from mlenv.cluster.deploy import (
    DeployOptions,
    DeployTimeout,
    ImageUnavailable,
    PreflightFailed,
    deploy,
)
from mlenv.cluster.keys import KEY_FILES, SECRET_NAME
from mlenv.cluster.sync import SyncMismatch, sync
from mlenv.cluster.teardown import teardown


def test_rdma_deploy_then_redeploy_is_unchanged(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    rep = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    assert rep.mode == "rdma" and rep.ready == rep.nodes == barcelona.gpus.default_nodes
    secret = fake.get("Secret", SECRET_NAME, barcelona.namespace)
    assert sorted(secret["data"]) == sorted(KEY_FILES)
    again = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    assert again.unchanged and again.ssh_secret == "kept"
    assert fake.get("Secret", SECRET_NAME, barcelona.namespace)["data"] == secret["data"]


def test_missing_rdma_prerequisites_fall_back_to_tcp_or_fail(barcelona, fake_for) -> None:
    fake = fake_for(barcelona, rdma=False)  # no RDMA resources, no Multus networks
    said: list[str] = []
    rep = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert rep.mode == "tcp" and rep.fallback_reasons
    assert any("FALLING BACK TO TCP" in s for s in said)
    assert any("NetworkAttachmentDefinition" in r for r in rep.fallback_reasons)
    sts = fake.get("StatefulSet", "ml-dev-env", barcelona.namespace)
    env = {
        e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["NCCL_IB_DISABLE"] == "1"
    strict = fake_for(barcelona, rdma=False)
    with pytest.raises(PreflightFailed, match="fallback is off") as e:
        deploy(barcelona, DeployOptions(mode="rdma", no_fallback=True), strict)
    assert e.value.exit_code == 3
    assert strict.list("StatefulSet", barcelona.namespace) == []  # nothing half-applied


def test_preflight_explains_everything_before_applying(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    fake.server_url = "https://api.elsewhere.example:6443"
    with pytest.raises(PreflightFailed, match="cluster.api") as e:
        deploy(barcelona, DeployOptions(mode="tcp"), fake)
    assert e.value.exit_code == 2
    fake = fake_for(barcelona)
    node = fake.objects[f"Node||{barcelona.gpu_nodes[0]}"]
    node["status"]["conditions"][0]["status"] = "False"
    node2 = fake.objects[f"Node||{barcelona.gpu_nodes[1]}"]
    node2["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    with pytest.raises(PreflightFailed) as e:
        deploy(barcelona, DeployOptions(mode="tcp"), fake)
    msg = str(e.value)
    assert "is not Ready" in msg and "allocatable nvidia.com/gpu" in msg
    assert fake.list("ServiceAccount", barcelona.namespace) == []


def test_immutable_change_recreates_statefulset_and_keeps_pvcs(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    pvcs = {p["metadata"]["name"] for p in fake.list("PersistentVolumeClaim", barcelona.namespace)}
    uid = fake.get("StatefulSet", "ml-dev-env", barcelona.namespace)["metadata"]["uid"]
    bigger = dataclasses.replace(
        barcelona, storage=dataclasses.replace(barcelona.storage, workspace_size="400Gi")
    )
    said: list[str] = []
    rep = deploy(bigger, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert rep.recreated == ["statefulset/ml-dev-env"]
    assert any("immutable field(s) changed (volumeClaimTemplates)" in s for s in said)
    assert fake.get("StatefulSet", "ml-dev-env", barcelona.namespace)["metadata"]["uid"] != uid
    assert pvcs <= {
        p["metadata"]["name"] for p in fake.list("PersistentVolumeClaim", barcelona.namespace)
    }


def test_an_image_that_cannot_be_pulled_stops_the_wait_in_seconds(barcelona, fake_for) -> None:
    """ImagePullBackOff does not heal by waiting: said with the image and what to do
    within seconds, not at the 600 s timeout (on the code before: a DeployTimeout at 600 s)."""
    fake = fake_for(barcelona)
    image = (
        barcelona.image.ref
        or f"image-registry.openshift-image-registry.svc:5000/{barcelona.namespace}/ml-dev-env:latest"
    )
    fake.image_pull_failures = [image]
    started = fake.monotonic()
    with pytest.raises(ImageUnavailable) as e:
        deploy(barcelona, DeployOptions(mode="rdma", timeout=600), fake)
    assert fake.monotonic() - started < 30
    msg = str(e.value)
    assert image in msg and "ImagePullBackOff" in msg and "ml-dev-env-0" in msg
    assert ("make build-image" in msg) if not barcelona.image.ref else ("image.ref" in msg)
    assert isinstance(
        e.value, DeployTimeout
    )  # the CLI still remembers the deploy for status/teardown


def test_err_image_pull_alone_gets_a_grace_period(barcelona, fake_for) -> None:
    """A single ErrImagePull may be a registry hiccup: only back-off, or the same failure
    for PULL_GRACE_S, stops the wait."""
    from mlenv.cluster.api import PodView
    from mlenv.cluster.deploy import PULL_GRACE_S, image_problem

    assert PULL_GRACE_S >= 10
    line = image_problem(
        barcelona, [PodView("ml-dev-env-1", "Pending", False, 0, "n", {}, "ErrImagePull")]
    )
    assert line.startswith("ml-dev-env-1 cannot pull the image ") and "(ErrImagePull)" in line


def test_teardown_only_touches_this_instance(barcelona, local_cfg, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    other = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "keep",
            "labels": {
                "app.kubernetes.io/name": "ml-dev-env",
                "app.kubernetes.io/instance": "other",
            },
        },
    }
    fake.apply(other, barcelona.namespace)
    teardown(barcelona, fake)
    ns = barcelona.namespace
    assert fake.list("StatefulSet", ns) == [] and fake.list("Pod", ns) == []
    assert fake.get("ConfigMap", "keep", ns) is not None
    assert fake.list("PersistentVolumeClaim", ns)  # kept, incl. volumeClaimTemplate ones
    teardown(barcelona, fake, purge=True)
    assert fake.list("PersistentVolumeClaim", ns) == []


def test_sync_fans_out_keeps_pod_files_and_verifies(barcelona, tmp_path, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.py").write_text("print(1)\n")
    (ws / "sub" / "b.json").write_text("{}")
    rep = sync(barcelona, fake, str(ws))
    assert rep.copied == rep.verified == ["ml-dev-env-0", "ml-dev-env-1"]
    fake.write_pod_file("ml-dev-env-1", barcelona.namespace, "/workspace/results/r1/x", b"keep")
    (ws / "a.py").unlink()
    sync(barcelona, fake, str(ws))
    files = fake.pod_files("ml-dev-env-1", barcelona.namespace, "/workspace")
    # a plain sync never deletes (upstream's sync did not): a.py stays in the pod
    assert files["a.py"] == b"print(1)\n" and files["results/r1/x"] == b"keep"
    fake.write_pod_file("ml-dev-env-0", barcelona.namespace, "/workspace/stray", b"x")
    (ws / "sub" / "b.json").write_text('{"changed": 1}')
    fake.calls.clear()
    with pytest.raises(SyncMismatch, match="ml-dev-env-0.*sub/b.json"):
        # a pod whose copy goes wrong is caught by the check, not trusted
        fake.rsync_failures = ["ml-dev-env-0"]
        sync(barcelona, fake, str(ws))


def test_sync_delete_spares_results_checkpoints_and_dotfiles(barcelona, tmp_path, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ns, pod = barcelona.namespace, "ml-dev-env-0"
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("a")
    (ws / "gone.py").write_text("g")
    sync(barcelona, fake, str(ws))
    for path in (
        "results/r/x.json",
        "checkpoints/step1.pt",
        ".cache/z",
        "sub/.hostfile",
        "old/stale.py",
    ):
        fake.write_pod_file(pod, ns, f"/workspace/{path}", b"pod")
    (ws / "gone.py").unlink()
    rep = sync(barcelona, fake, str(ws), delete=True)
    files = fake.pod_files(pod, ns, "/workspace")
    assert "gone.py" not in files and "old/stale.py" not in files
    for kept in ("results/r/x.json", "checkpoints/step1.pt", ".cache/z", "sub/.hostfile", "a.py"):
        assert kept in files, kept
    plan = rep.plans[0]
    assert plan.delete == ["gone.py", "old/stale.py"]
    assert {"checkpoints/step1.pt", ".cache/z", "sub/.hostfile"} <= set(plan.kept)


def test_sync_dry_run_lists_and_changes_nothing(barcelona, tmp_path, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ns, pod = barcelona.namespace, "ml-dev-env-0"
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("a")
    sync(barcelona, fake, str(ws))
    (ws / "a.py").write_text("a2")
    (ws / "new.py").write_text("n")
    fake.write_pod_file(pod, ns, "/workspace/pod-only.txt", b"p")
    before = fake.pod_files(pod, ns, "/workspace")
    said: list[str] = []
    rep = sync(barcelona, fake, str(ws), delete=True, dry_run=True, say=said.append)
    assert fake.pod_files(pod, ns, "/workspace") == before
    assert rep.dry_run and rep.copied == []
    assert "  + new.py" in said and "  ~ a.py" in said and "  - pod-only.txt" in said


def test_in_pod_tree_script_matches_local_digest(tmp_path) -> None:
    (tmp_path / "d" / "__pycache__").mkdir(parents=True)
    (tmp_path / "results").mkdir()
    (tmp_path / "d" / "x.txt").write_bytes(b"abc")
    (tmp_path / "d" / "__pycache__" / "x.pyc").write_bytes(b"zz")
    (tmp_path / "results" / "r.json").write_bytes(b"{}")
    (tmp_path / "top.sh").write_bytes(b"#!/bin/sh\n")
    out = subprocess.run(
        [sys.executable, "-c", treehash.SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == treehash.digest_files(treehash.local_files(str(tmp_path)))
    assert out.startswith("2 ")


def test_waiting_lines_name_why_a_pending_pod_waits(barcelona, fake_for) -> None:
    """while waiting, a Pending pod shows its latest Warning (FailedScheduling), not
    just "Pending", and each line carries the time spent so far."""
    from mlenv.cluster.deploy import wait_ready

    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    sts = fake.get("StatefulSet", "ml-dev-env", barcelona.namespace)
    sts["spec"]["replicas"] = len(barcelona.gpu_nodes) + 1  # one pod more than pinned nodes
    fake.apply(sts, barcelona.namespace, force_conflicts=True)
    said: list[str] = []
    with pytest.raises(DeployTimeout):
        wait_ready(barcelona, len(barcelona.gpu_nodes) + 1, fake, 10, said.append)
    extra = f"ml-dev-env-{len(barcelona.gpu_nodes)}"
    assert any(f"{extra}=FailedScheduling" in s for s in said), said
    assert all(s.rstrip().endswith(" s)") for s in said)


@pytest.mark.parametrize(
    "configured,live,same",
    [
        # upstream's every barcelona config against what `oc whoami --show-server` says
        ("barcelona.nerc.mghpcc.org", "https://api.barcelona.nerc.mghpcc.org:6443", True),
        ("api.barcelona.nerc.mghpcc.org", "https://barcelona.nerc.mghpcc.org:6443", True),
        (
            "https://API.Barcelona.nerc.mghpcc.org",
            "https://api.barcelona.nerc.mghpcc.org:6443",
            True,
        ),
        ("barcelona.nerc.mghpcc.org:6443", "https://api.barcelona.nerc.mghpcc.org:6443", True),
        ("barcelona.nerc.mghpcc.org:6443", "https://api.barcelona.nerc.mghpcc.org:8443", False),
        ("barcelona.nerc.mghpcc.org", "https://api.cairo.nerc.mghpcc.org:6443", False),
        (
            "barcelona.nerc.mghpcc.org",
            "https://api.barcelona.nerc.mghpcc.org.evil.example:6443",
            False,
        ),
        ("barcelona.nerc.mghpcc.org", "https://apibarcelona.nerc.mghpcc.org:6443", False),
    ],
)
def test_cluster_api_matches_by_host(configured: str, live: str, same: bool) -> None:
    """Upstream configs say `api: barcelona.nerc.mghpcc.org`; deploy refused the server
    `oc` reports for that cluster (`https://api.barcelona…:6443`) with exit 2."""
    from mlenv.cluster.preflight import same_server

    assert same_server(configured, live) is same


def test_upstream_barcelona_deploys_when_logged_in_to_its_api_host(barcelona, fake_for) -> None:
    cfg = dataclasses.replace(
        barcelona, cluster=dataclasses.replace(barcelona.cluster, api="barcelona.nerc.mghpcc.org")
    )
    fake = fake_for(cfg)
    fake.server_url = "https://api.barcelona.nerc.mghpcc.org:6443"
    assert deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake).ready == cfg.gpus.default_nodes
    other = fake_for(cfg)
    other.server_url = "https://api.cairo.nerc.mghpcc.org:6443"
    with pytest.raises(PreflightFailed, match="cluster.api") as e:
        deploy(cfg, DeployOptions(mode="tcp", timeout=60), other)
    assert e.value.exit_code == 2


@pytest.mark.parametrize(
    ("planned", "served", "changed"),
    [
        ("1024Gi", "1Ti", False),
        ("1000Mi", "1000Mi", False),
        ("2048Mi", "2Gi", False),
        ("1Ti", "1T", True),
    ],
)
def test_claim_sizes_compare_as_quantities(
    local_cfg, planned: str, served: str, changed: bool
) -> None:
    """the real API server canonicalises 1024Gi to 1Ti; compared as text, every
    re-deploy recreated the StatefulSet (fails on the code before: 1024Gi != 1Ti)."""
    from mlenv.cluster.deploy import immutable_changes

    def sts(size: str) -> dict:
        return {
            "kind": "StatefulSet",
            "spec": {
                "serviceName": "s",
                "selector": {"matchLabels": {"a": "b"}},
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "workspace"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": size}},
                        },
                    }
                ],
            },
        }

    assert (immutable_changes(local_cfg, sts(served), sts(planned)) != []) is changed


def test_the_cpu_demo_deploys_on_a_cluster_without_gpus(local_cfg) -> None:
    """`gpus.type: cpu` requests no nvidia.com/gpu, so preflight must not ask for
    it (kind, CRC: no GPU nodes). Fails on the code before: '0 Ready node(s) with 2
    allocatable nvidia.com/gpu'."""
    from mlenv.testing.fakecluster import FakeCluster

    fake = FakeCluster.typical(local_cfg.namespace, ["cpu-0", "cpu-1"], gpus=0)
    rep = deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert rep.ready == rep.nodes == local_cfg.gpus.default_nodes
    # and still refused when there are too few nodes at all, said without GPUs
    small = FakeCluster.typical(local_cfg.namespace, ["cpu-0"], gpus=0)
    with pytest.raises(PreflightFailed, match=r"1 Ready node\(s\), 2 needed"):
        deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), small)


def test_a_changed_statefulset_is_done_when_every_pod_runs_the_new_spec(local_cfg) -> None:
    """a changed StatefulSet keeps its old pods Ready while its controller replaces
    them one by one; deploy is done when every pod is on the new revision. Fails on the
    code before: deploy returned while the old pods were still Ready."""
    from mlenv.testing.fakecluster import FakeCluster
    from mlenv.workload.statefulset import REVISION_LABEL

    fake = FakeCluster.typical(local_cfg.namespace, ["n0", "n1"], gpus=0)
    deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    ns = local_cfg.namespace

    def live(kind: str, name: str) -> dict:
        obj = fake.get(kind, name, ns)
        assert obj is not None, f"{kind}/{name}"
        return obj

    before = {i: live("Pod", f"ml-dev-env-{i}")["metadata"]["uid"] for i in (0, 1)}
    changed = dataclasses.replace(local_cfg, nccl=dataclasses.replace(local_cfg.nccl, debug="WARN"))
    said: list[str] = []
    deploy(changed, DeployOptions(mode="tcp", timeout=120), fake, say=said.append)
    rev = live("StatefulSet", "ml-dev-env")["status"]["updateRevision"]
    for i in (0, 1):
        pod = live("Pod", f"ml-dev-env-{i}")
        assert (
            pod["metadata"]["labels"][REVISION_LABEL] == rev and pod["metadata"]["uid"] != before[i]
        )
    assert any("not yet replaced" in s for s in said), said


def test_a_smaller_claim_is_refused_naming_the_key_to_set_back(barcelona, fake_for) -> None:
    """A bound claim cannot shrink (the real server's 422, now in the fake too: the shared
    scenario a_bound_claim_cannot_shrink). Lowering storage.workspace_size on a deployed
    cluster: exit 2 before anything is applied, naming the key and the size the claim has.
    Fails on the code before: the server's line alone, no key, no size."""
    from mlenv.cluster.deploy import DryRunRejected

    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    uid = fake.get("StatefulSet", "ml-dev-env", barcelona.namespace)["metadata"]["uid"]
    smaller = dataclasses.replace(
        barcelona, storage=dataclasses.replace(barcelona.storage, workspace_size="1Gi")
    )
    with pytest.raises(DryRunRejected) as ei:
        deploy(smaller, DeployOptions(mode="rdma", timeout=60), fake)
    assert ei.value.exit_code == 2
    msg = str(ei.value)
    assert (
        "spec.resources.requests.storage" in msg
        and f"cannot shrink: set storage.workspace_size back to {barcelona.storage.workspace_size}"
        in msg
    ), msg
    assert fake.get("StatefulSet", "ml-dev-env", barcelona.namespace)["metadata"]["uid"] == uid


def test_a_crash_looping_pod_stops_the_wait_with_its_exit_code_and_log(barcelona, fake_for) -> None:
    """Pod init that fails each time (CrashLoopBackOff) does not heal by waiting: said with
    the pod, its exit code and its last run's log once it was restarted twice, not at the
    600 s timeout (on the code before: a DeployTimeout at 600 s naming only the reason)."""
    from mlenv.cluster.deploy import CrashLooping

    fake = fake_for(barcelona)
    fake.crash_loops = {
        "ml-dev-env-1": (1, "rank 1: writing the hostfile\npod init: \x1b]0;x\x07no RDMA device\n")
    }
    started = fake.monotonic()
    with pytest.raises(CrashLooping) as e:
        deploy(barcelona, DeployOptions(mode="rdma", timeout=600), fake)
    assert fake.monotonic() - started < 30
    msg = str(e.value)
    assert msg.startswith(
        "ml-dev-env-1: its container keeps exiting (CrashLoopBackOff, exit 1, 3 restarts)"
    )
    assert "    rank 1: writing the hostfile\n" in msg and "no RDMA device" in msg
    assert "\x1b" not in msg and "\x07" not in msg  # a log drives no terminal
    assert (
        f"mlenv logs {barcelona.name} --pod 1" in msg and f"mlenv teardown {barcelona.name}" in msg
    )
    assert ["logs", "ml-dev-env-1", "--tail=15", "--previous"] in [c[:4] for c in fake.calls]
    assert isinstance(e.value, DeployTimeout)  # the CLI still remembers the deploy


def test_the_dry_run_s_server_warnings_are_said_once_and_do_not_stop_the_deploy(
    barcelona, fake_for
) -> None:
    """A Pod Security warn level (namespace label or cluster default) warns of the
    StatefulSet's pod template in the server-side dry run; kubectl printed it and deploy
    dropped it (on the code before: no line). Said once, escaped; the deploy goes on (the
    warn level refuses nothing; an enforce refusal is read from FailedCreate)."""
    fake = fake_for(barcelona)
    warning = (
        'would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
        '(container "worker" must set securityContext.allowPrivilegeEscalation=false)\x1b[2J'
    )
    fake.dry_run_warnings = {"StatefulSet": [warning], "Pod": [warning]}
    said: list[str] = []
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    lines = [s for s in said if s.startswith("server warning (dry run): ")]
    assert len(lines) == 1, said
    assert 'would violate PodSecurity "restricted:latest"' in lines[0] and "\x1b" not in lines[0]


def test_kubectl_s_warning_lines_are_the_server_s_warnings() -> None:
    from mlenv.cluster.oc import server_warnings

    err = (
        'Warning: would violate PodSecurity "baseline:latest": non-default capabilities\n'
        "error-free line\n  Warning: spec.template: deprecated field\n"
    )
    assert server_warnings(err) == (
        'would violate PodSecurity "baseline:latest": non-default capabilities',
        "spec.template: deprecated field",
    )
