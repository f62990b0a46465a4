"""What one ``sync --watch`` poll costs: :func:`mlenv.cluster.sync.tree_mtimes` over F files.

Usage: python benchmarks/bench_watch_poll.py [--repeat N]

The watch loop stats every file once per interval (default 1 s) and syncs only when the
(mtime, size) map changed; this is the cost of noticing, paid while nothing changes.
Median of N polls per size, wall clock, warm page cache.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from mlenv.cluster.sync import tree_mtimes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    print(f"{'files':>7} {'median ms':>10} {'min ms':>8}")
    for n in (100, 1_000, 10_000, 30_000):
        with tempfile.TemporaryDirectory() as d:
            for i in range(n):
                sub = os.path.join(d, f"d{i // 500}")
                os.makedirs(sub, exist_ok=True)
                with open(os.path.join(sub, f"f{i}.py"), "w") as f:
                    f.write("x = 1\n")
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                got = tree_mtimes(d)
                times.append((time.perf_counter() - t0) * 1000)
            assert len(got) == n
            print(f"{n:>7} {statistics.median(times):>10.1f} {min(times):>8.1f}")


if __name__ == "__main__":
    main()
