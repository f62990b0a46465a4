"""``acceptance.schedule`` renders a CronJob, its ServiceAccount, Role and RoleBinding."""

from __future__ import annotations

import pytest
from render_fixtures import by_kind, one, rdma_cluster, tcp_cluster

from mlenv.config.model import Recheck
from mlenv.platforms.kube import pod_argv
from mlenv.render import recheck
from mlenv.render.plan import KIND_ORDER, render_cluster
from mlenv.render.workload import GPU_RESOURCE

WEEKLY = Recheck("0 3 * * 0")


def _pod(ms: list[dict]) -> dict:
    return one(ms, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]


def test_without_a_schedule_nothing_new_is_rendered() -> None:
    for ms in (render_cluster(rdma_cluster(), "rdma"), render_cluster(tcp_cluster(), "tcp")):
        assert not by_kind(ms, "CronJob") and not by_kind(ms, "Role")
        assert all(m["metadata"]["name"] != recheck.RECHECK for m in ms)


@pytest.mark.parametrize("platform", ["openshift", "kubernetes"])
def test_a_schedule_renders_four_namespaced_objects_and_nothing_cluster_scoped(
    platform: str,
) -> None:
    c = tcp_cluster(recheck=WEEKLY, platform=platform)
    ms = render_cluster(c, "tcp")
    ours = [m for m in ms if m["metadata"]["name"] == recheck.RECHECK]
    assert sorted(m["kind"] for m in ours) == ["CronJob", "Role", "RoleBinding", "ServiceAccount"]
    for m in ours:
        assert m["metadata"]["namespace"] == c.namespace
        assert (
            m["metadata"]["labels"]["app.kubernetes.io/instance"] == c.name
        )  # teardown selects on it
    assert not by_kind(ms, "PriorityClass") and not by_kind(ms, "ClusterRole")
    # after the StatefulSet it execs into
    kinds = [m["kind"] for m in ms]
    assert kinds.index("CronJob") > kinds.index("StatefulSet")
    assert KIND_ORDER.index("Role") < KIND_ORDER.index("RoleBinding")


def test_the_cronjob_runs_the_profile_through_pod_0_like_mlenv_launch() -> None:
    c = tcp_cluster(recheck=Recheck("*/30 * * * *", "full"), platform="openshift")
    cj = one(render_cluster(c, "tcp"), "CronJob")
    spec = cj["spec"]
    assert spec["schedule"] == "*/30 * * * *" and spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] > 0
    assert 0 < spec["successfulJobsHistoryLimit"] <= 5 and 0 < spec["failedJobsHistoryLimit"] <= 5
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    assert (
        job["activeDeadlineSeconds"]
        == recheck.PROFILE_BOUND_S["full"]
        > recheck.PROFILE_BOUND_S["quick"]
    )
    (ctr,) = job["template"]["spec"]["containers"]
    cmd = ctr["command"]
    assert "args" not in ctr and cmd[0] == "oc" and cmd[1] == "exec"
    dash = cmd.index("--")
    assert cmd[:dash] == [
        "oc",
        "exec",
        f"--namespace={c.namespace}",
        "--container=worker",
        "ml-dev-env-0",
    ]
    # what `mlenv launch` runs in pod-0, with the pod launcher's own --profile
    assert cmd[dash + 1 :] == [*pod_argv("launch", []), "--profile", "full"]
    assert ctr["image"] == recheck.OPENSHIFT_CLI_IMAGE and ctr["imagePullPolicy"] == "Always"


def test_the_pod_asks_for_no_gpu_and_passes_restricted() -> None:
    c = rdma_cluster(recheck=WEEKLY)
    pod = _pod(render_cluster(c, "rdma"))["spec"]
    (ctr,) = pod["containers"]
    res = ctr["resources"]
    assert set(res["requests"]) == {"cpu", "memory"} and set(res["limits"]) == {"cpu", "memory"}
    assert GPU_RESOURCE not in str(res) and "rdma" not in str(res)
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == recheck.RECHECK
    sc = ctr["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "runAsUser" not in pod["securityContext"]  # restricted-v2 assigns one on OpenShift
    assert "priorityClassName" not in pod and "volumes" not in pod and "hostNetwork" not in pod


def test_plain_kubernetes_runs_kubectl_as_a_fixed_non_root_user() -> None:
    c = tcp_cluster(recheck=WEEKLY, platform="kubernetes")
    pod = _pod(render_cluster(c, "tcp"))["spec"]
    assert pod["containers"][0]["command"][0] == "kubectl"
    assert pod["containers"][0]["image"] == recheck.KUBECTL_IMAGE
    assert pod["securityContext"]["runAsUser"] == recheck.NONROOT_UID != 0


def test_a_configured_priority_class_and_runner_image_are_used() -> None:
    c = tcp_cluster(
        recheck=Recheck("@daily", "quick", "batch-low", "quay.io/me/oc@sha256:" + "a" * 64)
    )
    ms = render_cluster(c, "tcp")
    pod = _pod(ms)["spec"]
    assert pod["priorityClassName"] == "batch-low"
    assert pod["containers"][0]["image"].startswith("quay.io/me/oc@")
    assert pod["containers"][0]["imagePullPolicy"] == "IfNotPresent"


def test_the_role_allows_exec_into_pod_0_only() -> None:
    c = tcp_cluster(recheck=WEEKLY)
    ms = render_cluster(c, "tcp")
    role = [m for m in by_kind(ms, "Role") if m["metadata"]["name"] == recheck.RECHECK][0]
    grants = {
        (v, r, n)
        for rule in role["rules"]
        for v in rule["verbs"]
        for r in rule["resources"]
        for n in rule["resourceNames"]
    }
    assert grants == {("get", "pods", "ml-dev-env-0"), ("create", "pods/exec", "ml-dev-env-0")}
    rb = [m for m in by_kind(ms, "RoleBinding") if m["metadata"]["name"] == recheck.RECHECK][0]
    assert rb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": recheck.RECHECK,
    }
    assert rb["subjects"] == [
        {"kind": "ServiceAccount", "name": recheck.RECHECK, "namespace": c.namespace}
    ]
    sa = [m for m in by_kind(ms, "ServiceAccount") if m["metadata"]["name"] == recheck.RECHECK][0]
    assert sa["automountServiceAccountToken"] is False  # only the CronJob's pod mounts it


def test_the_networkpolicy_does_not_admit_the_cronjob_pod() -> None:
    """The instance policy admits this deployment's pods to every port of each other; the
    CronJob's pod only talks to the API server and must match none of its selectors (nor
    read as a namespace neighbour's pod under our labels)."""
    c = tcp_cluster(recheck=WEEKLY)
    ms = render_cluster(c, "tcp")
    labels = _pod(ms)["metadata"]["labels"]

    def selects(sel: dict) -> bool:
        return all(labels.get(k) == v for k, v in sel.items())

    pols = by_kind(ms, "NetworkPolicy")
    assert pols
    for pol in pols:
        assert not selects(pol["spec"]["podSelector"]["matchLabels"])
        for rule in pol["spec"]["ingress"]:
            for peer in rule["from"]:
                if "podSelector" in peer:
                    assert not selects(peer["podSelector"]["matchLabels"])
    sts = one(ms, "StatefulSet")
    assert not selects(sts["spec"]["selector"]["matchLabels"])
    assert labels["app.kubernetes.io/component"] == "recheck"


def test_off_kubernetes_nothing_is_rendered() -> None:
    from dataclasses import replace

    c = replace(tcp_cluster(recheck=WEEKLY), platform="slurm")
    assert recheck.manifests(c) == []
