"""The models API for training scripts: what ``workspace/train_multi_node.py`` (and users'
copies of it, synced into pods whose image may be newer than the script) imports.

The implementation lives in :mod:`mlenv.acceptance.checks.models`, beside the training
check that uses it; this module is the stable name, and these are its names.
"""

from __future__ import annotations

from mlenv.acceptance.checks.models import IMAGE_MODELS as IMAGE_MODELS
from mlenv.acceptance.checks.models import MODELS as MODELS
from mlenv.acceptance.checks.models import SMALL_IMAGE_PX as SMALL_IMAGE_PX
from mlenv.acceptance.checks.models import build_model as build_model
from mlenv.acceptance.checks.models import count_parameters as count_parameters
from mlenv.acceptance.checks.models import is_image_model as is_image_model

__all__ = [
    "IMAGE_MODELS",
    "MODELS",
    "SMALL_IMAGE_PX",
    "build_model",
    "count_parameters",
    "is_image_model",
]
