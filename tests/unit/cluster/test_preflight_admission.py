"""Preflight reads what admission will refuse before anything is applied: the
namespace's enforced Pod Security level against the pods, and its ResourceQuotas'
room against their requests."""

from __future__ import annotations

from typing import Any

import pytest

from mlenv.cluster.admission import pod_security_refusals, quantity, quota_refusals
from mlenv.cluster.deploy import DeployOptions, PreflightFailed, deploy


def _label(fake, ns: str, level: str) -> None:
    meta = fake.objects[f"Namespace||{ns}"]["metadata"]
    meta.setdefault("labels", {})["pod-security.kubernetes.io/enforce"] = level


def _quota(fake, ns: str, hard: dict[str, str], used: dict[str, str] | None = None) -> None:
    fake.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "q"},
            "spec": {"hard": hard},
        },
        ns,
    )
    fake.objects[f"ResourceQuota|{ns}|q"]["status"] = {"hard": hard, "used": used or {}}


def test_a_baseline_namespace_refuses_rdma_pods_before_applying(barcelona, fake_for) -> None:
    fake = fake_for(barcelona)
    _label(fake, barcelona.namespace, "baseline")
    said: list[str] = []
    # RDMA pods add IPC_LOCK: that is an RDMA prerequisite, so the TCP fallback is taken
    rep = deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake, say=said.append)
    assert rep.mode == "tcp"
    assert any(
        "enforces Pod Security 'baseline'" in r and "IPC_LOCK" in r for r in rep.fallback_reasons
    )
    fake = fake_for(barcelona)
    _label(fake, barcelona.namespace, "baseline")
    with pytest.raises(PreflightFailed, match="IPC_LOCK"):
        deploy(barcelona, DeployOptions(mode="rdma", no_fallback=True, timeout=60), fake)
    assert fake.list("StatefulSet", barcelona.namespace) == []


def test_the_rendered_tcp_pods_meet_the_restricted_level(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    _label(fake, local_cfg.namespace, "restricted")
    rep = deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert rep.ready == rep.nodes


def test_restricted_refuses_what_baseline_allows() -> None:
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    ns: dict[str, Any] = {"metadata": {"name": "n", "labels": labels}}
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    (line,) = pod_security_refusals(ns, [pod])
    assert "allowPrivilegeEscalation=false" in line and "runAsNonRoot" in line
    labels["pod-security.kubernetes.io/enforce"] = "baseline"
    assert pod_security_refusals(ns, [pod]) == []


def test_a_quota_without_room_refuses_before_applying(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    _quota(fake, local_cfg.namespace, {"pods": "2"}, {"pods": "1"})
    with pytest.raises(PreflightFailed) as e:
        deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert "ResourceQuota q: the pods need" in str(e.value) and "pods, 1 of 2 is free" in str(
        e.value
    )
    assert fake.list("StatefulSet", local_cfg.namespace) == []


def test_a_redeploy_counts_its_own_pods_as_room(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    first = deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    pods = len(fake.list("Pod", local_cfg.namespace))
    _quota(fake, local_cfg.namespace, {"pods": str(pods)}, {"pods": str(pods)})
    again = deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert again.ready == first.nodes


def test_a_compute_quota_needs_every_container_to_state_the_resource() -> None:
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    quota: dict[str, Any] = {
        "metadata": {"name": "q"},
        "status": {"hard": {"limits.cpu": "8"}, "used": {}},
    }
    (line,) = quota_refusals([quota], [pod], [])
    assert 'limits limits.cpu, which pod/p container "c" does not state' in line
    quota["status"]["hard"] = {"requests.cpu": "500m"}
    (line,) = quota_refusals([quota], [pod], [])
    assert "need 1 requests.cpu, 0.5 of 500m is free" in line
    assert quantity("2Gi") == 2**31 and quantity("250m") == 0.25
