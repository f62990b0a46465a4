"""The kube tier's fixtures (tests/kube/_kubeenv.py says how the planes are started), and
its schedule: one xdist group per plane, so that under ``pytest -n 3 --dist loadgroup``
(make test) each worker starts one plane and runs that plane's tests one after another.
A plane is started in a folder of its own: two workers starting the same plane would
rewrite each other's keys (seen in CI when the groups did not hold).

The planes are one per flavour, and a second plain one for the tests in SECOND_PLAIN:
the plain flavour's tests took twice the OpenShift one's time once the tier's kubelet
made every deploy wait for real readiness probes (the ten-round deploy/teardown loop
alone 454 s), so the phase waited on one worker while the other two cores' worth idled."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from _kubeenv import Plane, Planes

FLAVORS = ("openshift", "plain")
# the plain flavour's tests that run on its second plane: whole modules, or one test
# function (its plain variants) by "module::function"
SECOND_PLAIN = {
    "test_time_admission.py",
    "test_scale_smoke.py",
    "test_flows.py::test_launch_runs_deepspeed_over_ssh_across_the_pods_to_a_verdict_and_names_a_peer_it_cannot_reach",
}


def slot_of(item: pytest.Item) -> str:
    """Which plane of its flavour a test runs against ("" the first, "2" the second)."""
    if flavor_of(item) != "plain":
        return ""
    function = getattr(item, "originalname", item.name)
    named = {item.path.name, f"{item.path.name}::{function}"}
    return "2" if named & SECOND_PLAIN else ""


def flavor_of(item: pytest.Item) -> str:
    """The plane a test runs against: its ``flavor`` parameter, else the plane fixture it
    asks for (the OpenShift flavour for a test that needs none)."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("flavor") in FLAVORS:
        return str(callspec.params["flavor"])
    asked = [f for f in FLAVORS if f in getattr(item, "fixturenames", ())]
    if len(asked) > 1:
        raise pytest.UsageError(
            f"{item.nodeid}: a kube test runs against one plane ({' or '.join(FLAVORS)}), "
            "so that each worker starts one"
        )
    return asked[0] if asked else FLAVORS[0]


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py's hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith("tests/kube/"):
            slot = slot_of(item)
            group = f"kube-{flavor_of(item)}" + (f"-{slot}" if slot else "")
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def planes() -> Iterator[Planes]:
    ps = Planes()
    yield ps
    ps.stop()


def _slot(request: pytest.FixtureRequest) -> str:
    # one process running every group (no xdist: make kube-test) needs no second plane
    return slot_of(request.node) if os.environ.get("PYTEST_XDIST_WORKER") else ""


@pytest.fixture
def openshift(planes: Planes, request: pytest.FixtureRequest) -> Plane:
    return planes.get("openshift", _slot(request))


@pytest.fixture
def plain(planes: Planes, request: pytest.FixtureRequest) -> Plane:
    return planes.get("plain", _slot(request))
