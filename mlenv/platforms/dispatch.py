"""Which :class:`~mlenv.platforms.base.Platform` a config's ``cluster.platform`` names: the
one place that reads that string for the verbs (the schema allows exactly these)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlenv.platforms.base import Platform
from mlenv.platforms.kube import KubernetesPlatform
from mlenv.platforms.offkube import HostsPlatform, SlurmPlatform

if TYPE_CHECKING:
    from mlenv.config.model import Cluster

PLATFORMS: dict[str, Platform] = {
    "openshift": KubernetesPlatform("openshift"),
    "kubernetes": KubernetesPlatform("kubernetes"),
    "slurm": SlurmPlatform(),
    "hosts": HostsPlatform(),
}


def platform_for(cfg: Cluster) -> Platform:
    """The platform of a loaded (validated) config."""
    return PLATFORMS[cfg.platform]


def platform_named(name: str) -> Platform:
    """A platform by name (``mlenv discover`` writes a config, so there is none to read)."""
    return PLATFORMS[name]
