"""``mlenv list-clusters``: one line per cluster config with what it can do."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from mlenv.cli._common import guarded, repo_root
from mlenv.cli._output import OutputOpt, check_format, emit
from mlenv.errors import ConfigError, InputError

if TYPE_CHECKING:  # the model module is light, but keep --help free of config imports
    from mlenv.config.model import Cluster


def rows(clusters: list[Cluster]) -> list[tuple[str, ...]]:
    """Table rows (header first) for ``clusters``."""
    out: list[tuple[str, ...]] = [
        ("NAME", "PLATFORM", "MODES", "NODES x GPUS", "STORAGE", "DESCRIPTION")
    ]
    for c in clusters:
        modes = "rdma,tcp" if c.rdma.enabled else "tcp"
        gpu = f" {c.gpus.type}" if c.gpus.type else ""
        out.append(
            (
                c.name,
                c.platform,
                modes,
                f"{c.gpus.default_nodes} x {c.gpus.per_node}{gpu}",
                # pods' storage means nothing off Kubernetes: the shared folder (or none) does
                _storage(c),
                c.cluster.description,
            )
        )
    return out


def _storage(c: Cluster) -> str:
    from mlenv.cli._clusterctx import platform

    return platform(c).storage_label(c)


def format_table(table: list[tuple[str, ...]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded."""
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    lines = []
    for r in table:
        cells = [cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def docs(clusters: list[Cluster]) -> list[dict[str, Any]]:
    """The table's content as plain data (``-o json|yaml``)."""
    return [
        {
            "name": c.name,
            "file": str(c.source) if c.source else None,
            "platform": c.platform,
            "namespace": c.namespace,
            "modes": ["rdma", "tcp"] if c.rdma.enabled else ["tcp"],
            "nodes": c.gpus.default_nodes,
            "gpus_per_node": c.gpus.per_node,
            "gpu_type": c.gpus.type,
            "storage": _storage(c),
            "description": c.cluster.description,
        }
        for c in clusters
    ]


@guarded
def list_clusters(output: OutputOpt = None) -> None:
    """List every clusters/*.yaml: name, platform, modes it supports (rdma|tcp), nodes x GPUs, storage.

    Invalid configs are reported on stderr after the table (exit 2). -o json|yaml prints
    the valid ones as one document.
    """
    from mlenv.config.loader import check_file, cluster_files

    output = check_format(output)
    root = Path(repo_root())
    files = cluster_files(root)
    if not files:
        raise InputError(f"no cluster configs found: {root / 'clusters'}/*.yaml")
    good: list[Cluster] = []
    errors = []
    for f in files:
        cluster, diags = check_file(f)
        if cluster is None:
            errors += [d for d in diags if d.severity == "error"]
        else:
            good.append(cluster)
    if output is not None:
        emit(docs(good), output)
    elif good:
        typer.echo(format_table(rows(good)))
    if errors:
        raise ConfigError(errors)


def register(app: typer.Typer) -> None:
    """Add ``mlenv list-clusters`` to ``app``."""
    app.command("list-clusters")(list_clusters)
