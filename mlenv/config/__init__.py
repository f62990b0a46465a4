"""Cluster configs: load YAML with line numbers, validate (schema + semantic rules), build models.

Public API (implemented in ``mlenv.config.loader``):

- ``load(name_or_path, root=None) -> Cluster``: a cluster name (``clusters/<name>.yaml``
  under ``root``, default ``$MLENV_ROOT`` or the cwd) or a file path; raises
  ``ConfigError`` with every diagnostic of that file, ``InputError`` if not found.
- ``load_all(root=None) -> list[Cluster]``: every ``clusters/*.yaml``; one ``ConfigError``
  with the diagnostics of all files.
- ``cluster_files(root=None) -> list[Path]``: the example/config files, sorted.
- ``mode_warnings(cluster, mode) -> list[str]``: e.g. RDMA requested on a TCP-only cluster.
- ``check_file(path) -> (Cluster | None, list[Diagnostic])``: validate without raising.
- ``resolve(name_or_path, root=None) -> Path``: a cluster name or file path → the file.

The names are resolved lazily (PEP 562): importing ``mlenv.config.model`` (as every
CLI verb module does at import time) must not pull in PyYAML and the rules, so that
``mlenv --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlenv.config.loader import (
        check_file,
        cluster_files,
        load,
        load_all,
        mode_warnings,
        resolve,
    )
    from mlenv.config.model import Cluster

__all__ = ["Cluster", "check_file", "cluster_files", "load", "load_all", "mode_warnings", "resolve"]


def __getattr__(name: str) -> Any:
    if name == "Cluster":
        return importlib.import_module("mlenv.config.model").Cluster
    if name in __all__:
        return getattr(importlib.import_module("mlenv.config.loader"), name)
    raise AttributeError(f"module 'mlenv.config' has no attribute {name!r}")
