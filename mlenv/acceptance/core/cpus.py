"""How many CPU threads a CPU rank may use (stdlib only).

``os.cpu_count()`` is the machine's count, not the job's: a Slurm step or a pod pinned to
a cpuset (``taskset``, Kubernetes' static CPU manager) may run on 4 of 128 cores, and 128
threads per rank there make every rank crawl. The cores this process may run on are
``os.sched_getaffinity(0)``; an ``OMP_NUM_THREADS`` the user (or the launcher, or the
Slurm script) set is theirs and wins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; the machine's count where unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def explicit_threads(env: Mapping[str, str]) -> int | None:
    """``OMP_NUM_THREADS`` when it is set to a positive integer, else None."""
    raw = env.get("OMP_NUM_THREADS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def threads_per_rank(local_ranks: int, env: Mapping[str, str] | None = None) -> int:
    """The threads each of ``local_ranks`` CPU ranks on this node gets: the explicit
    ``OMP_NUM_THREADS`` if any, else the usable CPUs split between them (at least 1)."""
    given = explicit_threads(os.environ if env is None else env)
    if given is not None:
        return given
    return max(1, usable_cpus() // max(1, local_ranks))
