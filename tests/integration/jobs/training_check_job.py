"""Run the training check on this rank outside the suite's runner (test harness).

Launched by torchrun or the DeepSpeed launcher (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR/PORT in the environment). Starts the gloo process group the way the runner
does, builds a RunContext, runs ``training.deepspeed`` and writes this rank's results as
JSON to ``<out>/rank<r>.json``. Options come as ``key=value`` arguments.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from datetime import timedelta
from pathlib import Path


def main(argv: list[str]) -> int:
    import torch.distributed as dist

    from mlenv.acceptance.checks.training import TrainingCheck
    from mlenv.acceptance.core.base import RunContext

    args = [a for a in argv if not a.startswith("--local_rank")]
    out = Path(args[0])
    opts: dict[str, object] = {}
    for kv in args[1:]:
        k, v = kv.split("=", 1)
        opts[k] = json.loads(v) if v[:1].isdigit() or v[:1] == "-" else v
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("LOCAL_SIZE", str(world))))
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    ctx = RunContext(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        node_rank=0,
        nnodes=1,
        host=f"{socket.gethostname()}-r{rank}",
        backend="gloo",
        device="cpu",
        options={"training": opts},
        deadline_s=120.0,
    )
    check = TrainingCheck()
    check.setup(ctx)
    try:
        results = check.run(ctx)
    finally:
        check.teardown(ctx)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps([r.to_dict() for r in results], indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
