"""Tier against a real cluster: runs only when KUBECONFIG points to a reachable one.

Read-only on purpose (who am I, server, namespaces visible, server-side dry run of the
local plan), so it is safe to run against any cluster a developer is logged in to.
"""

from __future__ import annotations

import os
import shutil

import pytest

from mlenv.errors import MlenvError

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def live():  # type: ignore[no-untyped-def]
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


def test_identity_and_server(live) -> None:  # type: ignore[no-untyped-def]
    assert live.server().startswith("https://")
    assert live.whoami()


def test_server_side_dry_run_of_a_configmap(live) -> None:  # type: ignore[no-untyped-def]
    ns = os.environ.get("MLENV_LIVE_NAMESPACE", "default")
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "mlenv-live-probe", "namespace": ns}, "data": {"a": "1"}}
    res = live.apply(cm, ns, dry_run=True)
    assert res.action in ("created", "configured", "unchanged")
    assert live.get("ConfigMap", "mlenv-live-probe", ns) is None or res.action != "created"
