"""``mlenv build``: start the ml-dev-env BuildConfig on the cluster and follow it."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session
from mlenv.cli._common import guarded


@guarded
def build(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
) -> None:
    """Build the pod image from the Dockerfile (BuildConfig ml-dev-env → ImageStream tag)."""

    cfg = load_config(cluster)
    raise typer.Exit(platform(cfg).build(cfg, session()))


def register(app: typer.Typer) -> None:
    """Add ``build`` to the app."""
    app.command("build")(build)
