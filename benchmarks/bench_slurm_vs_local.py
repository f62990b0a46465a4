"""Slurm submit→verdict wall time for 2 nodes x 2 CPU ranks vs the same suite
through `mlenv acceptance --local --nproc 4`.

Starts the real-Slurm harness of the integration tests (munged + slurmctld on this
machine, one slurmd in each of two network-namespace hosts), then alternates
`mlenv acceptance --cluster slurm-bench` (sbatch → torchrun per node → verdict → reports
copied back) and `mlenv acceptance --local --nproc 4` (DeepSpeed launcher, one host),
both with the harness's baseline and small sizes (tests/integration/harness/), N times
each (MLENV_BENCH_RUNS, default 3). Needs root, iproute2 and Slurm (make system-deps).
Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "tests" / "integration" / "harness"
sys.path.insert(0, str(REPO / "tests" / "integration"))

from harness import netns  # noqa: E402
from harness import slurm as slurm_harness  # noqa: E402

SUITE = [
    "--profile",
    "quick",
    "--baseline",
    str(HARNESS / "baseline_harness.yaml"),
    "--options",
    str(HARNESS / "acceptance_small.json"),
]


def _timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, str, int]:
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    dt = time.monotonic() - t0
    verdict = next((ln for ln in p.stdout.splitlines() if ln.startswith("verdict:")), "verdict: ?")
    if p.returncode != 0:
        print(p.stdout[-2000:], p.stderr[-2000:])
    return dt, verdict, p.returncode


def main() -> int:
    why = slurm_harness.unavailable_reason() or netns.unavailable_reason()
    if why:
        print(f"skipped: {why}")
        return 0
    runs = int(os.environ.get("MLENV_BENCH_RUNS", "3"))
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "clusters").mkdir()
        (root / "shared").mkdir()
        (root / "clusters" / "slurm-bench.yaml").write_text(
            "cluster: {name: slurm-bench, namespace: unused}\nplatform: slurm\n"
            f"slurm: {{partition: debug, time_limit: '00:10:00', exclusive: false, gpus_flag: none, "
            f"shared_dir: {root / 'shared'}, python: {sys.executable}}}\n"
            "network: {tcp: {interface_exclude: lo}}\ngpus: {per_node: 2, type: cpu, default_nodes: 2}\n"
        )
        with slurm_harness.on_netns_hosts(str(root)) as sl:
            env = sl.env({"MLENV_ROOT": str(root), "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"})
            env.setdefault(
                "TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/mlenv/torch_extensions")
            )
            times: dict[str, list[float]] = {"slurm": [], "local": []}
            for i in range(runs):
                dt, v, rc = _timed(
                    [
                        sys.executable,
                        "-m",
                        "mlenv",
                        "acceptance",
                        "--cluster",
                        "slurm-bench",
                        *SUITE,
                    ],
                    env,
                    str(root),
                )
                print(f"slurm 2x2 run {i + 1}: {dt:.1f} s, {v}, exit {rc}")
                times["slurm"].append(dt)
                dt, v, rc = _timed(
                    [
                        sys.executable,
                        "-m",
                        "mlenv",
                        "acceptance",
                        "--local",
                        "--nproc",
                        "4",
                        "--report-dir",
                        str(root / f"local{i}"),
                        *SUITE,
                    ],
                    env,
                    str(root),
                )
                print(f"local --nproc 4 run {i + 1}: {dt:.1f} s, {v}, exit {rc}")
                times["local"].append(dt)
            for k, ts in times.items():
                print(
                    f"{k}: median {statistics.median(ts):.1f} s (min {min(ts):.1f}, max {max(ts):.1f}) over {runs} runs"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
