"""``mlenv launch``: run the pod-0 launcher through exec, streamed; its exit code is ours."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config
from mlenv.cli._common import guarded


@guarded
def launch(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    script: Annotated[list[str] | None, typer.Argument(help="Script and arguments (default: the acceptance job).")] = None,
) -> None:
    """exec `python -m mlenv.pod launch [SCRIPT …]` in ml-dev-env-0 and stream its output."""
    from mlenv.cluster.connect import connect

    cfg = load_config(cluster)
    argv = ["python", "-m", "mlenv.pod", "launch", *(script or [])]
    with connect() as client:
        rc = client.exec_stream("ml-dev-env-0", cfg.namespace, argv, typer.echo)
    raise typer.Exit(rc)


def register(app: typer.Typer) -> None:
    """Add ``launch`` to the app."""
    app.command("launch")(launch)
