"""Tier against a real cluster: runs only when KUBECONFIG points to a reachable one.

Read-only on purpose (who am I, server, server-side dry runs of one ConfigMap and of the
local plan, teardown's selector against an instance that does not exist), so it is safe
to run against any cluster a developer is logged in to. MLENV_LIVE_NAMESPACE names the
namespace to use (default: "default").
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from pathlib import Path

import pytest

from mlenv.cluster.api import CLUSTER_SCOPED_KINDS, NotFound, instance_selector
from mlenv.cluster.deploy import DeployReport, DryRunRejected, dry_run_plan, plan
from mlenv.cluster.teardown import TEARDOWN_KINDS, teardown
from mlenv.config import load
from mlenv.errors import MlenvError

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster-live")]
ROOT = Path(__file__).resolve().parents[2]
NS = os.environ.get("MLENV_LIVE_NAMESPACE", "default")


@pytest.fixture(scope="module")
def live():
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("KUBECONFIG is not set: no live cluster for this tier")
    if not (shutil.which("oc") or shutil.which("kubectl")):
        pytest.skip("neither oc nor kubectl on PATH")
    from mlenv.cluster.oc import OcCluster

    try:
        client = OcCluster()
        client.whoami()
    except MlenvError as e:
        pytest.skip(f"cluster from KUBECONFIG not reachable: {e}")
    return client


def local_in(ns: str, name: str = "local"):
    cfg = load("local", ROOT)
    return dataclasses.replace(
        cfg, cluster=dataclasses.replace(cfg.cluster, name=name, namespace=ns)
    )


def test_identity_and_server(live) -> None:
    assert live.server().startswith("https://")
    assert live.whoami()


def test_server_side_dry_run_of_a_configmap(live) -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "mlenv-live-probe", "namespace": NS},
        "data": {"a": "1"},
    }
    before = live.get("ConfigMap", "mlenv-live-probe", NS)
    expected = (
        "created"
        if before is None
        else "unchanged"
        if before.get("data") == cm["data"]
        else "configured"
    )
    assert live.apply(cm, NS, dry_run=True).action == expected
    assert live.get("ConfigMap", "mlenv-live-probe", NS) == before  # nothing changed


def test_server_side_dry_run_of_the_local_plan(live) -> None:
    cfg = local_in(NS)
    served = []
    for m in plan(cfg, "tcp", None):
        if m["kind"] in CLUSTER_SCOPED_KINDS:
            continue
        try:
            live.list(m["kind"], NS)
        except NotFound:  # e.g. Route on plain Kubernetes
            continue
        served.append(m)
    before = {
        (m["kind"], m["metadata"]["name"]): live.get(m["kind"], m["metadata"]["name"], NS)
        for m in served
    }
    rep = DeployReport("tcp", "tcp", 1, served)
    try:
        dry_run_plan(cfg, served, live, rep, lambda _m: None, report=True)
    except DryRunRejected as e:
        if all(type(err).__name__ == "Forbidden" for _, err in e.rejections):
            pytest.skip(f"the user may not create the plan's objects in {NS}: {e}")
        raise  # a 422 here means the API server rejects what we render
    assert rep.applied, "nothing was dry-run"
    for res in rep.applied:
        if before[(res.kind, res.name)] is None:
            assert res.action == "created", res
        else:
            assert res.action != "created", res
    after = {k: live.get(k[0], k[1], NS) for k in before}
    assert {k: v is None for k, v in after.items()} == {k: v is None for k, v in before.items()}


def test_teardown_selects_only_its_own_instance(live) -> None:
    name = f"mlenv-live-absent-{uuid.uuid4().hex[:8]}"
    sel = instance_selector(name)
    for kind in TEARDOWN_KINDS:
        try:
            assert live.list(kind, NS, sel) == [], kind
        except NotFound:
            continue
    rep = teardown(local_in(NS, name), live)  # an instance nobody deployed: deletes nothing
    assert rep.deleted == []
