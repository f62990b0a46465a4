"""Fault injection for the acceptance suite's own tests (never active unless asked).

``MLENV_FAULT`` holds ``;``-separated specs ``kind:key=value,key=value``, e.g.
``kill:rank=1,check=collectives`` or ``slow:rank=1,factor=4`` or ``corrupt:rank=1``.
Kinds in use: ``kill`` (the process exits hard before the check), ``hang`` (it sleeps
forever before the check), ``slow`` (the check's timed work is stretched by
``factor``), ``slow_stack`` (the training check's DeepSpeed step alone is stretched by
``factor``, its plain PyTorch reference is not: a slow software stack on a healthy
device), ``corrupt`` (the compute result is perturbed). ``rank`` is the global
rank, ``node`` the node rank, ``check`` a check-name prefix; omitted keys match all.
Checks and the runner ask through :meth:`mlenv.acceptance.core.base.RunContext.fault`, which
fills in this rank and node. Stdlib only.
"""

from __future__ import annotations

import os

KINDS = ("kill", "hang", "slow", "slow_stack", "corrupt")


def _parse(spec: str) -> list[tuple[str, dict[str, str]]]:
    out: list[tuple[str, dict[str, str]]] = []
    for part in spec.split(";"):
        part = part.strip()
        if not part:
            continue
        kind, _, rest = part.partition(":")
        kv: dict[str, str] = {}
        for item in rest.split(","):
            if "=" in item:
                k, v = item.split("=", 1)
                kv[k.strip()] = v.strip()
        out.append((kind.strip(), kv))
    return out


def active(kind: str, *, rank: int, node_rank: int = 0, check: str = "") -> dict[str, str] | None:
    """The parameters of an injected fault of ``kind`` matching this rank/check, or None.

    Raises ValueError for a ``kind`` not in :data:`KINDS` (a typo in a check would
    otherwise test nothing, silently).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    spec = os.environ.get("MLENV_FAULT", "")
    if not spec:
        return None
    for k, kv in _parse(spec):
        if k != kind:
            continue
        if "rank" in kv and int(kv["rank"]) != rank:
            continue
        if "node" in kv and int(kv["node"]) != node_rank:
            continue
        if "check" in kv and not check.startswith(kv["check"]):
            continue
        return kv
    return None
