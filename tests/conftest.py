"""Suite-wide hooks: the order tests start in, and the ``serial`` rule.

``make test`` runs the suite in two phases (docs/architecture.md, "Tests by tier"):

1. everything not marked ``serial`` on pytest-xdist workers (``--dist loadgroup``: a test is
   a unit of work, except modules whose module-scoped fixture (a Slurm cluster, a netns
   harness) is built once and carry ``pytest.mark.xdist_group``);
2. the ``serial`` tests, alone on the machine: they judge CPU ranks against each other
   (outliers, stragglers, regressions) or against a wall-clock deadline, so a neighbour's
   load would decide their outcome.
"""

from __future__ import annotations

import os

import pytest

# Where the parallel phase's time goes (seconds each on the 2-core sandbox): these start
# first, so the long ones do not begin when every other worker has run dry. Only an order:
# a stale entry costs minutes, never a result.
LONG_FIRST = (
    "tests/integration/test_pod_launch.py",
    "tests/integration/test_slurm.py",
    "tests/integration/test_hosts.py",
    "tests/integration/test_localize.py",
    "tests/integration/test_pod_workspace.py",
)
TIERS = ("tests/integration/", "tests/cli/", "tests/unit/")
# Every test carries its tier's marker, from its folder, so `-m "not integration"` or
# `-m unit` selects a tier without each module having to remember to say so.
TIER_MARKERS = {
    "tests/unit/": "unit",
    "tests/cli/": "cli",
    "tests/integration/": "integration",
    "tests/gpu/": "gpu",
    "tests/cluster_live/": "cluster",
    "tests/kube/": "kube",
}


def _start_rank(nodeid: str) -> tuple[int, int]:
    path = nodeid.split("::", 1)[0]
    tier = next((i for i, t in enumerate(TIERS) if path.startswith(t)), len(TIERS))
    long = LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)
    return tier, long


def _group_suffix(item: pytest.Item) -> str:
    """``@<group>`` for an ``xdist_group`` test, as pytest-xdist's ``--dist loadgroup`` marks it."""
    names = sorted(
        {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
    )
    return f"@{'_'.join(names)}" if names else ""


def _keep_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Make ``--dist loadgroup`` group again under pytest 9.2.

    xdist (3.8) groups a test by appending ``@<group>`` to its node id on each worker, by
    setting ``item._nodeid``; pytest 9.2 keeps the id in ``item._id`` (a ``NodeId``) and
    ignores ``_nodeid``, so every group was silently split over the workers: a module's
    expensive module-scoped fixture (a Slurm cluster, the netns hosts, the checks' worlds,
    ``test_bench_gpu``'s CPU path) was built once per worker that drew one of its tests
    (CI: ``test_bench_gpu``'s 117 s fixture twice). The same suffix, set where this pytest
    reads it; nothing when xdist already set it or this pytest has no ``_id``."""
    if not config.getoption("loadgroup", default=False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # an older pytest: xdist's own marking works there
        return
    for item in items:
        suffix = _group_suffix(item)
        if (
            suffix
            and "@" not in item.nodeid.rsplit("]", 1)[-1]
            and isinstance(getattr(item, "_id", None), NodeId)
        ):
            item._id = NodeId.parse(item.nodeid + suffix)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _keep_groups(config, items)
    # A stable sort: tests of one module keep their order (and their fixtures' reuse).
    items.sort(key=lambda item: _start_rank(item.nodeid))
    for item in items:
        tier = next(
            (m for folder, m in TIER_MARKERS.items() if item.nodeid.startswith(folder)), None
        )
        if tier:
            item.add_marker(tier)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        alone = pytest.mark.skip(
            reason="serial: judged against wall time or other ranks, so it runs "
            "alone: pytest -m serial (make test's second phase)"
        )
        for item in items:
            if item.get_closest_marker("serial"):
                item.add_marker(alone)
