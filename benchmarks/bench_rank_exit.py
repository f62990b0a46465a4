"""What a rank's exit costs after its last line: Python's own teardown against ``_leave``.

A process that imported torch and DeepSpeed (as every acceptance rank does) prints a
timestamp as its last line, then leaves either as before (``sys.exit``: the interpreter
frees every module's objects and unloads the libraries) or through
``mlenv.acceptance.__main__._leave`` (atexit handlers, flushes, ``os._exit``). The figure is
the time from that line to the process's end, seen by the parent. N rounds (default 5,
MLENV_BENCH_RUNS), the two ways alternating; figures go to docs/benchmarks.md
("make test wall time").
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

CHILD = """
import sys, time
import torch, deepspeed  # what a rank has loaded
from mlenv.acceptance.__main__ import _leave
print(time.time(), flush=True)
if sys.argv[1] == "leave":
    _leave(0)
sys.exit(0)
"""


def once(way: str) -> float:
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, way],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu")},
    )
    assert p.stdout is not None
    last = float(p.stdout.readline())
    p.wait()
    end = time.time()
    if p.returncode != 0:
        raise SystemExit(f"the {way} child exited {p.returncode}")
    return end - last


def main() -> int:
    runs = int(os.environ.get("MLENV_BENCH_RUNS", "5"))
    got: dict[str, list[float]] = {"teardown": [], "leave": []}
    for i in range(runs):
        for way in ("teardown", "leave") if i % 2 == 0 else ("leave", "teardown"):
            got[way].append(once(way))
    for way, xs in got.items():
        print(
            f"{way:8s}: last line to exit, median {statistics.median(xs) * 1000:.0f} ms "
            f"(min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f}) over {runs}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
