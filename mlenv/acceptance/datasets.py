"""The datasets API for training scripts: what ``workspace/train_multi_node.py`` (and users'
copies of it, synced into pods whose image may be newer than the script) imports.

The implementation lives in :mod:`mlenv.acceptance.checks.datasets`, beside the training
check that uses it; this module is the stable name, and these are its names.
"""

from __future__ import annotations

from mlenv.acceptance.checks.datasets import (
    DATASETS,
    SyntheticImages,
    SyntheticTokens,
    TensorDataset,
    build_dataset,
    canonical_name,
    load_cifar10,
    load_fashionmnist,
    read_idx,
)

__all__ = [
    "DATASETS",
    "SyntheticImages",
    "SyntheticTokens",
    "TensorDataset",
    "build_dataset",
    "canonical_name",
    "load_cifar10",
    "load_fashionmnist",
    "read_idx",
]
