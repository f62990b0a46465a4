"""A job in upstream ml-dev-env's style for the.4 harness test: it requires
``--deepspeed --deepspeed_config FILE`` (argparse error without them, as upstream's
scripts) and rank 0 writes, per rank, the upstream env names it saw to ``--out``."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepspeed", action="store_true", required=True)
    ap.add_argument("--deepspeed_config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--local_rank", type=int, default=0)
    args = ap.parse_args()
    with open(args.deepspeed_config, encoding="utf-8") as f:
        json.load(f)
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    names = ("NODE_RANK", "POD_IP", "GPUS_PER_NODE", "LOCAL_WORLD_SIZE", "WORLD_SIZE")
    seen: list[object] = [None] * world
    dist.all_gather_object(
        seen,
        {
            "rank": rank,
            "host": socket.gethostname(),
            "config": args.deepspeed_config,
            **{n: os.environ.get(n) for n in names},
        },
    )
    if rank == 0:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"world": world, "ranks": seen}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
