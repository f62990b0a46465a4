"""``mlenv logs``: a worker pod's log."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session, worker_pod
from mlenv.cli._common import guarded
from mlenv.errors import InputError


@guarded
def logs(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    pod: Annotated[int, typer.Option("--pod", help="Pod index.")] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream until interrupted.")
    ] = False,
    tail: Annotated[
        int | None, typer.Option("--tail", help="Only the last N lines (then follow, with -f).")
    ] = None,
) -> None:
    """Print (or follow) the log of ml-dev-env-<pod>, as `kubectl logs [-f] [--tail N]`."""

    if tail is not None and tail < 0:
        raise InputError(f"--tail must be 0 or more, got {tail}")
    cfg = load_config(cluster)
    name = worker_pod(cfg, pod)
    platform(cfg).logs(cfg, session(), pod=name, follow=follow, tail=tail)


def register(app: typer.Typer) -> None:
    """Add ``logs`` to the app."""
    app.command("logs")(logs)
