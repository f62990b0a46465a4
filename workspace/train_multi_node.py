"""Example multi-node DeepSpeed training script (copy it and make it yours).

Run on pod-0:  ./launch_deepspeed.sh train_multi_node.py --model resnet18 --steps 100
Each rank builds one of the package's models (written in ``mlenv.acceptance.models``,
no torchvision needed), trains it with ZeRO-2 from ``ds_config.json`` on synthetic data
(or ``--data fashion_mnist|cifar10 --data-dir /datasets/...``) and rank 0 prints
throughput and the loss trend.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", help="resnet18 | resnet50 | gpt")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--data", default="synthetic", help="synthetic | fashion_mnist | cifar10")
    ap.add_argument("--data-dir", default="/datasets")
    ap.add_argument("--ds-config", default=str(Path(__file__).with_name("ds_config.json")))
    ap.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", "0")),
                    help="set by the DeepSpeed launcher")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    import deepspeed
    import torch
    from mlenv.acceptance.data import build_dataset
    from mlenv.acceptance.models import build_model

    deepspeed.init_distributed()
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", args.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    config = json.loads(Path(args.ds_config).read_text())
    if not cuda:  # bf16 "auto" is for GPUs; CPU ranks (local tests) train in fp32
        config["bf16"] = {"enabled": False}
    micro = int(config["train_micro_batch_size_per_gpu"])

    dataset = build_dataset(args.data, model=args.model, root=args.data_dir, size=micro * args.steps)
    model = build_model(args.model, num_classes=dataset.num_classes, in_shape=dataset.sample_shape)
    engine, _, loader, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                training_data=dataset, config=config)
    loss_fn = torch.nn.CrossEntropyLoss()
    losses: list[float] = []
    t0 = time.perf_counter()
    step = 0
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = engine(x)
            loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            engine.backward(loss)
            engine.step()
            losses.append(float(loss.item()))
            step += 1
            if step >= args.steps:
                break
    elapsed = time.perf_counter() - t0
    if rank == 0:
        w = max(1, len(losses) // 10)
        first, last = sum(losses[:w]) / w, sum(losses[-w:]) / w
        print(f"{args.model}: {step} steps on {world} rank(s) in {elapsed:.1f} s, "
              f"{step * micro * world / elapsed:.1f} samples/s; loss {first:.3f} -> {last:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
