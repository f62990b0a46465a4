"""How the CLI gets a :class:`~mlenv.cluster.api.ClusterClient`.

:func:`connect` builds the client for one command through a factory. The one production
code installs is :func:`oc_client`, the real ``oc``/``kubectl`` client; there is no
environment switch to a fake. Tests install their own factory: in process with
:func:`use_factory`, or around a whole ``mlenv`` process with
``python -m mlenv.testing.fake_mlenv STATE.json -- ARGS…`` (the fake cluster and that
entry point live in :mod:`mlenv.testing`, which the wheel does not ship).
``MLENV_EXEC_TIMEOUT`` (seconds) bounds each exec and rsync (default
:data:`~mlenv.cluster.api.DEFAULT_EXEC_TIMEOUT`). ``MLENV_API_TIMEOUT_S`` (or the CLI's
``--request-timeout``) bounds every other ``oc``/``kubectl`` call, the reachability probe
included (default :data:`DEFAULT_API_TIMEOUT`): one setting, so an API server that
answers ``/version`` and hangs elsewhere costs one timeout, not one per call.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from mlenv.cluster.api import DEFAULT_API_TIMEOUT, DEFAULT_EXEC_TIMEOUT, ClusterClient
from mlenv.errors import InputError

TIMEOUT_ENV = "MLENV_EXEC_TIMEOUT"
API_TIMEOUT_ENV = "MLENV_API_TIMEOUT_S"


@dataclass(frozen=True)
class ClientOptions:
    """What one command asks of its cluster client."""

    exec_timeout: float  # seconds per exec/rsync
    exec_timeout_set: bool  # MLENV_EXEC_TIMEOUT was given (else the client's own default)
    kubeconfig: str | None = None
    context: str | None = None
    api_timeout: float = DEFAULT_API_TIMEOUT  # seconds per API call (not exec/rsync)


# Opens the client for one command and closes it when the command ends.
ClusterFactory = Callable[[ClientOptions], AbstractContextManager[ClusterClient]]


def seconds_from_env(name: str, default: float, *, below: float | None = None) -> float:
    """Seconds from environment variable ``name``: ``default`` when unset or empty.

    Raises:
        InputError: not a number, not positive, or (with ``below``) not below it; NaN and
            infinities are refused too.
    """
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if below is None:
        if not 0 < value < math.inf:
            raise InputError(f"{name}={raw}: expected a positive number of seconds")
    elif not 0 < value < below:
        raise InputError(f"{name}={raw}: expected a number of seconds between 0 and {below:g}")
    return value


def exec_timeout() -> float:
    """The exec/rsync timeout from ``MLENV_EXEC_TIMEOUT`` (InputError when not a positive
    number of seconds)."""
    return seconds_from_env(TIMEOUT_ENV, DEFAULT_EXEC_TIMEOUT)


@contextmanager
def oc_client(opts: ClientOptions) -> Iterator[ClusterClient]:
    """The real client: :class:`~mlenv.cluster.oc.OcCluster` (``oc``, else ``kubectl``)."""
    from mlenv.cluster.oc import OcCluster

    yield OcCluster(
        exec_timeout=opts.exec_timeout,
        kubeconfig=opts.kubeconfig,
        context=opts.context,
        api_timeout=opts.api_timeout,
    )


_factory: ClusterFactory = oc_client


def set_factory(factory: ClusterFactory | None) -> ClusterFactory:
    """Make ``factory`` build every client from now on (None: the real one again);
    returns the factory it replaces."""
    global _factory
    previous, _factory = _factory, factory or oc_client
    return previous


@contextmanager
def use_factory(factory: ClusterFactory) -> Iterator[None]:
    """``with use_factory(f):`` every :func:`connect` inside builds its client with ``f``."""
    previous = set_factory(factory)
    try:
        yield
    finally:
        set_factory(previous)


@contextmanager
def connect(
    notice: Callable[[str], None] | None = None,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    api_timeout: float | None = None,
) -> Iterator[ClusterClient]:
    """Yield the cluster client for one command, built by the installed factory.

    ``notice`` receives, once, anything the user should know about the client chosen
    (the kubectl fallback when ``oc`` is missing). ``kubeconfig``/``context`` go to every
    ``oc``/``kubectl`` call; ``api_timeout`` (seconds, default ``MLENV_API_TIMEOUT_S``,
    else :data:`DEFAULT_API_TIMEOUT`) bounds each of them but exec and rsync.
    """
    limit = (
        api_timeout
        if api_timeout is not None
        else seconds_from_env(API_TIMEOUT_ENV, DEFAULT_API_TIMEOUT, below=86400)
    )
    opts = ClientOptions(
        exec_timeout(), bool(os.environ.get(TIMEOUT_ENV)), kubeconfig, context, limit
    )
    with _factory(opts) as client:
        said = str(getattr(client, "notice", "") or "")
        if said and notice is not None:
            notice(said)
        yield client
