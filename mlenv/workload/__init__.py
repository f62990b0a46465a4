"""The worker object of a Kubernetes deployment, behind one interface (:class:`Workload`).

:func:`workload_for` is how every other layer gets it; the StatefulSet is the one kind
today. Adding a kind is one module here plus its entry in ``_KINDS``
(docs/architecture.md, "The Workload seam").
"""

from __future__ import annotations

import dataclasses

from mlenv.contract import APP
from mlenv.workload.base import Manifest, PodLike, Workload
from mlenv.workload.statefulset import StatefulSet

__all__ = [
    "DEFAULT",
    "WORKER_KINDS",
    "WORKLOADS",
    "Manifest",
    "PodLike",
    "Workload",
    "worker_of",
    "workload_for",
]

# config value → the workload class; every kind's object is named APP (one deployment
# per namespace)
_KINDS: dict[str, type[Workload]] = {StatefulSet.key: StatefulSet}
DEFAULT = StatefulSet.key
# one of each workload, for what must hold for any of them: the apply order, teardown's
# kinds, how the API server words a refused in-place update
WORKLOADS: tuple[Workload, ...] = tuple(cls(APP) for cls in _KINDS.values())
WORKER_KINDS: tuple[str, ...] = tuple(dict.fromkeys(k for w in WORKLOADS for k in w.kinds))


def worker_of(obj: Manifest) -> Workload | None:
    """The workload that renders objects like ``obj`` (by kind; its own name), or None
    when ``obj`` is no workload's object: for readers of a plan that have no config."""
    for wl in WORKLOADS:
        if obj.get("kind") in wl.kinds:
            return dataclasses.replace(wl, name=str((obj.get("metadata") or {}).get("name", APP)))
    return None


def workload_for(key: str = DEFAULT, name: str = APP) -> Workload:
    """The workload selected by ``key``, its object named ``name``.

    Raises ValueError for a key no workload has (the config schema allows only known ones).
    """
    try:
        return _KINDS[key](name)
    except KeyError:
        raise ValueError(f"unknown workload {key!r}: expected one of {sorted(_KINDS)}") from None
