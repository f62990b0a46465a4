"""``mlenv shell``: an interactive shell (or one command) in a worker pod (pod-0 by default)."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session, worker_pod
from mlenv.cli._common import guarded


@guarded
def shell(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    command: Annotated[
        list[str] | None, typer.Argument(help="Command to run instead of a login shell (after --).")
    ] = None,
    pod: Annotated[int, typer.Option("--pod", help="Pod index.")] = 0,
) -> None:
    """Open bash in ml-dev-env-<pod> (then ./launch_deepspeed.sh from /workspace), or run
    COMMAND there with the terminal attached: `mlenv shell x -- nvidia-smi topo -m`."""

    cfg = load_config(cluster)
    name = worker_pod(cfg, pod)
    raise typer.Exit(
        platform(cfg).shell(cfg, session(), index=pod, pod=name, command=list(command or []))
    )


def register(app: typer.Typer) -> None:
    """Add ``shell`` to the app."""
    app.command("shell")(shell)
