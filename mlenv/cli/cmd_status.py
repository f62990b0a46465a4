"""``mlenv status``: pods, nodes, readiness, restarts and PVCs of one deployment."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import READS_FIRST, load_config, platform, session
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
    # status only reads: its reads start beside the server probe, not after it
    reads_first = READS_FIRST.set(True)
    try:
        platform(cfg).status(cfg, session(), output=output)
    finally:
        READS_FIRST.reset(reads_first)


def register(app: typer.Typer) -> None:
    """Add ``status`` to the app."""
    app.command("status")(status)
