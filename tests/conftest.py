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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
