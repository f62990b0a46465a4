"""The shipped checks; importing this package registers every one of them.

Order of execution is decided by the entry point (environment, compute, memory,
collectives, fabric, training), not by import order.
"""

from __future__ import annotations

from mlenv.acceptance.checks import (
    collectives,
    compute,
    environment,
    fabric,
    localize,
    memory,
    training,
)

__all__ = ["collectives", "compute", "environment", "fabric", "localize", "memory", "training"]
