"""Helpers shared by the cluster verbs (deploy, status, sync, shell, logs, …)."""

from __future__ import annotations

from pathlib import Path

from mlenv.cli._common import repo_root
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.errors import InputError

MODES = ("rdma", "tcp")


def load_config(name_or_path: str) -> ClusterConfig:
    """Load and validate a cluster config (ConfigError/InputError → exit 2 at the boundary)."""
    from mlenv.config import load

    return load(name_or_path, Path(repo_root()))


def check_mode(mode: str) -> None:
    """InputError unless ``mode`` is rdma or tcp."""
    if mode not in MODES:
        raise InputError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")


def worker_pod(index: int) -> str:
    """StatefulSet pod name for an index (docs/contracts.md)."""
    if index < 0:
        raise InputError(f"--pod must be 0 or more, got {index}")
    return f"ml-dev-env-{index}"


def workspace_dir() -> str:
    """The local ``workspace/`` tree sync copies."""
    return str(Path(repo_root()) / "workspace")
