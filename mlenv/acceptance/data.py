"""Compatibility name: the datasets module is :mod:`mlenv.acceptance.checks.datasets`.

Kept because training scripts synced into pods (``workspace/train_multi_node.py`` before
the rename, and users' copies of it) import ``mlenv.acceptance.data``: a newer image must
not break them.
"""

from __future__ import annotations

from mlenv.acceptance.checks.datasets import *  # noqa: F403
from mlenv.acceptance.checks.datasets import build_dataset as build_dataset
from mlenv.acceptance.checks.datasets import canonical_name as canonical_name
