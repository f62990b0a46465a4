"""fabric.localize: rounds needed for 4 to 512 nodes, and the real 4-host run's wall time.

Simulated plans run :func:`mlenv.acceptance.evidence.localize.localize`, the very code the check
runs, with :class:`~mlenv.acceptance.evidence.localize.SimulatedFabric` (a fake fabric: healthy
pairs at 10 GB/s, a slow node or link at a fraction of that, optional noise) as the
``measure`` function. For each node count and scenario the table gives the rounds
taken (the worst over every placement of the fault for N <= 64, over 64 spread
placements above), the pairs measured in all, and whether every fault was named.

``--harness`` (root, iproute2) also runs the real check on the four-host netns harness
(tests/integration/harness): no shaping, one host at 20 mbit/s (tbf), one path at 20
mbit/s (htb + u32) in a round-1 pair and one not, each ``--repeats`` times, and reports rounds, the check's own time
and the whole suite's wall time (four ``python -m mlenv.acceptance`` processes).

    python benchmarks/bench_localize.py [--harness] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlenv.acceptance.evidence.localize import (  # noqa: E402 - after the path set-up
    FOUND,
    NOBODY,
    SimulatedFabric,
    default_max_rounds,
    localize,
)
from mlenv.acceptance.evidence.localize import norm as L_norm  # noqa: E402

SIZES = (4, 8, 64, 512)


def _placements(n: int) -> list[int]:
    return list(range(n)) if n <= 64 else sorted({(i * n) // 64 for i in range(64)} | {n - 1})


def _scenarios(
    n: int,
) -> dict[str, Callable[[int], tuple[SimulatedFabric, set[int], set[tuple[int, int]]]]]:
    """name -> (placement -> fabric, the slow nodes, the slow links)."""
    k = max(2, n // 16)
    return {
        "nothing slow": lambda p: (SimulatedFabric(), set(), set()),
        "nothing slow, 20 % noise": lambda p: (SimulatedFabric(noise=0.2), set(), set()),
        "one slow node": lambda p: (SimulatedFabric(slow_nodes={p: 0.05}), {p}, set()),
        "one slow node, 20 % noise": lambda p: (
            SimulatedFabric(slow_nodes={p: 0.1}, noise=0.2),
            {p},
            set(),
        ),
        "one slow link in a round-1 pair": lambda p: (
            (
                SimulatedFabric(slow_links={(p - p % 2, p - p % 2 + 1): 0.1}),
                set(),
                {(p - p % 2, p - p % 2 + 1)},
            )
            if p - p % 2 + 1 < n
            else (SimulatedFabric(), set(), set())
        ),
        "one slow link between ring neighbours (p, p+1)": lambda p: (
            SimulatedFabric(slow_links={L_norm(p, (p + 1) % n): 0.1}),
            set(),
            {L_norm(p, (p + 1) % n)},
        ),
        "one slow link off the ring (p, p+2)": lambda p: (
            SimulatedFabric(slow_links={L_norm(p, (p + 2) % n): 0.1}),
            set(),
            {L_norm(p, (p + 2) % n)},
        ),
        "two slow nodes in one round-1 pair": lambda p: (
            (
                SimulatedFabric(slow_nodes={p - p % 2: 0.05, p - p % 2 + 1: 0.05}),
                {p - p % 2, p - p % 2 + 1},
                set(),
            )
            if p - p % 2 + 1 < n
            else (SimulatedFabric(), set(), set())
        ),
        f"{k} slow nodes spread": lambda p: (
            SimulatedFabric(slow_nodes={(p + i * (n // k)) % n: 0.05 for i in range(k)}),
            {(p + i * (n // k)) % n for i in range(k)},
            set(),
        ),
    }


def simulate() -> list[dict[str, Any]]:
    """Worst-case rounds per node count and scenario."""
    rows: list[dict[str, Any]] = []
    for n in SIZES:
        for name, make in _scenarios(n).items():
            if n < 16 and "spread" in name and n < 8:
                continue
            worst, pairs, right, t0 = 0, 0, 0, time.perf_counter()
            places = _placements(n)
            for p in places:
                fab, nodes, links = make(p)
                loc = localize(n, fab)
                worst = max(worst, len(loc.rounds))
                pairs = max(pairs, len(loc.figures))
                want = FOUND if nodes or links else NOBODY
                right += (
                    loc.outcome == want
                    and set(loc.slow_nodes) == nodes
                    and set(loc.slow_links) == links
                )
            rows.append(
                {
                    "nodes": n,
                    "scenario": name,
                    "rounds_worst": worst,
                    "round_budget": default_max_rounds(n),
                    "pairs_measured_max": pairs,
                    "all_pairs": n * (n - 1) // 2,
                    "named_right": right,
                    "placements": len(places),
                    "plan_ms": 1e3 * (time.perf_counter() - t0) / len(places),
                }
            )
    return rows


def harness(repeats: int) -> list[dict[str, Any]]:
    """The real check on four netns hosts; rounds, the check's time and the suite's wall time."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from harness import Cluster, unavailable_reason
    from harness.netns import run_bounded

    why = unavailable_reason()
    if why:
        raise SystemExit(f"--harness: {why}")
    opts = {
        "fabric.localize": {"bytes": 262144, "iters": 5, "warmup": 1, "slow_frac": 0.8}
    }  # as the test
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        c = Cluster(4, d)
        c.setup()
        try:
            optf = Path(d) / "options.json"
            optf.write_text(json.dumps(opts))
            cases: list[tuple[str, Callable[[], None]]] = [
                ("no shaping", lambda: None),
                ("host 2 at 20 mbit/s (tbf)", lambda: c.shape_pod(2, "20mbit")),
                ("path 0->1 at 20 mbit/s (htb+u32)", lambda: c.shape_path(0, 1, "20mbit")),
                (
                    "path 2->1 at 20 mbit/s (htb+u32), not a round-1 pair",
                    lambda: c.shape_path(2, 1, "20mbit"),
                ),
            ]
            for name, shape in cases:
                walls, checks, rounds, named = [], [], [], set()
                for k in range(repeats):
                    shape()
                    report = Path(d) / f"r-{len(rows)}-{k}"
                    t0 = time.monotonic()
                    procs = []
                    for i in range(4):
                        env = c.env(
                            i,
                            {
                                "RANK": str(i),
                                "WORLD_SIZE": "4",
                                "LOCAL_RANK": "0",
                                "LOCAL_WORLD_SIZE": "1",
                                "NODE_RANK": str(i),
                                "PYTHONPATH": str(ROOT),
                                "MPLBACKEND": "Agg",
                            },
                        )
                        procs.append(
                            c.popen(
                                i,
                                [
                                    sys.executable,
                                    "-m",
                                    "mlenv.acceptance",
                                    "--localize",
                                    "--checks",
                                    "fabric.localize",
                                    "--report-dir",
                                    str(report),
                                    "--options",
                                    str(optf),
                                    "--deadline",
                                    "60",
                                ],
                                env,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                start_new_session=True,
                            )
                        )
                    for p in procs:
                        run_bounded(p, 120)
                    walls.append(time.monotonic() - t0)
                    for i in range(4):
                        c.unshape(i)
                    doc = json.loads((report / "results.json").read_text())
                    entry = next(x for x in doc["checks"] if x["name"] == "fabric.localize")
                    checks.append(entry["duration_s"])
                    rounds.append(len(entry["details"]["rounds"]))
                    named |= {f"node {x}" for x in entry["details"]["slow_nodes"]}
                    named |= {f"link {a}<->{b}" for a, b in entry["details"]["slow_links"]}
                rows.append(
                    {
                        "case": name,
                        "repeats": repeats,
                        "rounds": sorted(set(rounds)),
                        "check_s_median": statistics.median(checks),
                        "suite_wall_s_median": statistics.median(walls),
                        "named": sorted(named) or ["nobody"],
                    }
                )
        finally:
            c.teardown()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--harness", action="store_true", help="also run the real check on the 4-host netns harness"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sim = simulate()
    print(
        "| nodes | scenario | rounds (worst) | budget | pairs measured (max) | all pairs | named right |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in sim:
        print(
            f"| {r['nodes']} | {r['scenario']} | {r['rounds_worst']} | {r['round_budget']} | "
            f"{r['pairs_measured_max']} | {r['all_pairs']} | {r['named_right']}/{r['placements']} |"
        )
    out: dict[str, Any] = {"simulated": sim, "cpu_count": os.cpu_count()}
    if a.harness:
        real = harness(a.repeats)
        print("\n| 4 hosts | rounds | check (s, median) | suite wall (s, median) | named |")
        print("|---|---|---:|---:|---|")
        for r in real:
            print(
                f"| {r['case']} | {', '.join(map(str, r['rounds']))} | {r['check_s_median']:.2f} | "
                f"{r['suite_wall_s_median']:.1f} | {', '.join(r['named'])} |"
            )
        out["harness"] = real
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
