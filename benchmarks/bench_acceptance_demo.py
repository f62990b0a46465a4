"""Wall time of the demo's acceptance run: `mlenv acceptance --local --nproc 2 --profile quick`.

Runs it N times (default 3, MLENV_BENCH_RUNS) with caches warm and prints each wall time
and the median; figures go to docs/benchmarks.md ("Acceptance suite (CPU, gloo)").
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time


def main() -> int:
    """Run the suite repeatedly; exit non-zero when a run does not PASS."""
    runs = int(os.environ.get("MLENV_BENCH_RUNS", "3"))
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    env.setdefault("TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/mlenv/torch_extensions"))
    times: list[float] = []
    for i in range(runs):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.monotonic()
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "mlenv",
                    "acceptance",
                    "--local",
                    "--nproc",
                    "2",
                    "--profile",
                    "quick",
                    "--report-dir",
                    d,
                ],
                capture_output=True,
                text=True,
                env=env,
            )
            dt = time.monotonic() - t0
        verdict = next(
            (ln for ln in p.stdout.splitlines() if ln.startswith("verdict:")), "verdict: ?"
        )
        print(f"run {i + 1}: {dt:.1f} s, {verdict}, exit {p.returncode}")
        if p.returncode != 0:
            print(p.stdout[-3000:], p.stderr[-3000:])
            return 1
        times.append(dt)
    print(
        f"median wall time over {runs} runs: {statistics.median(times):.1f} s (min {min(times):.1f}, max {max(times):.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
