"""Profiles: per-check option dicts for ``quick`` (CI, laptops) and ``full`` (sign-off).

Checks read these with ``ctx.opt(check, key, default)``; an options file (JSON or
YAML, ``{check: {key: value}}``) is merged over the profile. ``quick`` keeps the whole
two-CPU-rank suite under about a minute.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from mlenv.errors import InputError

PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "quick": {
        "compute": {"n": 512, "iters": 5, "warmup": 2},
        "memory": {"bytes": 32 * 2**20, "iters": 5},
        "collectives": {"min_bytes": 1024, "max_bytes": 4 * 2**20, "factor": 4, "iters": 5, "warmup": 2},
        "training": {"model": "resnet18", "steps": 8, "batch_size": 8, "zero_stage": 2,
                     "dataset": "synthetic", "data_dir": ""},
    },
    "full": {
        "compute": {"n": 8192, "iters": 50, "warmup": 10},
        "memory": {"bytes": 1024 * 2**20, "iters": 20},
        "collectives": {"min_bytes": 8, "max_bytes": 8 * 2**30, "factor": 2, "iters": 20, "warmup": 5},
        "training": {"model": "resnet50", "steps": 100, "batch_size": 64, "zero_stage": 2,
                     "dataset": "synthetic", "data_dir": ""},
    },
}

# What each profile changes on a GPU rank: sizes that measure the device, not launch
# overhead or the cache (a 512³ GEMM is launch-bound at tens of TFLOPS on an H100, a
# 32 MiB copy fits in its 50 MB L2). Full-profile training is the published ResNet-50
# setup (batch 256 per GPU, 224 px) that the GPU baselines' throughput figure refers to.
CUDA_OVERRIDES: dict[str, dict[str, dict[str, Any]]] = {
    "quick": {
        "compute": {"n": 8192, "iters": 10, "warmup": 3},
        "memory": {"bytes": 1024 * 2**20, "iters": 10},
        "collectives": {"min_bytes": 1024, "max_bytes": 256 * 2**20, "factor": 4, "iters": 10, "warmup": 3},
        "training": {"model": "resnet50", "steps": 20, "warmup_steps": 5, "batch_size": 64},
    },
    "full": {
        "training": {"batch_size": 256, "image_size": 224, "warmup_steps": 10},
    },
}

# Per-check deadline (seconds) each profile defaults to; --deadline overrides.
DEADLINES: dict[str, float] = {"quick": 120.0, "full": 900.0}


def profile_names() -> list[str]:
    """The known profile names."""
    return sorted(PROFILES)


def _check_options_doc(doc: Any, path: str) -> dict[str, dict[str, Any]]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InputError(f"{path}:1: expected a mapping of check name to options, got {type(doc).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for k, v in doc.items():
        if not isinstance(v, dict):
            raise InputError(f"{path}: {k}: expected a mapping of option name to value, got {type(v).__name__}")
        out[str(k)] = dict(v)
    return out


def load_options_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read an options file (JSON or YAML). Raises InputError naming the file and line."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read options file: {e}") from None
    try:
        doc = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{p}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(p)
        raise InputError(f"{where}: invalid YAML: {getattr(e, 'problem', e)}") from None
    return _check_options_doc(doc, str(p))


def resolve(profile: str, overrides: dict[str, dict[str, Any]] | None = None,
            device: str = "cpu") -> dict[str, dict[str, Any]]:
    """The option dicts of ``profile`` on ``device`` ("cpu" | "cuda[:i]"), ``overrides`` merged last.

    Precedence, lowest first: the profile, its GPU sizes (on CUDA), the options file.
    """
    if profile not in PROFILES:
        raise InputError(f"unknown profile {profile!r} (expected one of: {', '.join(profile_names())})")
    opts = copy.deepcopy(PROFILES[profile])
    layers = [CUDA_OVERRIDES.get(profile, {})] if device.startswith("cuda") else []
    for layer in [*layers, overrides or {}]:
        for check, kv in layer.items():
            opts.setdefault(check, {}).update(kv)
    return opts
