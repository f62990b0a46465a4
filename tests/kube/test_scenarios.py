"""Issue 22 §3: the shared scenario set (mlenv/testing/scenarios.py) on the real plane,
through OcCluster and the tier's kubectl: what the fake must match
(tests/unit/cluster/test_scenarios_fake.py runs the same scenarios on it)."""

from __future__ import annotations

import pytest
from _kubeenv import MISSING_IMAGE, Plane

from mlenv.cluster.oc import OcCluster
from mlenv.testing.scenarios import SCENARIOS, Stage

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py


def plane_stage(p: Plane, openshift: bool) -> Stage:
    ns = p.namespace("scn")  # the non-admin user is the project admin there
    return Stage("plane", OcCluster(p.kubectl, kubeconfig=str(p.kubeconfig())),
                 OcCluster(p.kubectl, kubeconfig=str(p.kubeconfig(user=True))), ns, MISSING_IMAGE,
                 openshift=openshift)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_real_server_does_what_the_scenario_says(scenario: str, openshift: Plane) -> None:
    SCENARIOS[scenario](plane_stage(openshift, True))


def test_the_plain_flavour_serves_no_openshift_kind(plain: Plane) -> None:
    SCENARIOS["openshift_kinds_exist_only_on_openshift"](plane_stage(plain, False))
