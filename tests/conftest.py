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
import time
from collections.abc import Iterator
from typing import cast

import pytest

# mlenv's cache (configs remembered as valid) for every test and every mlenv process they
# start: one folder for the suite, never the developer's ~/.cache. Content-addressed, so
# workers and runs may share it.
os.environ["MLENV_CACHE_DIR"] = os.path.join(
    os.environ.get("TMPDIR", "/tmp"), f"mlenv-test-cache-{os.getuid()}"
)

# Where the parallel phase's time goes (seconds each on the 2-core sandbox): these start
# first, so the long ones do not begin when every other worker has run dry. Only an order:
# a stale entry costs minutes, never a result.
LONG_FIRST = (
    "tests/integration/test_pod_launch.py",
    "tests/integration/test_unreachable_client.py",
    "tests/integration/test_slurm.py",
    "tests/integration/test_hosts.py",
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


# -- the unit tier's one-second budget ------------------------------------------------
#
# A unit or CLI test is meant to take under a second (docs/architecture.md, "Tests by
# tier"). The run's output ends with the setups and calls that did not, each with the
# CPU its process and the children it waited for used, and the time its thread sat
# runnable in the kernel's run queue: one that took the time in CPU is slow on any
# machine; one that queued was slowed by a loaded machine; one that did neither waited
# (a sleep, a deadline, a child process, whose own queueing is not seen here). A
# report, not a failure: on a shared 2-core machine the wall clock of a 0.5 s test
# varies past 1 s. The failing rule is tests/unit/test_unit_tier.py (no mlenv CLI
# process in the unit tier).

UNIT_TIERS = ("tests/unit/", "tests/cli/")
UNIT_BUDGET_S = 1.0
_over_budget: list[tuple[float, float, float, str]] = []


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _queued_s() -> float:
    """Seconds this thread has been runnable but not running (Linux schedstat; else 0)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _timed(item: pytest.Item, phase: str) -> Iterator[None]:
    if not item.nodeid.startswith(UNIT_TIERS):
        yield
        return
    cpu, queued, t0 = _cpu_s(), _queued_s(), time.perf_counter()
    yield
    # user_properties travel with the report from an xdist worker to the controller
    item.user_properties.append(
        (f"{phase}_s", (time.perf_counter() - t0, _cpu_s() - cpu, _queued_s() - queued))
    )


# The setup is timed too: a module-scoped fixture's setup is paid in the first test that
# uses it, and it counts against the budget like a test (shared, but not free).
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item, "call")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when not in ("setup", "call") or not report.nodeid.startswith(UNIT_TIERS):
        return
    timed = dict(report.user_properties).get(f"{report.when}_s")
    if timed is None:
        return
    wall, cpu, queued = cast("tuple[float, float, float]", timed)
    if wall >= UNIT_BUDGET_S:
        _over_budget.append((wall, cpu, queued, f"{report.nodeid} ({report.when})"))


def over_budget_lines(slow: list[tuple[float, float, float, str]]) -> list[str]:
    """The report: the unit-tier setups and calls that took the budget or more, slowest
    first, each saying where its time went."""
    if not slow:
        return [f"unit tier: no test took {UNIT_BUDGET_S:g} s or more"]
    lines = [
        f"unit tier: {len(slow)} test(s) took {UNIT_BUDGET_S:g} s or more "
        '(docs/architecture.md, "Tests by tier"):'
    ]
    for wall, cpu, queued, nodeid in sorted(slow, reverse=True):
        if cpu >= UNIT_BUDGET_S or cpu >= wall / 2:
            why = "CPU"
        elif queued >= wall / 2:
            why = "queued: a loaded machine"
        else:
            why = "waiting"
        lines.append(
            f"  {wall:5.2f} s wall, {cpu:5.2f} s CPU, {queued:5.2f} s queued ({why})  {nodeid}"
        )
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    ran_unit = any(
        r.nodeid.startswith(UNIT_TIERS)
        for key in ("passed", "failed")
        for r in terminalreporter.stats.get(key, [])
    )
    if ran_unit:
        for line in over_budget_lines(_over_budget):
            terminalreporter.write_line(line)
