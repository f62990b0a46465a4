"""The fake as a :data:`~mlenv.cluster.connect.ClusterFactory`: state loaded from a JSON
file for each command and saved back when it ends, so a test can run several commands
(in process or as ``mlenv`` subprocesses) against one fake and inspect it between them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from mlenv.cluster.api import ClusterClient
from mlenv.cluster.connect import ClientOptions, ClusterFactory
from mlenv.errors import InputError
from mlenv.testing.fakecluster import FakeCluster


def state_file(path: str | os.PathLike[str]) -> ClusterFactory:
    """A factory opening the fake saved in ``path`` (written by :meth:`FakeCluster.save`);
    the state is saved back when the command ends, also when it fails."""
    where = os.fspath(path)

    @contextmanager
    def factory(opts: ClientOptions) -> Iterator[ClusterClient]:
        if not os.path.isfile(where):
            raise InputError(f"{where}: no such fake-cluster state file")
        fake = FakeCluster.load(where)
        if opts.exec_timeout_set:
            fake.exec_timeout = opts.exec_timeout
        try:
            yield fake
        finally:
            fake.save(where)

    return factory
