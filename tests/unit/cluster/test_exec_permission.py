"""The exec permission is the ``exec`` subresource of pods. ``auth can-i
create pods/exec`` asks (in real kubectl) for a *pod named exec*; the question is
``auth can-i create pods --subresource=exec``, and the fake reads both as the API server
does."""

from __future__ import annotations

from mlenv.cluster.deploy import plan
from mlenv.cluster.oc import OcCluster
from mlenv.cluster.preflight import run_preflight


def test_preflight_asks_for_exec_with_the_subresource_flag(fake_bin) -> None:
    fake_bin.install("kubectl")
    fake_bin.respond([{"match": ["auth", "can-i"], "stdout": "yes\n"}])
    OcCluster().can_i("create", "pods", "team-a", subresource="exec")
    (call,) = fake_bin.calls()
    assert "--subresource=exec" in call
    assert call[-2:] == ["create", "pods"]  # not `pods/exec`: a pod named exec


def test_fake_reads_resource_slash_name_as_a_named_object(fake_for, local_cfg) -> None:
    fake = fake_for(local_cfg, rdma=False)
    fake.denied.append("create pods/exec")
    assert fake.can_i("create", "pods/exec", local_cfg.namespace)  # a pod named exec
    assert not fake.can_i("create", "pods", local_cfg.namespace, subresource="exec")


def test_preflight_names_a_missing_exec_permission(fake_for, local_cfg) -> None:
    fake = fake_for(local_cfg, rdma=False)
    fake.denied.append("create pods/exec")
    manifests = plan(local_cfg, "tcp", None)
    rep = run_preflight(local_cfg, "tcp", 1, manifests, fake)
    assert any("may not create pods/exec" in p.message for p in rep.blocking), rep.problems


def test_no_namespace_read_and_no_project_api_is_not_a_doubled_error(fake_for, local_cfg) -> None:
    """On plain Kubernetes a user who may not get namespaces got `error: error: the server
    doesn't have a resource type "Project"`: preflight asked OpenShift's Project API as the
    fallback and let its refusal through. Now the checks inside the namespace decide."""
    fake = fake_for(local_cfg, rdma=False)
    fake.openshift = False
    fake.denied.append("get namespaces")
    manifests = plan(local_cfg, "tcp", None)
    rep = run_preflight(local_cfg, "tcp", 1, manifests, fake)
    assert not any("does not exist" in p.message for p in rep.blocking), rep.problems


def test_an_error_quoted_from_the_client_is_said_once() -> None:
    from mlenv.cli._common import error_line

    assert error_line('error: the server doesn\'t have a resource type "Project"') == (
        'error: the server doesn\'t have a resource type "Project"'
    )
    assert error_line("no such pod") == "error: no such pod"
