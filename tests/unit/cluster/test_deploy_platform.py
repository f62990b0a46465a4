"""deploy and teardown against the platform they are told: plain Kubernetes needs an
image reference and is never read for OpenShift kinds; an OpenShift config against a
plain server is one line; a namespace ``edit`` user tears down what it deployed."""

from __future__ import annotations

import dataclasses

import pytest

from mlenv.cluster.deploy import DeployOptions, PreflightFailed, deploy
from mlenv.cluster.keys import SECRET_NAME
from mlenv.cluster.teardown import teardown


def _kube(cfg, ref: str = "registry.example/ml-dev-env:1"):
    return dataclasses.replace(
        cfg, platform="kubernetes", image=dataclasses.replace(cfg.image, ref=ref)
    )


def test_an_openshift_config_on_a_plain_server_is_one_line_exit_2(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    fake.openshift = False
    with pytest.raises(PreflightFailed) as e:
        deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert e.value.exit_code == 2
    assert "this server is not OpenShift (no route/security.openshift.io APIs)" in str(e.value)
    assert "platform: kubernetes" in str(e.value)
    assert len(e.value.problems) == 1
    assert fake.list("StatefulSet", local_cfg.namespace) == []
    assert fake.list("Secret", local_cfg.namespace) == []


def test_plain_kubernetes_without_an_image_reference_is_refused_before_applying(
    local_cfg, fake_for
) -> None:
    fake = fake_for(local_cfg)
    fake.openshift = False
    with pytest.raises(PreflightFailed) as e:
        deploy(_kube(local_cfg, ref=""), DeployOptions(mode="tcp", timeout=60), fake)
    assert e.value.exit_code == 2 and len(e.value.problems) == 1
    assert "platform: kubernetes needs image.ref" in str(e.value)
    assert fake.list("Secret", local_cfg.namespace) == []


def test_plain_kubernetes_deploy_and_teardown_read_no_openshift_kind(local_cfg, fake_for) -> None:
    cfg = _kube(local_cfg)
    fake = fake_for(cfg)
    fake.openshift = False
    rep = deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert rep.ready == rep.nodes
    down = teardown(cfg, fake)
    assert down.absent_kinds == []  # nothing was asked of a kind this server cannot serve
    assert f"secret/{SECRET_NAME}" in down.deleted
    assert fake.list("StatefulSet", cfg.namespace) == []


def test_a_namespace_edit_user_tears_down_what_it_deployed(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    # the edit role: no RBAC objects, and no cluster-scoped ones
    fake.denied = [
        f"{verb} {res}"
        for verb in ("get", "list", "create", "patch", "delete")
        for res in ("rolebindings", "roles", "clusterroles", "securitycontextconstraints")
    ]
    rep = teardown(local_cfg, fake)
    assert f"secret/{SECRET_NAME}" in rep.deleted
    assert not rep.left, rep.left  # a TCP deployment made no ClusterRole nor SCC to warn of
    assert fake.list("Secret", local_cfg.namespace) == []
    assert fake.list("StatefulSet", local_cfg.namespace) == []


def test_a_terminating_namespace_is_refused_in_one_line(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    fake.objects[f"Namespace||{local_cfg.namespace}"]["metadata"]["deletionTimestamp"] = "t=0"
    with pytest.raises(PreflightFailed) as e:
        deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert len(e.value.problems) == 1
    assert f"namespace {local_cfg.namespace!r} is Terminating" in str(e.value)
    assert fake.list("Secret", local_cfg.namespace) == []
