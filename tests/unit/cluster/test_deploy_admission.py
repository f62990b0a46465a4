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
