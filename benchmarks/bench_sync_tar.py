"""The kubectl path of sync: file names to tar on stdin, a tar stream into a "pod".

Usage: python benchmarks/bench_sync_tar.py [--repeat N]

A stand-in ``kubectl`` on PATH runs what the pod would (a real GNU tar extracting into a
folder that plays /workspace), so the figure is the local tar + pipe + remote tar cost for
F small files, F up to 30,000 (the old argv form failed there: argument list too long).
Median of N runs, wall clock.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mlenv.cluster.oc import OcCluster

POD_KUBECTL = r"""
import os, subprocess, sys
argv = sys.argv[1:]
root = os.environ["FAKE_POD_ROOT"]
cmd = [a.replace("/workspace", root + "/workspace") for a in argv[argv.index("--") + 1:]]
sys.exit(subprocess.call(cmd, cwd=root))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "bin").mkdir()
        exe = t / "bin" / "kubectl"
        exe.write_text(f"#!{sys.executable}\n{POD_KUBECTL}")
        exe.chmod(0o755)
        os.environ["PATH"] = f"{t / 'bin'}:/usr/bin:/bin"
        os.environ.pop("KUBECONFIG", None)
        print(" files   median s   files/s")
        for n in (1_000, 10_000, 30_000):
            ws = t / f"ws{n}"
            for i in range(n):
                d = ws / f"d{i // 200:03d}"
                d.mkdir(parents=True, exist_ok=True)
                (d / f"f{i:05d}.py").write_bytes(b"x = 1\n")
            times = []
            for r in range(args.repeat):
                root = t / f"pod{n}-{r}"
                (root / "workspace").mkdir(parents=True)
                os.environ["FAKE_POD_ROOT"] = str(root)
                start = time.perf_counter()
                OcCluster().rsync(str(ws), "ml-dev-env-0", "ns", "/workspace")
                times.append(time.perf_counter() - start)
            med = statistics.median(times)
            print(f"{n:6d}   {med:8.2f}   {n / med:7.0f}")


if __name__ == "__main__":
    main()
