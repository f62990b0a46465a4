"""How the CLI gets a :class:`~mlenv.cluster.api.Cluster`.

``MLENV_FAKE_CLUSTER=<state.json>`` selects the in-memory fake, loaded from that file
and saved back when the command ends, so CLI tests (and demos without a cluster) can
run several commands against one fake. Otherwise the real ``oc``/``kubectl`` client.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from mlenv.cluster.api import Cluster
from mlenv.errors import InputError

FAKE_ENV = "MLENV_FAKE_CLUSTER"


@contextmanager
def connect() -> Iterator[Cluster]:
    """Yield the cluster client for one command (the fake's state is saved on exit)."""
    path = os.environ.get(FAKE_ENV)
    if path:
        from mlenv.cluster.fake import FakeCluster

        if not os.path.isfile(path):
            raise InputError(f"{FAKE_ENV}={path}: no such fake-cluster state file")
        fake = FakeCluster.load(path)
        try:
            yield fake
        finally:
            fake.save(path)
        return
    from mlenv.cluster.oc import OcCluster

    yield OcCluster()
