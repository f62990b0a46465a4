"""The shipped checks; importing this package registers every one of them.

Order of execution is decided by the entry point (environment, compute, memory,
collectives, training), not by import order.
"""

from __future__ import annotations

import importlib

_MODULES = ("environment", "compute", "memory", "collectives", "training")
MISSING: list[str] = []  # check modules not present in this build (reported, never silent)

for _m in _MODULES:
    try:
        importlib.import_module(f"{__name__}.{_m}")
    except ModuleNotFoundError as _e:
        # Only a missing check module is tolerated; a missing dependency inside one is a bug.
        if _e.name != f"{__name__}.{_m}":
            raise
        MISSING.append(_m)
