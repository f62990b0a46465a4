"""The old name of :mod:`mlenv.acceptance.datasets` (the datasets API for training scripts),
kept so scripts written before the rename still import."""

from __future__ import annotations

from mlenv.acceptance.datasets import *  # noqa: F403
from mlenv.acceptance.datasets import __all__ as __all__
