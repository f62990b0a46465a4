"""Example multi-node DeepSpeed training script (copy it and make it yours).

Run on pod-0:  ./launch_deepspeed.sh train_multi_node.py --model resnet18 --steps 100
Each rank builds one of the package's models (``mlenv.acceptance.models``: resnet18,
resnet50, gpt; no torchvision needed), trains it with ZeRO-2 from ``ds_config.json`` on
synthetic data (or ``--data fashionmnist|cifar10 --data-dir /datasets/<name>``), and
rank 0 prints throughput and the loss trend (``--out FILE`` also writes them as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The script's flags (``--local_rank`` comes from the DeepSpeed launcher)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", help="resnet18 | resnet50 | gpt")
    length = ap.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, default=None, help="optimizer steps (default 100)")
    # upstream ml-dev-env's script counted passes over the data: kept, one or the other
    length.add_argument(
        "--epochs", type=int, default=None, help="passes over the data set, instead of --steps"
    )
    ap.add_argument("--data", default="synthetic", help="synthetic | fashionmnist | cifar10")
    ap.add_argument(
        "--data-dir", default="/datasets", help="folder holding the real dataset's files"
    )
    ap.add_argument(
        "--image-size", type=int, default=None, help="resize images (synthetic default: 32 px)"
    )
    ap.add_argument(
        "--micro-batch", type=int, default=None, help="override train_micro_batch_size_per_gpu"
    )
    # --deepspeed_config / --deepspeed: what upstream ml-dev-env's form
    # (./launch_deepspeed.sh train_multi_node.py ds_config.json) passes.
    ap.add_argument(
        "--ds-config",
        "--deepspeed_config",
        "--deepspeed-config",
        dest="ds_config",
        default=str(Path(__file__).with_name("ds_config.json")),
    )
    ap.add_argument(
        "--deepspeed", action="store_true", help="accepted for DeepSpeed's convention; always on"
    )
    ap.add_argument("--out", default=None, help="rank 0 writes a JSON summary here")
    ap.add_argument(
        "--local_rank",
        "--local-rank",
        type=int,
        default=int(os.environ.get("LOCAL_RANK", "0")),
        help="set by the DeepSpeed launcher",
    )
    args = ap.parse_args(argv)
    for flag in ("steps", "epochs"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            ap.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    return args


DEFAULT_STEPS = 100


def total_steps(steps: int | None, epochs: int | None, batches_per_epoch: int) -> int:
    """The run's optimizer steps: ``--steps``, or ``--epochs`` passes of ``batches_per_epoch``
    (this rank's loader length), or the default."""
    if epochs is not None:
        return epochs * max(1, batches_per_epoch)
    return steps if steps is not None else DEFAULT_STEPS


def resolve_config(
    config: dict[str, Any], cuda: bool, bf16_ok: bool, micro_batch: int | None
) -> dict[str, Any]:
    """``ds_config.json`` made concrete for this machine.

    ``"bf16": {"enabled": "auto"}`` would reach DeepSpeed as a truthy string, so it is
    decided here: bf16 on GPUs that support it, fp32 otherwise. On CPU ranks (local
    tests) the optimizer is torch's AdamW, so no DeepSpeed extension gets compiled.
    """
    cfg = json.loads(json.dumps(config))  # a deep copy
    bf16 = cfg.setdefault("bf16", {})
    if bf16.get("enabled") == "auto":
        bf16["enabled"] = bool(cuda and bf16_ok)
    if not cuda:
        cfg.get("optimizer", {}).setdefault("params", {})["torch_adam"] = True
    if micro_batch is not None:
        cfg["train_micro_batch_size_per_gpu"] = micro_batch
    return cfg


def main(argv: list[str] | None = None) -> int:
    """Train for ``--steps`` steps on every rank; rank 0 reports."""
    args = parse_args(argv)
    import deepspeed
    import torch

    from mlenv.acceptance.checks.dsops import release_own_shm_buffer
    from mlenv.acceptance.datasets import build_dataset, canonical_name
    from mlenv.acceptance.models import build_model
    from mlenv.errors import InputError

    cuda = torch.cuda.is_available()
    config = resolve_config(
        json.loads(Path(args.ds_config).read_text()),
        cuda,
        cuda and torch.cuda.is_bf16_supported(),
        args.micro_batch,
    )
    micro = int(config["train_micro_batch_size_per_gpu"])
    try:
        data = canonical_name(args.data)
        # Synthetic samples are made from their index: size them to the run. A real
        # dataset is used whole.
        dataset = build_dataset(
            data,
            model=args.model,
            root=args.data_dir,
            size=micro * (args.steps or DEFAULT_STEPS) if data == "synthetic" else None,
            image_size=args.image_size,
        )
        model = build_model(
            args.model, num_classes=dataset.num_classes, in_shape=dataset.sample_shape
        )
    except InputError as e:
        print(f"error: {e}", flush=True)
        return 2

    deepspeed.init_distributed()
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    device = torch.device("cuda", args.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        # torch gives every CPU rank every core, and the DeepSpeed launcher sets no
        # OMP_NUM_THREADS: the node's ranks would fight over the cores. Each gets its
        # share (an OMP_NUM_THREADS you set wins).
        from mlenv.acceptance.core.cpus import threads_per_rank
        from mlenv.acceptance.run.world import local_world_size

        torch.set_num_threads(threads_per_rank(local_world_size(1)))
    engine, _, loader, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), training_data=dataset, config=config
    )
    # DeepSpeed's CPU all-reduce op leaves a 67 MB /dev/shm file per rank behind; mlenv
    # removes this rank's once every rank has mapped them (a no-op on GPUs).
    release_own_shm_buffer()
    args.steps = total_steps(args.steps, args.epochs, len(loader))
    dtype = torch.bfloat16 if config["bf16"].get("enabled") else torch.float32
    loss_fn = torch.nn.CrossEntropyLoss()
    losses: list[float] = []
    t0 = time.perf_counter()
    step = 0
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            if x.is_floating_point():
                x = x.to(dtype)  # token ids (the GPT) stay integers
            out = engine(x)
            loss = loss_fn(out.float().reshape(-1, out.shape[-1]), y.reshape(-1))
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
        rate = step * micro * world / elapsed
        print(
            f"{args.model}: {step} steps on {world} rank(s) in {elapsed:.1f} s, "
            f"{rate:.1f} samples/s; loss {first:.3f} -> {last:.3f}",
            flush=True,
        )
        if args.out:
            Path(args.out).write_text(
                json.dumps(
                    {
                        "model": args.model,
                        "steps": step,
                        "world": world,
                        "samples_per_s": rate,
                        "losses": losses,
                        "threads": None if cuda else torch.get_num_threads(),
                    }
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
