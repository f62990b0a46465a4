"""the shared scenario set (mlenv/testing/scenarios.py) on the fake cluster.

The same scenarios run on the real control plane in tests/kube/test_scenarios.py; where
the two disagreed, the real plane was right and the fake was fixed (RBAC's escalation
check on RoleBindings, quantities stored in canonical form)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from mlenv.cluster.api import ClusterClient
from mlenv.testing.fakecluster import FakeCluster
from mlenv.testing.scenarios import NON_ADMIN_DENIED, SCENARIOS, Stage

MISSING_IMAGE = "registry.invalid/mlenv-tests/never-built:missing"  # the kube tier's name too


class _AsUser:
    """The fake has one identity: this view of it acts as the project admin, with the
    non-admin's `denied` pairs in force for each call."""

    def __init__(self, fake: FakeCluster, denied: tuple[str, ...]) -> None:
        self._fake, self._denied = fake, denied

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fake, name)
        if not callable(attr):
            return attr

        def as_user(*args: Any, **kwargs: Any) -> Any:
            saved, self._fake.denied = self._fake.denied, list(self._denied)
            try:
                return attr(*args, **kwargs)
            finally:
                self._fake.denied = saved

        return as_user


def fake_stage(openshift: bool) -> Stage:
    fake = FakeCluster(openshift=openshift)
    fake.add_namespace("scenario")
    for i in range(2):
        fake.add_node(f"cpu-node-{i}", gpus=0)
    fake.add_storage_class("standard", default=True)
    fake.image_pull_failures = [MISSING_IMAGE]
    return Stage(
        "fake",
        fake,
        cast(ClusterClient, _AsUser(fake, NON_ADMIN_DENIED)),
        "scenario",
        MISSING_IMAGE,
        openshift=openshift,
    )


@pytest.mark.parametrize("flavor", ["openshift", "plain"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_fake_does_what_the_real_server_does(scenario: str, flavor: str) -> None:
    SCENARIOS[scenario](fake_stage(flavor == "openshift"))
