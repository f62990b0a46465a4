"""``mlenv logs``: a worker pod's log."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import cluster_client, load_config, worker_pod
from mlenv.cli._common import guarded


@guarded
def logs(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    pod: Annotated[int, typer.Option("--pod", help="Pod index.")] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream until interrupted.")] = False,
) -> None:
    """Print (or follow) the log of ml-dev-env-<pod>."""

    cfg = load_config(cluster)
    with cluster_client() as client:
        client.logs(worker_pod(pod), cfg.namespace, follow=follow, out=typer.echo)


def register(app: typer.Typer) -> None:
    """Add ``logs`` to the app."""
    app.command("logs")(logs)
