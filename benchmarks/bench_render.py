"""Render time for a 512-node config (target: validate + render under 1 s).

Builds a 512-node variant of clusters/large-h200.yaml (512 pinned nodes, 512 pods) in a
temporary directory, then measures, in one process:
  load      — YAML parse + schema + semantic rules (mlenv.config.load)
  render    — render_cluster (templates + StatefulSet/dev Pod)
  validate  — every manifest against the k8s 1.33 / OpenShift schemas
  serialise — render_files (one YAML per kind + kustomization)
first call ("cold": includes reading the schemas once) and the median of later calls,
and the wall time of a fresh `mlenv render FILE --mode rdma --out DIR` process.

Run: .venv/bin/python benchmarks/bench_render.py [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
NODES = 512


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _config(tmp: Path) -> Path:
    data = yaml.safe_load((REPO / "clusters" / "large-h200.yaml").read_text())
    data["cluster"]["name"] = "bench-512"
    data["nodes"]["gpu_nodes"] = [f"h200-node-{i:03d}" for i in range(1, NODES + 1)]
    data["gpus"]["default_nodes"] = NODES
    (tmp / "clusters").mkdir()
    path = tmp / "clusters" / "bench-512.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()

    from mlenv.config import load
    from mlenv.render.plan import render_cluster
    from mlenv.render.serialize import header, render_files
    from mlenv.render.validate import validate_manifests

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        path = _config(tmp)
        stages: dict[str, list[float]] = {
            k: [] for k in ("load", "render", "validate", "serialise", "total")
        }
        for _ in range(args.repeat + 1):
            t_load, cluster = _timed(lambda: load(path))
            t_render, manifests = _timed(
                functools.partial(render_cluster, cluster, "rdma", validate=False)
            )
            t_val, _ = _timed(functools.partial(validate_manifests, manifests))
            t_ser, files = _timed(
                functools.partial(render_files, manifests, header("clusters/bench-512.yaml", "-"))
            )
            for k, t in zip(
                stages,
                (t_load, t_render, t_val, t_ser, t_load + t_render + t_val + t_ser),
                strict=True,
            ):
                stages[k].append(t)
        sts = yaml.safe_load(files["statefulset.yaml"])
        assert sts["spec"]["replicas"] == NODES
        assert (
            len(
                sts["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
            )
            == NODES
        )

        procs = []
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run(
                [
                    str(REPO / ".venv" / "bin" / "mlenv"),
                    "render",
                    str(path),
                    "--mode",
                    "rdma",
                    "--out",
                    str(tmp / "out"),
                ],
                check=True,
                capture_output=True,
                cwd=tmp,
            )
            procs.append(time.perf_counter() - t)

    print(
        f"machine: {platform.machine()} {platform.python_implementation()} {platform.python_version()}"
    )
    print(f"{NODES}-node config, mode rdma, {args.repeat} warm repeats (seconds)")
    print(f"{'stage':<10} {'cold':>8} {'warm median':>12} {'warm min':>9}")
    for k, v in stages.items():
        print(f"{k:<10} {v[0]:>8.4f} {statistics.median(v[1:]):>12.4f} {min(v[1:]):>9.4f}")
    print(
        f"`mlenv render FILE --mode rdma --out DIR` fresh process: "
        f"median {statistics.median(procs):.3f} s, min {min(procs):.3f} s (3 runs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
