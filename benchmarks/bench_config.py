"""Config validation time for a 512-node config, and `mlenv --help` start-up time.

Targets: validate + render of a 512-node config under 1 s; `mlenv --help`
under 0.3 s (heavy imports stay inside functions).

Measures, in this process:
  validate          — mlenv.config.load of a generated 512-node config (512 gpu_nodes):
                      first call ("cold": imports jsonschema, reads the schema) and the
                      median of later calls
  validate+render   — load + mlenv.render.plan.render_cluster(mode=rdma, 512 pods), when
                      the render package is present
and in fresh processes:
  mlenv --help      — wall time of `python -m mlenv.cli.app --help`, best and median of N,
                      also with TYPER_USE_RICH=0 (Typer's help without rich formatting)
  mlenv validate    — wall time of `mlenv validate FILE` on the 512-node config

Run: .venv/bin/python benchmarks/bench_config.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODES = 512


def write_config(tmp: Path) -> Path:
    """A 512-node RDMA config: 512 pinned nodes, 8 devices, default_nodes 512."""
    nodes = "".join(f"    - gpu-node-{i:03d}.big.example.com\n" for i in range(NODES))
    text = (
        "cluster:\n  name: big\n  namespace: ml-dev-env\n"
        f"nodes:\n  gpu_nodes:\n{nodes}"
        "network:\n  rdma:\n    enabled: true\n"
        "    devices: mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7\n"
        "    interfaces: net1,net2,net3,net4,net5,net6,net7,net8\n"
        "    resources: {rdma/rdma_shared_device_a: 1}\n"
        "    networks: [rail-1, rail-2, rail-3, rail-4, rail-5, rail-6, rail-7, rail-8]\n"
        f"gpus:\n  per_node: 8\n  type: H200\n  default_nodes: {NODES}\n"
        "resources:\n  requests: {cpu: '96', memory: 1536Gi}\n  limits: {memory: 1800Gi}\n"
    )
    path = tmp / "big.yaml"
    path.write_text(text)
    return path


def wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds one subprocess takes (it must succeed)."""
    t = time.perf_counter()
    subprocess.run(
        cmd, check=True, capture_output=True, cwd=REPO, env={**os.environ, **(env or {})}
    )
    return time.perf_counter() - t


def main() -> None:
    """Run the measurements and print one line per figure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        cfg = write_config(Path(d))
        print(
            f"machine: {platform.machine()} {platform.system()}, Python {platform.python_version()}"
        )
        print(f"config: {NODES} gpu_nodes, {cfg.stat().st_size} bytes")

        t = time.perf_counter()
        from mlenv.config import load

        cluster = load(cfg)
        cold = time.perf_counter() - t
        warm = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            load(cfg)
            warm.append(time.perf_counter() - t)
        print(
            f"validate: cold {cold * 1e3:.1f} ms (incl. imports), warm median {statistics.median(warm) * 1e3:.1f} ms"
        )

        try:
            from mlenv.render.plan import render_cluster
        except ImportError:
            print("validate+render: skipped (mlenv.render.plan.render_cluster not available)")
        else:
            t = time.perf_counter()
            render_cluster(cluster, "rdma", NODES)
            cold_r = time.perf_counter() - t
            both = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                c = load(cfg)
                render_cluster(c, "rdma", NODES)
                both.append(time.perf_counter() - t)
            print(
                f"validate+render (rdma, {NODES} pods): first render {cold_r * 1e3:.1f} ms, "
                f"warm median {statistics.median(both) * 1e3:.1f} ms"
            )

        helps = [
            wall([sys.executable, "-m", "mlenv.cli.app", "--help"]) for _ in range(args.repeat)
        ]
        print(
            f"mlenv --help: best {min(helps) * 1e3:.0f} ms, median {statistics.median(helps) * 1e3:.0f} ms (n={len(helps)})"
        )
        # Same without rich help formatting (what `rich_markup_mode=None` on the app does).
        plain = [
            wall([sys.executable, "-m", "mlenv.cli.app", "--help"], {"TYPER_USE_RICH": "0"})
            for _ in range(args.repeat)
        ]
        print(
            f"mlenv --help without rich: best {min(plain) * 1e3:.0f} ms, median {statistics.median(plain) * 1e3:.0f} ms (n={len(plain)})"
        )
        runs = [
            wall([sys.executable, "-m", "mlenv.cli.app", "validate", str(cfg)]) for _ in range(5)
        ]
        print(
            f"mlenv validate <512-node file> (fresh process): best {min(runs) * 1e3:.0f} ms, median {statistics.median(runs) * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()
