"""The kube tier's fixtures (tests/kube/_kubeenv.py says how the planes are started), and
its schedule: one xdist group per flavour, so that under ``pytest -n 2 --dist loadgroup``
(make test) each worker starts one plane and runs that plane's tests one after another.
A plane is started in a folder per flavour: two workers starting the same flavour would
rewrite each other's keys (seen in CI when the groups did not hold)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _kubeenv import Plane, Planes

FLAVORS = ("openshift", "plain")


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
            item.add_marker(pytest.mark.xdist_group(f"kube-{flavor_of(item)}"))


@pytest.fixture(scope="session")
def planes() -> Iterator[Planes]:
    ps = Planes()
    yield ps
    ps.stop()


@pytest.fixture(scope="session")
def openshift(planes: Planes) -> Plane:
    return planes.get("openshift")


@pytest.fixture(scope="session")
def plain(planes: Planes) -> Plane:
    return planes.get("plain")
