"""Compatibility name: the models are :mod:`mlenv.acceptance.checks.models`.

Kept because ``workspace/train_multi_node.py`` and users' synced copies of it import
``mlenv.acceptance.models`` inside pods whose image may be newer than the script.
"""

from __future__ import annotations

from mlenv.acceptance.checks.models import *  # noqa: F403
from mlenv.acceptance.checks.models import MODELS as MODELS
from mlenv.acceptance.checks.models import build_model as build_model
from mlenv.acceptance.checks.models import count_parameters as count_parameters
from mlenv.acceptance.checks.models import is_image_model as is_image_model
