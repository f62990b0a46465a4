"""A tiny real distributed job for the launch tests: every rank all-reduces its rank over
gloo and rank 0 writes which host each rank ran on (JSON) to ``--out PATH``.

Under the DeepSpeed launcher a ``--local_rank=N`` flag comes first; it is ignored."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args, _ = ap.parse_known_args()
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    hosts: list[object] = [None] * world
    dist.all_gather_object(
        hosts,
        {
            "rank": rank,
            "host": socket.gethostname(),
            "local_rank": os.environ.get("LOCAL_RANK"),
            "ds_accel": os.environ.get("DS_ACCELERATOR"),
            "ns": os.environ.get("MLENV_NAMESPACE"),
            "hca": os.environ.get("NCCL_IB_HCA"),
        },
    )
    if rank == 0:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"world": world, "sum": t.item(), "ranks": hosts}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
