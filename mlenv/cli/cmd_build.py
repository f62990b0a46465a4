"""``mlenv build``: start the ml-dev-env BuildConfig on the cluster and follow it."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import cluster_client, load_config
from mlenv.cli._common import guarded
from mlenv.contract import BUILD_CONFIG
from mlenv.errors import EXIT_ERROR


@guarded
def build(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
) -> None:
    """Build the pod image from the Dockerfile (BuildConfig ml-dev-env → ImageStream tag)."""

    cfg = load_config(cluster)
    with cluster_client() as client:
        rc = client.start_build(BUILD_CONFIG, cfg.namespace, typer.echo)
    if rc != 0:
        typer.echo(f"error: build of ml-dev-env failed (exit {rc})", err=True)
        raise typer.Exit(EXIT_ERROR)
    typer.echo("build finished: image pushed to the ml-dev-env ImageStream")


def register(app: typer.Typer) -> None:
    """Add ``build`` to the app."""
    app.command("build")(build)
