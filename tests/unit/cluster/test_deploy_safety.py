"""Deploy never half-applies: permissions derived from the plan, admin-owned cluster-scoped
objects, the server-side dry run, recreating what the API cannot update in place;
teardown on plain Kubernetes; sync's exclude rules, --watch and the RWX copy-once path."""

from __future__ import annotations

import copy
import dataclasses
import os

import pytest

from mlenv.cluster import treehash
from mlenv.cluster.deploy import (
    DeployOptions,
    DryRunRejected,
    PreflightFailed,
    deploy,
    plan,
)
from mlenv.cluster.keys import SECRET_NAME
from mlenv.cluster.sync import sync, watch
from mlenv.cluster.teardown import teardown
from mlenv.config import load
from mlenv.testing.fakecluster import FakeCluster

from .conftest import ROOT

NON_ADMIN = [
    "create securitycontextconstraints",
    "patch securitycontextconstraints",
    "create clusterroles",
    "patch clusterroles",
]


def admin_applies(
    fake: FakeCluster, cfg, kinds=("SecurityContextConstraints", "ClusterRole"), change=None
) -> list[str]:
    """What a cluster admin does once: apply the plan's cluster-scoped objects."""
    names = []
    for m in plan(cfg, "rdma", None):
        if m["kind"] in kinds:
            m = copy.deepcopy(m)
            if change:
                change(m)
            fake.apply(m, None, field_manager="cluster-admin")
            names.append(f"{m['kind'].lower()}/{m['metadata']['name']}")
    return names


def nothing_applied(fake: FakeCluster, ns: str) -> bool:
    return (
        fake.list("ServiceAccount", ns) == []
        and fake.get("Secret", SECRET_NAME, ns) is None
        and fake.list("StatefulSet", ns) == []
        and fake.list("Route", ns) == []
    )


def strict(cfg):
    return dataclasses.replace(cfg, rdma=dataclasses.replace(cfg.rdma, allow_tcp_fallback=False))


