"""Compatibility name: the datasets module is :mod:`mlenv.acceptance.checks.datasets`.

Kept because ``workspace/train_multi_node.py`` and users' synced copies of it import
``mlenv.acceptance.datasets`` inside pods whose image may be newer than the script.
"""

from __future__ import annotations

from mlenv.acceptance.checks.datasets import *  # noqa: F403
from mlenv.acceptance.checks.datasets import build_dataset as build_dataset
from mlenv.acceptance.checks.datasets import canonical_name as canonical_name
