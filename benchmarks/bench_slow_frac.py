"""fabric.localize: misses and false alarms by ``slow_frac``, node count, noise and slowness.

Runs :func:`mlenv.acceptance.evidence.localize.localize`, the very code the check runs,
on :class:`~mlenv.acceptance.evidence.localize.SimulatedFabric` (healthy pairs at 10 GB/s,
each figure varied uniformly within ``±noise``, a different draw per trial). For each
node count, noise and ``slow_frac``:

- **named**: trials (one slow node, at a fraction of healthy, placed across the fabric)
  in which that node was named a slow node;
- **as link**: trials in which it was named only as one end of a slow link (the right
  place, the wrong action);
- **false (node)**: healthy nodes named slow, over all healthy nodes of every trial,
  with and without a slow node in the fabric; **false (link)**: healthy links named slow,
  per trial; **false (trial)**: trials naming any healthy node or link;
- **rounds**: per localization, mean and most, and of them the confirmation rounds.

    python benchmarks/bench_slow_frac.py [--trials 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlenv.acceptance.evidence.localize import SimulatedFabric, localize  # noqa: E402

SIZES = (64, 512, 2048)
NOISES = (0.05, 0.10, 0.20)
FACTORS = (0.50, 0.60, 0.75)  # the slow node's share of a healthy node's bandwidth
SLOW_FRACS = (0.10, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50)


def trial(n: int, noise: float, factor: float | None, sf: float, seed: int) -> dict[str, int]:
    """One localization: was the slow node (if any) named, and how many healthy nodes were."""
    slow = (seed * 7919 + n // 3) % n
    fab = SimulatedFabric(
        slow_nodes={slow: factor} if factor is not None else {}, noise=noise, seed=seed
    )
    loc = localize(n, fab, slow_frac=sf)
    named_nodes = set(loc.slow_nodes)
    link_ends = {x for p in loc.slow_links for x in p}
    healthy_named = len(named_nodes - {slow}) if factor is not None else len(named_nodes)
    wrong_links = [p for p in loc.slow_links if factor is None or slow not in p]
    return {
        "named": int(factor is not None and slow in named_nodes),
        "as_link": int(factor is not None and slow not in named_nodes and slow in link_ends),
        "healthy_named": healthy_named,
        "healthy": n - (1 if factor is not None else 0),
        "false_trial": int(healthy_named > 0 or bool(wrong_links)),
        "wrong_links": len(wrong_links),
        "rounds": len(loc.rounds),
        "confirms": sum(r.confirm for r in loc.rounds),
    }


def table(
    trials: int,
    sizes: tuple[int, ...] = SIZES,
    noises: tuple[float, ...] = NOISES,
    slow_fracs: tuple[float, ...] = SLOW_FRACS,
) -> list[dict[str, Any]]:
    """One row per node count, noise and slow_frac."""
    rows = []
    for n in sizes:
        for noise in noises:
            for sf in slow_fracs:
                row: dict[str, Any] = {"nodes": n, "noise": noise, "slow_frac": sf}
                healthy_named = healthy = false_trials = runs = 0
                rounds: list[int] = []
                confirms: list[int] = []
                wrong_links = 0
                for factor in (*FACTORS, None):
                    got = [trial(n, noise, factor, sf, s) for s in range(trials)]
                    rounds += [g["rounds"] for g in got]
                    confirms += [g["confirms"] for g in got]
                    wrong_links += sum(g["wrong_links"] for g in got)
                    healthy_named += sum(g["healthy_named"] for g in got)
                    healthy += sum(g["healthy"] for g in got)
                    false_trials += sum(g["false_trial"] for g in got)
                    runs += len(got)
                    if factor is not None:
                        row[f"named_{factor:.2f}"] = sum(g["named"] for g in got) / trials
                        row[f"as_link_{factor:.2f}"] = sum(g["as_link"] for g in got) / trials
                row["false_node"] = healthy_named / healthy
                row["false_trial"] = false_trials / runs
                row["wrong_links_per_trial"] = wrong_links / runs
                row["rounds_mean"] = sum(rounds) / len(rounds)
                row["rounds_max"] = max(rounds)
                row["confirms_mean"] = sum(confirms) / len(confirms)
                rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40, help="trials per cell (default 40)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="node counts")
    ap.add_argument("--noises", default=",".join(map(str, NOISES)), help="noise fractions")
    ap.add_argument("--slow-fracs", default=",".join(map(str, SLOW_FRACS)), help="slow_frac values")
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = table(
        a.trials,
        tuple(int(x) for x in a.sizes.split(",")),
        tuple(float(x) for x in a.noises.split(",")),
        tuple(float(x) for x in a.slow_fracs.split(",")),
    )
    cols = [f"named_{f:.2f}" for f in FACTORS]
    print(
        "| nodes | noise | slow_frac | "
        + " | ".join(f"named at {int(f * 100)} %" for f in FACTORS)
        + " | false (node) | false (link) | false (trial) | rounds (of them confirmations), mean / max |"
    )
    print("|---" * (7 + len(FACTORS)) + "|")
    for r in rows:
        print(
            f"| {r['nodes']} | {int(r['noise'] * 100)} % | {r['slow_frac']:.2f} | "
            + " | ".join(
                f"{100 * r[c]:.0f} %"
                + (
                    f" ({100 * r['as_link_' + c[6:]]:.0f} % as link)"
                    if r["as_link_" + c[6:]]
                    else ""
                )
                for c in cols
            )
            + f" | {100 * r['false_node']:.2f} % | {r['wrong_links_per_trial']:.2f}"
            + f" | {100 * r['false_trial']:.0f} %"
            + f" | {r['rounds_mean']:.1f} ({r['confirms_mean']:.1f}) / {r['rounds_max']} |"
        )
    print(f"\n{a.trials} trials per cell, {time.perf_counter() - t0:.0f} s")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
