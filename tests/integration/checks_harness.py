"""A small real-process world for the measurement checks: N spawned ranks, gloo or NCCL.

Each rank initialises ``torch.distributed`` (gloo, timeout = deadline) the way the
runner does, builds a RunContext (``nnodes`` fake nodes named ``node<i>``, ranks laid
out node-major like torchrun and the DeepSpeed launcher), runs the named checks and
writes its results (or the exception) to ``<out>/rank<r>.json``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlenv.acceptance.run.world import free_port


@dataclass
class WorldSpec:
    """What to run: ranks, fake nodes, checks, options, environment, deadline."""

    nprocs: int
    checks: list[str]
    nnodes: int = 1
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    deadline_s: float = 60.0
    hang_ranks: tuple[int, ...] = ()  # these ranks sleep instead of running the checks
    backend: str = "gloo"  # "nccl": one GPU per rank, cuda:<rank>


def _worker(rank: int, spec: WorldSpec, port: int, out: str) -> None:
    os.environ.update(spec.env)
    import time
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from mlenv.acceptance.core.base import RunContext, registry
    from mlenv.acceptance.core.registry import load_shipped

    # Every shipped check, through the registry: importing three check modules
    # by hand left fabric.localize, which has its own module now, unregistered (KeyError).
    load_shipped()

    torch.set_num_threads(1)  # two cores shared by every rank
    device = "cpu"
    if spec.backend == "nccl":
        from mlenv.acceptance.checks.collectives import apply_nccl_deadline_env

        apply_nccl_deadline_env(os.environ)
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(
        spec.backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=spec.nprocs,
        timeout=timedelta(seconds=spec.deadline_s),
    )
    per_node = spec.nprocs // spec.nnodes
    node = rank // per_node
    ctx = RunContext(
        rank=rank,
        world_size=spec.nprocs,
        local_rank=rank % per_node,
        local_world_size=per_node,
        node_rank=node,
        nnodes=spec.nnodes,
        host=f"node{node}",
        backend=spec.backend,
        device=device,
        options=spec.options,
        deadline_s=spec.deadline_s,
    )
    record: dict[str, Any] = {"results": [], "error": None, "elapsed_s": 0.0}
    t0 = time.monotonic()
    if rank in spec.hang_ranks:
        time.sleep(spec.deadline_s * 1.5 + 1.0)  # outlives the peers' timeout
    else:
        try:
            for name in spec.checks:
                check = registry()[name]()
                check.setup(ctx)
                try:
                    record["results"] += [r.to_dict() for r in check.run(ctx)]
                finally:
                    check.teardown(ctx)
        except Exception as e:  # the test inspects it; the runner would make it ERROR
            record["error"] = f"{type(e).__name__}: {e}"
    record["elapsed_s"] = time.monotonic() - t0
    Path(out, f"rank{rank}.json").write_text(json.dumps(record))
    if record["error"] is None and not spec.hang_ranks:
        dist.destroy_process_group()


def run_world(spec: WorldSpec, out: Path, timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Run ``spec`` in ``nprocs`` spawned processes; each rank's record, in rank order.

    Raises AssertionError when a rank does not finish within ``timeout_s`` (it is
    killed first) or finishes without writing its record.
    """
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [
        ctx.Process(target=_worker, args=(r, spec, port, str(out))) for r in range(spec.nprocs)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout_s)
    stuck = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in stuck:
        procs[r].kill()
        procs[r].join()
    records = []
    for r in range(spec.nprocs):
        f = out / f"rank{r}.json"
        if not f.exists():
            raise AssertionError(
                f"rank {r} wrote no record (stuck: {stuck}, exit {procs[r].exitcode})"
            )
        records.append(json.loads(f.read_text()))
    return records
