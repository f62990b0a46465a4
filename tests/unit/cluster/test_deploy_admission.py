"""The wait after the apply reports an admission refusal of the StatefulSet's pods within
seconds, from the StatefulSet's FailedCreate event, and reads only current objects'
events."""

from __future__ import annotations

import pytest

from mlenv.cluster.deploy import (
    AdmissionRefused,
    DeployOptions,
    DeployTimeout,
    admission_refusal,
    deploy,
    wait_ready,
)


def _sts(caps: list[str]) -> dict:
    labels = {"app.kubernetes.io/name": "ml-dev-env", "app.kubernetes.io/instance": "local"}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "ml-dev-env", "labels": labels},
        "spec": {
            "replicas": 2,
            "serviceName": "ml-dev-env",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "img",
                            "securityContext": {"capabilities": {"add": caps}},
                        }
                    ]
                },
            },
        },
    }


def test_an_scc_refusal_is_reported_in_seconds_not_at_the_timeout(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)  # openshift: a pod adding IPC_LOCK needs an SCC it may use
    fake.apply(_sts(["IPC_LOCK"]), local_cfg.namespace)
    start = fake.monotonic()
    with pytest.raises(AdmissionRefused) as e:
        wait_ready(local_cfg, 2, fake, 900, lambda _l: None)
    assert fake.monotonic() - start <= 15
    msg = str(e.value)
    assert "SCC admission refused pods of statefulset/ml-dev-env" in msg
    assert f"the service account {local_cfg.security.service_account} may use no" in msg
    assert f"k8s/{local_cfg.name}/rdma/securitycontextconstraints.yaml" in msg
    assert "--mode tcp" in msg and e.value.exit_code == 3


