"""``mlenv url`` and ``mlenv gpu-info``: the dev loop's read-only views (upstream's
``make vscode`` / ``make jupyter`` / ``make gpu-info``)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session
from mlenv.cli._common import guarded
from mlenv.cli._output import OutputOpt, check_format


@guarded
def url(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    tool: Annotated[str, typer.Argument(help="vscode, jupyter or tensorboard.")],
) -> None:
    """Print the URL of a dev tool's Route and how it is authenticated."""
    cfg = load_config(cluster)
    platform(cfg).url(cfg, session(), tool=tool)


@guarded
def gpu_info(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    output: OutputOpt = None,
) -> None:
    """nvidia-smi on every running pod of the deployment, as one table; then each pod's
    GPU topology (nvidia-smi topo -m) and InfiniBand ports (ibstat, when the image has it)."""
    fmt = check_format(output)
    cfg = load_config(cluster)
    raise typer.Exit(platform(cfg).gpu_info(cfg, dataclasses.replace(session(), output=fmt)))


def register(app: typer.Typer) -> None:
    """Add ``url`` and ``gpu-info`` to the app."""
    app.command("url")(url)
    app.command("gpu-info")(gpu_info)
