"""``resources.dev_pod``: every dev Pod container has requests and limits (small by
default), so a namespace with a compute ResourceQuota admits the dev Pod."""

from __future__ import annotations

from mlenv.render.names import DEV_POD
from mlenv.render.plan import render_cluster

from .conftest import BASE, Check


def _dev_pod(cluster) -> dict:
    return next(
        m
        for m in render_cluster(cluster, "tcp", None)
        if m["kind"] == "Pod" and m["metadata"]["name"] == DEV_POD
    )


def test_every_dev_pod_container_has_small_default_resources(check: Check) -> None:
    cluster, diags = check(BASE + "dev_tools:\n  jupyter: true\n  auth: token\n")
    assert diags == [] and cluster is not None
    containers = _dev_pod(cluster)["spec"]["containers"]
    assert len(containers) >= 2
    for c in containers:
        assert c["resources"] == {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"cpu": "2", "memory": "4Gi"},
        }


def test_dev_pod_resources_are_set_per_key_and_null_unsets_one(check: Check) -> None:
    cluster, diags = check(
        BASE + "resources:\n  dev_pod:\n    requests: {memory: 1Gi}\n    limits: {cpu: null}\n"
    )
    assert diags == [] and cluster is not None
    (main, *_) = _dev_pod(cluster)["spec"]["containers"]
    assert main["resources"] == {
        "requests": {"cpu": "100m", "memory": "1Gi"},
        "limits": {"memory": "4Gi"},
    }


def test_an_unknown_dev_pod_key_is_refused(check: Check) -> None:
    _, diags = check(BASE + "resources:\n  dev_pod:\n    request: {cpu: 1}\n")
    assert [d.path for d in diags] == ["resources.dev_pod.request"]
