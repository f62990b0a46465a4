"""Models the training check (and ``workspace/train_multi_node.py``) train.

Written in the package because torchvision is not available beside the CPU torch
build. Use :func:`build_model`; torch is imported only when it is called.

Example::

    from mlenv.acceptance.checks.datasets import build_dataset
    from mlenv.acceptance.checks.models import build_model

    ds = build_dataset("cifar10", model="resnet18", root="/datasets/cifar10")
    model = build_model("resnet18", num_classes=ds.num_classes, in_shape=ds.sample_shape)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mlenv.errors import InputError

if TYPE_CHECKING:
    from torch import nn

MODELS = ("resnet18", "resnet50", "gpt")
IMAGE_MODELS = ("resnet18", "resnet50")
# Below this many pixels the ImageNet stem (7×7/2 conv + max-pool) would shrink a
# CIFAR-sized image to 1×1 before the last stage; the CIFAR stem keeps the resolution.
SMALL_IMAGE_PX = 64


def is_image_model(name: str) -> bool:
    """True for the ResNets (image in, class logits out), False for the GPT."""
    return name in IMAGE_MODELS


def build_model(
    name: str,
    num_classes: int,
    in_shape: Sequence[int] | None = None,
    *,
    stem: str = "auto",
    d_model: int = 128,
    n_layer: int = 2,
    n_head: int = 4,
) -> nn.Module:
    """Build model ``name`` (``resnet18`` | ``resnet50`` | ``gpt``).

    ``num_classes`` is the number of classes for a ResNet and the vocabulary size for
    the GPT. ``in_shape`` is one sample's shape: ``(C, H, W)`` for a ResNet (default
    ``(3, 224, 224)``), ``(T,)`` for the GPT (its context length; default 64).
    ``stem`` (ResNets): ``imagenet``, ``cifar`` or ``auto`` (``cifar`` below 64 px).
    ``d_model``/``n_layer``/``n_head`` size the GPT.

    Raises :class:`~mlenv.errors.InputError` for an unknown name or a shape that does
    not fit the model.
    """
    if name not in MODELS:
        raise InputError(f"unknown model {name!r} (expected one of: {', '.join(MODELS)})")
    if num_classes < 1:
        raise InputError(f"model {name}: num_classes must be >= 1, got {num_classes}")
    if name == "gpt":
        from mlenv.acceptance.checks.models.gpt import GPT, GPTConfig

        shape = tuple(in_shape) if in_shape is not None else (64,)
        if len(shape) != 1:
            raise InputError(f"model gpt: in_shape must be (seq_len,), got {shape}")
        try:
            cfg = GPTConfig(
                vocab_size=num_classes,
                seq_len=int(shape[0]),
                d_model=d_model,
                n_layer=n_layer,
                n_head=n_head,
            )
        except ValueError as e:
            raise InputError(f"model gpt: {e}") from None
        return GPT(cfg)

    from mlenv.acceptance.checks.models.resnet import resnet18, resnet50

    shape = tuple(in_shape) if in_shape is not None else (3, 224, 224)
    if len(shape) != 3:
        raise InputError(f"model {name}: in_shape must be (channels, height, width), got {shape}")
    if stem == "auto":
        stem = "cifar" if min(shape[1], shape[2]) < SMALL_IMAGE_PX else "imagenet"
    if stem not in ("imagenet", "cifar"):
        raise InputError(f"model {name}: stem must be auto, imagenet or cifar, got {stem!r}")
    ctor = resnet18 if name == "resnet18" else resnet50
    return ctor(num_classes=num_classes, in_channels=int(shape[0]), stem=stem)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
