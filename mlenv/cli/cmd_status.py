"""``mlenv status``: pods, nodes, readiness, restarts and PVCs of one deployment."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session
from mlenv.cli._common import guarded
from mlenv.cli._output import OutputOpt, check_format


@guarded
def status(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    output: OutputOpt = None,
) -> None:
    """Show the deployment's pods (node, readiness, restarts) and PVCs; -o json|yaml for
    one document."""
    output = check_format(output)
    cfg = load_config(cluster)
    platform(cfg).status(cfg, session(), output=output)


def register(app: typer.Typer) -> None:
    """Add ``status`` to the app."""
    app.command("status")(status)
