"""The kube tier's fixtures (tests/kube/_kubeenv.py says how the planes are started)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _kubeenv import Plane, Planes


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
