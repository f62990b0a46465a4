"""How the CLI gets a :class:`~mlenv.cluster.api.Cluster`.

``MLENV_FAKE_CLUSTER=<state.json>`` selects the in-memory fake, loaded from that file
and saved back when the command ends, so CLI tests (and demos without a cluster) can
run several commands against one fake. Otherwise the real ``oc``/``kubectl`` client.
``MLENV_EXEC_TIMEOUT`` (seconds) bounds each exec and rsync (default
:data:`~mlenv.cluster.api.DEFAULT_EXEC_TIMEOUT`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mlenv.cluster.api import DEFAULT_EXEC_TIMEOUT, Cluster
from mlenv.errors import InputError

FAKE_ENV = "MLENV_FAKE_CLUSTER"
TIMEOUT_ENV = "MLENV_EXEC_TIMEOUT"


def exec_timeout() -> float:
    """The exec/rsync timeout from ``MLENV_EXEC_TIMEOUT`` (InputError when not a positive
    number of seconds)."""
    raw = os.environ.get(TIMEOUT_ENV, "")
    if not raw:
        return DEFAULT_EXEC_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise InputError(f"{TIMEOUT_ENV}={raw}: expected a positive number of seconds")
    return value


@contextmanager
def connect(notice: Callable[[str], None] | None = None, *, kubeconfig: str | None = None,
            context: str | None = None) -> Iterator[Cluster]:
    """Yield the cluster client for one command (the fake's state is saved on exit).

    ``notice`` receives, once, anything the user should know about the client chosen
    (the kubectl fallback when ``oc`` is missing). ``kubeconfig``/``context`` go to every
    ``oc``/``kubectl`` call (the fake has neither).
    """
    limit = exec_timeout()
    path = os.environ.get(FAKE_ENV)
    if path:
        from mlenv.cluster.fake import FakeCluster

        if not os.path.isfile(path):
            raise InputError(f"{FAKE_ENV}={path}: no such fake-cluster state file")
        fake = FakeCluster.load(path)
        if os.environ.get(TIMEOUT_ENV):
            fake.exec_timeout = limit
        try:
            yield fake
        finally:
            fake.save(path)
        return
    from mlenv.cluster.oc import OcCluster

    client = OcCluster(exec_timeout=limit, kubeconfig=kubeconfig, context=context)
    if client.notice and notice is not None:
        notice(client.notice)
    yield client
