"""How many CPU threads a CPU rank may use (stdlib only).

``os.cpu_count()`` is the machine's count, not the job's: a Slurm step or a pod pinned to
a cpuset (``taskset``, Kubernetes' static CPU manager) may run on 4 of 128 cores, and 128
threads per rank there make every rank crawl. The cores this process may run on are
``os.sched_getaffinity(0)``, and no more than the process's cgroup CPU limit (a pod's
``resources.limits.cpu``: the affinity mask there is the whole node's); an
``OMP_NUM_THREADS`` the user (or the launcher, or the Slurm script) set is theirs and wins.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping


def usable_cpus(cgroup_root: str = "/sys/fs/cgroup", own_cgroups: str = "/proc/self/cgroup") -> int:
    """The CPUs this process may use: its affinity mask (the machine's count where unknown),
    and no more than its cgroup's CPU limit (:func:`cgroup_cpu_limit`)."""
    try:
        cpus = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        cpus = max(1, os.cpu_count() or 1)
    limit = cgroup_cpu_limit(cgroup_root, own_cgroups)
    return min(cpus, limit) if limit else cpus


def _quota(folder: str, v2: bool) -> float | None:
    """CPUs allowed by one cgroup folder's CFS quota (None: unlimited or unreadable)."""
    try:
        if v2:
            with open(os.path.join(folder, "cpu.max"), encoding="ascii") as f:
                quota, _, period = f.read().strip().partition(" ")
        else:
            with open(os.path.join(folder, "cpu.cfs_quota_us"), encoding="ascii") as f:
                quota = f.read().strip()
            with open(os.path.join(folder, "cpu.cfs_period_us"), encoding="ascii") as f:
                period = f.read().strip()
        q, per = int(quota), int(period or "100000")
    except (OSError, ValueError):  # "max" (v2), a missing file
        return None
    return q / per if q > 0 and per > 0 else None  # v1 says -1 for unlimited


def cgroup_cpu_limit(
    cgroup_root: str = "/sys/fs/cgroup", own_cgroups: str = "/proc/self/cgroup"
) -> int | None:
    """The CPU limit of this process's cgroup and its parents, rounded up: a pod's
    ``resources.limits.cpu`` (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``). None when
    there is none. Without it a CPU rank in a pod limited to 2 CPUs on a 64-core node took
    32-64 threads (the affinity mask is the node's) and the kernel throttled them all."""
    try:
        with open(own_cgroups, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        v2 = hid == "0" and controllers == ""
        if not v2 and "cpu" not in controllers.split(","):
            continue
        bases = (
            [cgroup_root]
            if v2
            else [os.path.join(cgroup_root, d) for d in (controllers, "cpu,cpuacct", "cpu")]
        )
        parts = [x for x in path.split("/") if x and x != ".."]
        for base in dict.fromkeys(bases):
            for depth in range(len(parts), -1, -1):  # the own cgroup, then each parent
                q = _quota(os.path.join(base, *parts[:depth]), v2)
                if q is not None:
                    found.append(q)
    return max(1, math.ceil(min(found))) if found else None


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