def test_non_admin_rdma_deploy_leaves_the_admins_scc_alone(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    left = admin_applies(fake, barcelona)
    fake.denied = list(NON_ADMIN)
    said: list[str] = []
    rep = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert rep.mode == "rdma" and rep.ready == rep.nodes
    assert rep.skipped == left
    assert sum("exists as planned" in s and "left as it is" in s for s in said) == 2
    # what the admin applied is still theirs alone: mlenv sent no PATCH
    scc = next(k for k in fake.managers if k.startswith("SecurityContextConstraints|"))
    assert list(fake.managers[scc]) == ["cluster-admin"]


@pytest.mark.parametrize("case", ["missing", "differs"])
def test_non_admin_without_the_scc_fails_in_preflight_with_the_file_to_apply(
    case, barcelona, fake_for
) -> None:
    fake = fake_for(barcelona)
    if case == "differs":
        admin_applies(
            fake,
            barcelona,
            change=lambda m: (
                m.update(allowedCapabilities=["NET_RAW"])
                if m["kind"] == "SecurityContextConstraints"
                else None
            ),
        )
    fake.denied = list(NON_ADMIN)
    with pytest.raises(PreflightFailed) as e:
        deploy(strict(barcelona), DeployOptions(mode="rdma", timeout=60), fake)
    msg = str(e.value)
    assert "ask a cluster admin to apply k8s/barcelona/rdma/securitycontextconstraints.yaml" in msg
    assert ("does not exist" if case == "missing" else "differs from the plan") in msg
    assert e.value.exit_code == 3
    assert nothing_applied(fake, barcelona.namespace)
    # with fallback allowed the same finding is a reason to fall back, not a half-apply
    rep = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    assert rep.mode == "tcp" and any(
        "securitycontextconstraints.yaml" in r for r in rep.fallback_reasons
    )


def test_permissions_come_from_every_kind_in_the_plan(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    fake.denied = ["create routes", "patch imagestreams"]
    with pytest.raises(PreflightFailed) as e:
        deploy(barcelona, DeployOptions(mode="tcp", timeout=60), fake)
    msg = str(e.value)
    assert "may not create routes in namespace ml-dev-env (the plan has ml-dev-env-" in msg
    assert "may not patch imagestreams in namespace ml-dev-env" in msg
    assert nothing_applied(fake, barcelona.namespace)


def test_scc_use_is_asked_as_the_service_account(barcelona, fake_for) -> None:
    def without_binding(cfg, mode, nodes):
        return [m for m in plan(cfg, mode, nodes) if m["kind"] != "RoleBinding"]

    fake = fake_for(barcelona)
    said: list[str] = []
    deploy(barcelona, DeployOptions(mode="rdma", dry_run="server"), fake, say=said.append)
    assert any("rolebinding/ml-dev-env-scc of this plan grants it" in s for s in said)
    with pytest.raises(
        PreflightFailed,
        match=r"service account ml-dev-env/ml-dev-sa may not use "
        r"SCC ml-dev-env-ml-dev-env-barcelona-rdma and the plan does not grant it",
    ):
        deploy(strict(barcelona), DeployOptions(mode="rdma"), fake, render=without_binding)
    fake.denied = ["impersonate serviceaccounts"]
    said.clear()
    deploy(barcelona, DeployOptions(mode="rdma", dry_run="server"), fake, say=said.append)
    assert any("impersonation forbidden" in s and "not checked" in s for s in said)


def test_a_conflict_in_the_dry_run_applies_nothing(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    route = next(m for m in plan(barcelona, "tcp", None) if m["kind"] == "Route")
    theirs = copy.deepcopy(route)
    theirs["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone-else"
    fake.apply(theirs, barcelona.namespace, field_manager="someone-else")
    with pytest.raises(
        DryRunRejected, match=rf"route/{route['metadata']['name']}: Apply failed"
    ) as e:
        deploy(barcelona, DeployOptions(mode="tcp", timeout=60), fake)
    assert e.value.exit_code == 3 and "nothing was applied" in str(e.value)
    assert fake.list("ServiceAccount", barcelona.namespace) == []
    assert fake.get("Secret", SECRET_NAME, barcelona.namespace) is None
    assert fake.list("StatefulSet", barcelona.namespace) == []


def test_an_invalid_object_in_the_dry_run_is_exit_2_and_applies_nothing(
    barcelona, fake_for
) -> None:
    def broken(cfg, mode, nodes):
        return [*plan(cfg, mode, nodes), {"kind": "ConfigMap", "metadata": {"name": "x"}}]

    fake = fake_for(barcelona)
    with pytest.raises(DryRunRejected) as e:
        deploy(barcelona, DeployOptions(mode="tcp", timeout=60), fake, render=broken)
    assert e.value.exit_code == 2 and "configmap/x" in str(e.value)
    assert nothing_applied(fake, barcelona.namespace)


def test_a_dev_pod_change_recreates_the_bare_pod(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ns = barcelona.namespace
    uid = fake.get("Pod", "ml-dev-env-dev", ns)["metadata"]["uid"]
    more = dataclasses.replace(
        barcelona, dev_tools=dataclasses.replace(barcelona.dev_tools, jupyter=True)
    )
    said: list[str] = []
    rep = deploy(more, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert rep.recreated == ["pod/ml-dev-env-dev"]
    assert any(
        s.startswith("pod/ml-dev-env-dev: its spec changed") and "recreating" in s for s in said
    )
    assert fake.get("Pod", "ml-dev-env-dev", ns)["metadata"]["uid"] != uid


def test_server_dry_run_of_an_immutable_change_says_would_recreate(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ns = barcelona.namespace
    uids = {
        k: fake.get(k, n, ns)["metadata"]["uid"]
        for k, n in (("StatefulSet", "ml-dev-env"), ("Pod", "ml-dev-env-dev"))
    }
    changed = dataclasses.replace(
        barcelona,
        storage=dataclasses.replace(barcelona.storage, workspace_size="400Gi"),
        dev_tools=dataclasses.replace(barcelona.dev_tools, jupyter=True),
    )
    said: list[str] = []
    rep = deploy(changed, DeployOptions(mode="rdma", dry_run="server"), fake, say=said.append)
    assert rep.recreated == ["statefulset/ml-dev-env", "pod/ml-dev-env-dev"]
    assert sum("would delete and recreate it" in s for s in said) == 2
    assert {
        k: fake.get(k, n, ns)["metadata"]["uid"]
        for k, n in (("StatefulSet", "ml-dev-env"), ("Pod", "ml-dev-env-dev"))
    } == uids


def test_rdma_allow_tcp_fallback_false_in_the_config_forbids_fallback(barcelona, fake_for) -> None:
    fake = fake_for(barcelona, rdma=False)
    with pytest.raises(
        PreflightFailed, match=r"TCP fallback is off \(rdma.allow_tcp_fallback is false\)"
    ):
        deploy(strict(barcelona), DeployOptions(mode="rdma", timeout=60), fake)
    assert nothing_applied(fake, barcelona.namespace)


def labelled(kind: str, name: str, instance: str = "barcelona") -> dict:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/name": "ml-dev-env",
                "app.kubernetes.io/instance": instance,
            },
        },
    }


def test_teardown_on_plain_kubernetes_skips_openshift_kinds(barcelona) -> None:
    kube = FakeCluster(openshift=False)
    kube.add_namespace(barcelona.namespace)
    for kind, name in (("ConfigMap", "a"), ("ServiceAccount", "ml-dev-sa"), ("Secret", "s")):
        obj = labelled(kind, name)
        obj["metadata"]["annotations"] = {"ml-dev-env.io/created-by": "mlenv"}
        kube.apply(obj, barcelona.namespace)
    rep = teardown(barcelona, kube)
    assert sorted(rep.deleted) == ["configmap/a", "secret/s", "serviceaccount/ml-dev-sa"]
    assert set(rep.absent_kinds) >= {
        "Route",
        "BuildConfig",
        "ImageStream",
        "SecurityContextConstraints",
    }
    assert rep.left == []


def test_teardown_names_the_cluster_scoped_objects_it_must_leave(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    fake.denied = ["list securitycontextconstraints", "delete clusterroles"]
    rep = teardown(barcelona, fake)
    assert fake.list("StatefulSet", barcelona.namespace) == []
    assert len(rep.left) == 2
    assert rep.left[0].startswith(
        "securitycontextconstraints/ml-dev-env-ml-dev-env-barcelona-rdma: you may not list"
    )
    assert rep.left[1].startswith(
        "clusterroles/ml-dev-env-ml-dev-env-barcelona-rdma-use: you may not delete"
    )


def test_sync_copies_a_nested_results_folder_and_verifies_it(barcelona, fake_for, tmp_path) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ws = tmp_path / "ws"
    (ws / "x" / "results").mkdir(parents=True)
    (ws / "x" / "results" / "golden.json").write_text("{}")
    (ws / "results").mkdir()
    (ws / "results" / "local-run.json").write_text("{}")  # top-level results stay local
    rep = sync(barcelona, fake, str(ws))
    assert rep.verified == ["ml-dev-env-0", "ml-dev-env-1"]
    files = fake.pod_files("ml-dev-env-1", barcelona.namespace, "/workspace")
    assert set(files) == {"x/results/golden.json"}


def test_watch_resyncs_a_changed_file_without_sleeping(barcelona, fake_for, tmp_path) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.py").write_text("v1")
    waits: list[float] = []

    def edit_once(seconds: float) -> None:  # the injected clock: no real sleep
        waits.append(seconds)
        if len(waits) == 1:
            (ws / "train.py").write_text("v2-longer")
            st = os.stat(ws / "train.py")
            os.utime(ws / "train.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    n = watch(barcelona, fake, str(ws), interval=0.5, max_rounds=3, sleep=edit_once)
    assert n == 2 and waits == [0.5, 0.5]
    for pod in ("ml-dev-env-0", "ml-dev-env-1"):
        assert fake.pod_files(pod, barcelona.namespace, "/workspace") == {"train.py": b"v2-longer"}


@pytest.mark.parametrize("one_stream", [True, False], ids=["kubectl", "oc"])
def test_rwx_copies_once_and_checks_every_pod(fake_for, tmp_path, one_stream) -> None:
    cfg = load("nerc-tcp", ROOT)
    assert cfg.storage.mode == "rwx"
    fake = fake_for(cfg)
    fake.one_stream_copy = one_stream
    deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("a")
    fake.calls.clear()
    rep = sync(cfg, fake, str(ws))
    verb = "copy_planned" if one_stream else "rsync"
    assert [c[:2] for c in fake.calls if c[0] in ("rsync", "copy_planned")] == [
        [verb, "ml-dev-env-0"]
    ]
    # pod-0 holds the shared volume: kubectl lists, copies and lists again in one stream;
    # oc lists to plan its copy first. pod-0's check is the listing its copy's own call
    # made, every other pod is listed once to check it
    (copy,) = [c for c in fake.calls if c[0] == verb]
    if one_stream:
        assert copy[2:] == ["/workspace", "1"]
    else:
        assert copy[4:] == [*treehash.POD_PYTHON, treehash.LIST_SCRIPT, "/workspace"]
    checks = [c[1] for c in fake.calls if c[0] == "exec"][0 if one_stream else 1 :]
    n = cfg.gpus.default_nodes
    assert checks == [f"ml-dev-env-{i}" for i in range(1, n)]
    assert rep.copied == ["ml-dev-env-0"] and rep.verified == [f"ml-dev-env-{i}" for i in range(n)]


def test_unreadable_admin_objects_are_left_to_the_admin(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    admin_applies(fake, barcelona)
    fake.denied = [*NON_ADMIN, "get securitycontextconstraints"]
    said: list[str] = []
    rep = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert rep.mode == "rdma" and rep.ready == rep.nodes
    assert "securitycontextconstraints/ml-dev-env-ml-dev-env-barcelona-rdma" in rep.skipped
    assert any("may not read, create or patch securitycontextconstraints/" in s for s in said)


def test_a_recreate_the_user_may_not_delete_is_refused_before_applying(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    fake.denied = ["delete pods"]
    secret = fake.get("Secret", SECRET_NAME, barcelona.namespace)
    more = dataclasses.replace(
        barcelona, dev_tools=dataclasses.replace(barcelona.dev_tools, jupyter=True)
    )
    with pytest.raises(
        DryRunRejected,
        match="pod/ml-dev-env-dev: it must be deleted and "
        "recreated, and developer may not delete pods",
    ):
        deploy(more, DeployOptions(mode="rdma", timeout=60), fake)
    assert not any(
        r.startswith("ml-dev-env-jupyter")
        for r in (o["metadata"]["name"] for o in fake.list("Route", barcelona.namespace))
    )
    assert fake.get("Secret", SECRET_NAME, barcelona.namespace) == secret


def test_a_non_admin_who_may_not_bind_the_scc_role_is_told_before_anything_is_applied(
    barcelona, fake_for
) -> None:
    """binding the SCC's `use` ClusterRole needs `bind` on it (or holding `use` of the
    SCC); create/patch on rolebindings is not enough, and the real server refused the apply
    after preflight had said yes. Fails on the code before: the deploy went ahead."""
    fake = fake_for(barcelona)
    admin_applies(fake, barcelona)  # the SCC and its role exist: only the binding is the user's
    fake.denied = [
        *NON_ADMIN,
        "bind clusterroles",
        "escalate clusterroles",
        "use securitycontextconstraints",
    ]
    with pytest.raises(PreflightFailed) as e:
        deploy(strict(barcelona), DeployOptions(mode="rdma", timeout=60), fake)
    msg = str(e.value)
    assert "may not bind clusterrole" in msg and "use securitycontextconstraints/" in msg
    assert nothing_applied(fake, barcelona.namespace)
    # with fallback allowed: TCP, and the reason is said
    rep = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    assert rep.mode == "tcp" and any("may not bind clusterrole" in r for r in rep.fallback_reasons)
    # holding `bind` on the role (what an admin grants a project admin) is enough
    fake2 = fake_for(barcelona)
    admin_applies(fake2, barcelona)
    fake2.denied = [*NON_ADMIN, "use securitycontextconstraints"]
    assert deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake2).mode == "rdma"


class _CountingReads:
    """The fake, counting each object's reads until the first real (not dry-run) apply."""

    def __init__(self, fake: FakeCluster) -> None:
        self._fake, self.applying = fake, False
        self.reads: dict[tuple[str, str], int] = {}

    def get(self, kind, name, namespace):
        if not self.applying:
            self.reads[(kind, name)] = self.reads.get((kind, name), 0) + 1
        return self._fake.get(kind, name, namespace)

    def apply(self, manifest, namespace, **kw):
        self.applying = self.applying or not kw.get("dry_run", False)
        return self._fake.apply(manifest, namespace, **kw)

    def __getattr__(self, name):
        return getattr(self._fake, name)


def test_the_checks_before_applying_read_each_object_once(barcelona, fake_for) -> None:
    """preflight, the ownership check, the created-by mark, the secrets and the dry
    run each read every planned object: on the kube tier one deploy of `local` ran 53
    `kubectl get` of its 95 processes, each object read 4 to 8 times (fails on the code
    before: up to 5 reads)."""
    from mlenv.cluster.deploy import DeployOptions, deploy

    fake = fake_for(barcelona)
    counting = _CountingReads(fake)
    deploy(barcelona, DeployOptions(mode="tcp", timeout=60), counting)
    assert counting.applying and counting.reads
    assert max(counting.reads.values()) == 1, counting.reads


def test_pods_are_not_started_on_an_image_the_imagestream_does_not_have_yet(
    barcelona, fake_for
) -> None:
    """on OpenShift without image.ref the pods run the BuildConfig's output, whose
    first build takes tens of minutes. Deploy applies everything else (the build starts
    from its ConfigChange trigger), starts no pod on an image that is not there, and says
    what to do; once the build has pushed, deploy starts them. Fails on the code before:
    the StatefulSet was applied and its pods sat in ImagePullBackOff."""
    from mlenv.cluster.deploy import DeployOptions, ImageNotBuilt, deploy

    fake: FakeCluster = fake_for(barcelona)
    fake.builds_finish = False  # the first build is still running, as on OpenShift
    with pytest.raises(ImageNotBuilt) as e:
        deploy(barcelona, DeployOptions(mode="tcp", timeout=60), fake)
    msg = str(e.value)
    assert e.value.exit_code == 3
    assert "statefulset/ml-dev-env" in msg and "not started" in msg and "make build-image" in msg
    assert fake.get("StatefulSet", "ml-dev-env", barcelona.namespace) is None
    assert fake.list("Pod", barcelona.namespace) == []
    for kind in ("ImageStream", "BuildConfig", "Service", "ServiceAccount"):
        assert fake.list(kind, barcelona.namespace), kind  # the rest is applied
    assert (
        fake.start_build("ml-dev-env", barcelona.namespace, lambda _line: None) == 0
    )  # make build-image
    rep = deploy(barcelona, DeployOptions(mode="tcp", timeout=60), fake)
    assert (
        rep.ready == rep.nodes
        and fake.get("StatefulSet", "ml-dev-env", barcelona.namespace) is not None
    )


def test_the_admin_hint_says_how_to_render_a_file_that_is_not_there(
    barcelona, fake_for, tmp_path
) -> None:
    """A config outside this checkout (or never rendered) has no k8s/ tree: the hint
    must not name a file the admin cannot find."""
    elsewhere = dataclasses.replace(barcelona, source=tmp_path / "clusters" / "barcelona.yaml")
    fake = fake_for(barcelona)
    fake.denied = list(NON_ADMIN)
    with pytest.raises(PreflightFailed) as e:
        deploy(strict(elsewhere), DeployOptions(mode="rdma", timeout=60), fake)
    msg = str(e.value)
    assert "ask a cluster admin to apply k8s/barcelona/rdma/" not in msg
    assert "render it (`mlenv render barcelona --mode rdma` writes k8s/barcelona/rdma/" in msg