def test_a_refusal_of_a_torn_down_statefulset_is_not_this_ones(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    fake.apply(_sts(["IPC_LOCK"]), local_cfg.namespace)
    fake.pause(2.0)  # its FailedCreate event is recorded, and outlives it
    fake.delete("StatefulSet", "ml-dev-env", local_cfg.namespace)
    rep = deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert rep.ready == rep.nodes


@pytest.mark.parametrize(
    ("message", "policy"),
    [
        (
            'pods "ml-dev-env-0" is forbidden: violates PodSecurity "baseline:latest": '
            'non-default capabilities (container "main" must not include "IPC_LOCK")',
            "Pod Security admission",
        ),
        (
            'pods "ml-dev-env-1" is forbidden: exceeded quota: q, requested: pods=1, '
            "used: pods=1, limited: pods=1",
            "a ResourceQuota",
        ),
        (
            'pods "ml-dev-env-0" is forbidden: maximum memory usage per Container is 1Gi, '
            "but limit is 2Gi",
            "a LimitRange",
        ),
    ],
)
def test_each_admission_refusal_names_its_policy(local_cfg, message: str, policy: str) -> None:
    line = admission_refusal(
        local_cfg, f"create Pod x in StatefulSet ml-dev-env failed error: {message}"
    )
    assert line.startswith(f"{policy} refused pods of statefulset/ml-dev-env")
    assert message.split("is forbidden: ")[1] in line


def test_a_failed_create_that_is_no_admission_refusal_is_waited_out(local_cfg) -> None:
    assert admission_refusal(local_cfg, 'pods "ml-dev-env-0" already exists') == ""


def test_the_waiting_line_and_the_timeout_ignore_a_replaced_pods_events(
    local_cfg, fake_for
) -> None:
    fake = fake_for(local_cfg)
    deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    ns = local_cfg.namespace
    fake._event(ns, "Pod", "ml-dev-env-0", "Warning", "FailedScheduling", "0/2 nodes available")
    fake.delete("Pod", "ml-dev-env-0", ns)  # the StatefulSet makes a new one, same name
    fake.unready_pods = ["ml-dev-env-0"]  # it runs, and is not Ready yet
    said: list[str] = []
    with pytest.raises(DeployTimeout) as e:
        wait_ready(local_cfg, 2, fake, 10, said.append)
    assert any("ml-dev-env-0=Running" in s for s in said)
    assert not any("FailedScheduling" in s for s in said)
    assert "ml-dev-env-0: Running, not Ready yet" in str(e.value)
    assert "FailedScheduling" not in str(e.value)


def test_a_half_way_refusal_never_suggests_the_same_deploy_as_the_fix(local_cfg, fake_for) -> None:
    from mlenv.cluster.api import Forbidden
    from mlenv.cluster.deploy import DeployIncomplete

    fake = fake_for(local_cfg)
    real_apply = fake.apply

    def apply(manifest, namespace, **kw):
        if manifest["kind"] == "Pod" and not kw.get("dry_run"):
            raise Forbidden(
                'pods "ml-dev-env-dev" is forbidden: exceeded quota: compute, requested: '
                "limits.cpu=2, used: limits.cpu=8, limited: limits.cpu=8",
                kind="Pod",
                name="ml-dev-env-dev",
            )
        return real_apply(manifest, namespace, **kw)

    fake.apply = apply
    with pytest.raises(DeployIncomplete) as e:
        deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    msg = str(e.value)
    assert "exceeded quota" in msg and "re-runs the same plan" not in msg
    assert "to finish it: change what the refusal above names" in msg


def test_the_timeout_reasons_leave_out_a_torn_down_statefulsets_events(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    ns = local_cfg.namespace
    fake.apply(_sts([]), ns)
    fake._event(ns, "StatefulSet", "ml-dev-env", "Warning", "FailedCreate", "an old refusal")
    fake.delete("StatefulSet", "ml-dev-env", ns)
    fake.apply(_sts([]), ns)  # a new one, same name
    fake.unready_pods = ["ml-dev-env-0", "ml-dev-env-1"]
    with pytest.raises(DeployTimeout) as e:
        wait_ready(local_cfg, 2, fake, 6, lambda _l: None)
    assert "an old refusal" not in str(e.value)
    assert "ml-dev-env-0: Running, not Ready yet" in str(e.value)


def test_the_wait_reads_only_warnings(local_cfg, fake_for) -> None:
    """Every events read of the wait and its timeout reasons asks for Warnings only (the
    kubectl client has the server pick them: test_oc_argv): thousands of Normal events
    (Scheduled, Pulled, Started per pod) were listed on every 2 s poll."""
    fake = fake_for(local_cfg)
    deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    ns = local_cfg.namespace
    for i in range(200):
        fake._event(ns, "Pod", "ml-dev-env-1", "Normal", "Pulled", f"pulled {i}")
    fake.delete("Pod", "ml-dev-env-1", ns)  # the StatefulSet makes a new one
    fake.unready_pods = ["ml-dev-env-1"]  # it runs, and is not Ready yet
    fake.pause(1)
    fake._event(ns, "Pod", "ml-dev-env-1", "Warning", "FailedMount", "no volume")
    asked: list[bool] = []
    inner = fake.events

    def events(namespace, kind=None, name=None, *, warnings=False):
        asked.append(warnings)
        return inner(namespace, kind, name, warnings=warnings)

    fake.events = events
    said: list[str] = []
    with pytest.raises(DeployTimeout) as e:
        wait_ready(local_cfg, 2, fake, 6, said.append)
    assert asked and all(asked)
    assert any("ml-dev-env-1=FailedMount" in s for s in said)
    assert "ml-dev-env-1: FailedMount: no volume" in str(e.value)


def test_polls_are_spaced_by_what_a_poll_costs(local_cfg, fake_for) -> None:
    """A poll that takes long (a big deployment's pod list) is followed by a longer
    pause, so the wait's own reads stay a bounded share of its time: every 2 s whatever
    a poll cost, a 512-pod wait read 11 MB about every 2.7 s."""
    from mlenv.cluster.deploy import POLL_S, POLL_SPACING

    fake = fake_for(local_cfg)
    deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    fake.delete("Pod", "ml-dev-env-1", local_cfg.namespace)
    fake.unready_pods = ["ml-dev-env-1"]
    inner_list, inner_pause = fake.list_many, fake.pause
    pauses: list[float] = []

    def slow_list(*args, **kwargs):
        fake.clock += 1.5  # the poll's read takes 1.5 s
        return inner_list(*args, **kwargs)

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        inner_pause(seconds)

    fake.list_many, fake.pause = slow_list, pause
    with pytest.raises(DeployTimeout):
        wait_ready(local_cfg, 2, fake, 30, lambda _m: None)
    assert pauses and all(p >= POLL_SPACING * 1.5 > POLL_S for p in pauses), pauses
