"""Profiles: the option values each run changes from the checks' own defaults.

The defaults themselves live with each check (its options dataclass,
:mod:`mlenv.acceptance.core.options`): ``quick`` (CI, laptops; the whole two-CPU-rank suite
in about a minute) is the checks' defaults, ``full`` (sign-off) overrides sizes and
iterations. A profile's ``overrides`` apply on every device, ``cuda_overrides`` on top
of them on a GPU rank. An options file (``--options FILE``, YAML or JSON
``{check or family: {option: value}}``) is merged over the profile.

Adding a check needs no edit here unless a profile should run it with other values
than its defaults.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlenv.acceptance.core import registry
from mlenv.acceptance.core.options import (
    CheckOptions,
    OptionLayer,
    build,
    family,
    load_file,
    merge,
    validate,
)
from mlenv.errors import InputError, did_you_mean

Overrides = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Profile:
    """A named run: its per-check deadline and the option values it changes (every check runs)."""

    name: str
    help: str
    deadline_s: float  # per-check deadline; --deadline overrides
    overrides: Overrides = field(default_factory=dict)
    cuda_overrides: Overrides = field(default_factory=dict)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("quick", "CI and laptops: the checks' defaults", deadline_s=120.0),
        Profile(
            "full",
            "sign-off: large sweeps and the published ResNet-50 training setup",
            deadline_s=900.0,
            overrides={
                "gpu.dcgm": {"level": 2},  # DCGM's medium run (minutes); level 3 only by --options
                "compute": {"n": 8192, "iters": 50, "warmup": 10},
                "memory": {"bytes": 1024 * 2**20, "iters": 20},
                "collectives": {
                    "min_bytes": 8,
                    "max_bytes": 8 * 2**30,
                    "factor": 2,
                    "iters": 20,
                    "warmup": 5,
                },
                "training": {"model": "resnet50", "steps": 100, "batch_size": 64},
            },
            # The published ResNet-50 setup (batch 256 per GPU, 224 px) that the GPU
            # baselines' throughput figure refers to.
            # Its stack-ratio WARN bar too: at batch 256 the ratio is the stack's cost on the
            # device (0.90-0.93 on an H200); the quick profile's batch 64 is launch-bound.
            cuda_overrides={
                "training": {
                    "batch_size": 256,
                    "image_size": 224,
                    "warmup_steps": 10,
                    "stack_warn_ratio": 0.80,
                }
            },
        ),
    )
}

# Per-check deadline (seconds) each profile defaults to; --deadline overrides.
DEADLINES: dict[str, float] = {name: p.deadline_s for name, p in PROFILES.items()}


def profile_names() -> list[str]:
    """The known profile names."""
    return sorted(PROFILES)


def get(profile: str) -> Profile:
    """The profile called ``profile``; InputError naming the known ones."""
    if profile not in PROFILES:
        raise InputError(
            f"unknown profile {profile!r}{did_you_mean(profile, profile_names())} "
            f"(expected one of: {', '.join(profile_names())})"
        )
    return PROFILES[profile]


def load_options_file(path: str | os.PathLike[str]) -> OptionLayer:
    """Read an options file (YAML or JSON) with the strict reader; InputError names file:line:col."""
    return load_file(path)


def resolve(
    profile: str, overrides: Mapping[str, Mapping[str, Any]] | None = None, device: str = "cpu"
) -> OptionLayer:
    """The override layers of ``profile`` on ``device`` ("cpu" | "cuda[:i]"), ``overrides`` merged last.

    Precedence, lowest first: the checks' defaults (applied by :func:`options_for`), the
    profile, its GPU overrides (on CUDA), the options file. The result keeps where each
    value of the options file came from. Every section and value is validated against
    every registered check (:func:`validate_options`): InputError, located.
    """
    layer = _layers(profile, device, overrides)
    validate_options(layer, registered_options())
    return layer


def _layers(
    profile: str, device: str, overrides: Mapping[str, Mapping[str, Any]] | None
) -> OptionLayer:
    p = get(profile)
    layers: list[Mapping[str, Mapping[str, Any]]] = [p.overrides]
    if device.startswith("cuda"):
        layers.append(p.cuda_overrides)
    layers.append(overrides or {})
    return merge(layers)


def options_for(
    cls: type[CheckOptions],
    check: str,
    *,
    profile: str,
    cuda: bool,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> CheckOptions:
    """The one place a check's typed options are made: defaults → profile → GPU overrides → ``overrides``.

    ``overrides`` may already hold the profile's values (what :func:`resolve` returns):
    applying the profile again under them changes nothing. A family section may hold
    options of the family's other registered checks. Raises InputError, located.
    """
    fam = family(check)
    siblings = [
        k for name, c in registry.option_classes().items() if family(name) == fam for k in c.keys()
    ]
    layer = _layers(profile, "cuda" if cuda else "cpu", overrides)
    return build(cls, check, layer, cuda=cuda, family_keys=siblings)


def registered_options() -> dict[str, type[CheckOptions]]:
    """Options class of every check: the shipped ones and ``MLENV_ACCEPTANCE_PLUGINS`` modules."""
    # A plugin that cannot be imported is skipped: the entry point names it when it loads the checks.
    registry.load(skip_missing_plugins=True)
    return registry.option_classes()


def validate_options(
    layer: Mapping[str, Mapping[str, Any]], checks: Mapping[str, type[CheckOptions]]
) -> None:
    """Every section of ``layer`` names a check or family and every check's options build.

    ``checks`` maps each registered check to its options class. Raises InputError
    (``file:line:col: section.option: what is wrong`` where the value came from a file).
    """
    validate(layer, checks)


def check_deadlines(
    checks: list[registry.CheckClass],
    overrides: Mapping[str, Mapping[str, Any]],
    profile: str,
    deadline_s: float,
) -> None:
    """InputError naming the first check that cannot finish within the per-check deadline
    with its options (``Check.deadline_problem``): such a check would be named hung and
    stop the suite, so it is refused before any rank starts."""
    for cls in checks:
        for cuda in (False, True):
            opts = options_for(
                cls.Options, cls.name, profile=profile, cuda=cuda, overrides=overrides
            )
            why = cls.deadline_problem(opts, deadline_s)
            if why:
                raise InputError(f"{cls.name}: {why}")
