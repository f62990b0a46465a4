"""``storage:`` and the pods' resources: storage class and claim names, sizes, ``shm_size``
and ``resources.requests``/``limits`` as Kubernetes quantities."""

from __future__ import annotations

from decimal import Decimal

from mlenv.config.rules.common import Checker, _get


def classes(c: Checker) -> None:
    """``storage.class_rwx``/``class_rwo``: StorageClass names ("" is the cluster's default)."""
    for key in ("class_rwx", "class_rwo"):
        sc = _get(c.data, "storage", key)
        if sc != "":  # "" = the cluster's default storage class
            c.subdomain(("storage", key), sc, "storage class")


def claims_and_sizes(c: Checker) -> None:
    """Existing claims' names, the volumes' sizes, ``shm_size`` and the containers' resources."""
    for key in ("workspace", "datasets"):
        claim = _get(c.data, "storage", "existing_claims", key)
        if claim is not None:
            c.subdomain(("storage", "existing_claims", key), claim, "claim name")
    for key in ("workspace_size", "datasets_size"):
        c.quantity(("storage", key))
    c.quantity(("shm_size",))
    resources(c)


def resources(c: Checker) -> None:
    got: dict[str, dict[str, Decimal | None]] = {}
    for kind in ("requests", "limits"):
        got[kind] = {r: c.quantity(("resources", kind, r)) for r in ("cpu", "memory")}
    for r in ("cpu", "memory"):
        req, lim = got["requests"][r], got["limits"][r]
        if req is not None and lim is not None and req > lim:
            c.err(
                ("resources", "requests", r),
                f"request {_get(c.data, 'resources', 'requests', r)!r} is above the limit {_get(c.data, 'resources', 'limits', r)!r}",
            )
