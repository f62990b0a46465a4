"""Deploy plan time for the 64-node example, and sync fan-out (files × pods), on the fake.

Usage: python benchmarks/bench_deploy.py [--repeat N]

Times (median of N runs, wall clock):
- plan: render + validate the 64-node config (clusters/large-h200.yaml), both modes;
- deploy: plan + preflight + ssh keys + server-side dry run + apply + wait against a
  fresh fake of 64 nodes
  (the fake's controllers run in virtual time, so this is mlenv's own cost);
- sync: copy a generated tree of F files to P pods (per-pod volumes) and verify the
  checksum in every pod, for a grid of F × P.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from mlenv.cluster.deploy import DeployOptions, deploy, plan
from mlenv.cluster.sync import sync
from mlenv.config import load
from mlenv.config.model import Cluster
from mlenv.testing.fakecluster import FakeCluster

ROOT = Path(__file__).resolve().parents[1]


def fake_for(cfg: Cluster, nodes: int) -> FakeCluster:
    names = list(cfg.gpu_nodes) or [f"gpu-{i}" for i in range(nodes)]
    fake = FakeCluster.typical(
        cfg.namespace,
        names,
        gpus=cfg.gpus.per_node,
        resources={r.name: r.count for r in cfg.rdma.resources},
        networks=cfg.rdma.networks,
    )
    for sc in {cfg.storage.class_rwx, cfg.storage.class_rwo} - {""}:
        fake.add_storage_class(sc)
    if cfg.cluster.api:
        fake.server_url = (
            cfg.cluster.api if "://" in cfg.cluster.api else f"https://{cfg.cluster.api}"
        )
    return fake


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def make_tree(root: Path, files: int) -> None:
    for i in range(files):
        d = root / f"d{i % 16}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.py").write_bytes(f"# file {i}\n".encode() * 64)  # ~0.6 KiB each


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cfg = load("large-h200", ROOT)
    nodes = cfg.gpus.default_nodes
    print(
        f"config: {cfg.name}, {nodes} nodes x {cfg.gpus.per_node} GPUs, storage {cfg.storage.mode}"
    )
    for mode in ("rdma", "tcp"):
        t = timed(lambda m=mode: plan(cfg, m, None), args.repeat)
        print(f"plan {mode}: {len(plan(cfg, mode, None))} objects, {t * 1e3:.1f} ms")
    t = timed(
        lambda: deploy(cfg, DeployOptions(mode="rdma", timeout=600), fake_for(cfg, nodes)),
        args.repeat,
    )
    print(
        f"deploy rdma (plan+preflight+keys+dry run+apply+wait, fake, {nodes} pods): {t * 1e3:.0f} ms"
    )
    fake = fake_for(cfg, nodes)
    deploy(cfg, DeployOptions(mode="rdma", timeout=600), fake)
    t = timed(lambda: deploy(cfg, DeployOptions(mode="rdma", timeout=600), fake), args.repeat)
    print(f"re-deploy unchanged: {t * 1e3:.0f} ms")
    per_pod = dataclasses.replace(
        cfg, storage=dataclasses.replace(cfg.storage, mode="volumeClaimTemplates")
    )
    print("sync fan-out (per-pod volumes: copy + checksum in every pod), median ms:")
    print(f"{'files':>6} " + " ".join(f"{p:>7}p" for p in (2, 8, 64)))
    for files in (10, 100, 1000):
        row = []
        with tempfile.TemporaryDirectory() as tmp:
            make_tree(Path(tmp), files)
            for pods in (2, 8, 64):
                c = dataclasses.replace(
                    per_pod, gpu_nodes=per_pod.gpu_nodes[:pods] if per_pod.gpu_nodes else ()
                )
                f = fake_for(c, pods)
                deploy(c, DeployOptions(mode="rdma", nodes=pods, timeout=600), f)
                row.append(timed(lambda c=c, f=f, tmp=tmp: sync(c, f, tmp), args.repeat))
        print(f"{files:>6} " + " ".join(f"{t * 1e3:>8.0f}" for t in row))


if __name__ == "__main__":
    main()
