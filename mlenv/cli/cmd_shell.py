"""``mlenv shell``: an interactive shell (or one command) in a worker pod (pod-0 by default)."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import cluster_client, load_config, require_running, worker_pod
from mlenv.cli._common import guarded


@guarded
def shell(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    command: Annotated[list[str] | None, typer.Argument(help="Command to run instead of a login shell (after --).")] = None,
    pod: Annotated[int, typer.Option("--pod", help="Pod index.")] = 0,
) -> None:
    """Open bash in ml-dev-env-<pod> (then ./launch_deepspeed.sh from /workspace), or run
    COMMAND there with the terminal attached: `mlenv shell x -- nvidia-smi topo -m`."""

    cfg = load_config(cluster)
    if cfg.platform in ("slurm", "hosts"):  # issue 13: srun --pty on a node / ssh to host --pod
        from mlenv.platforms.verbs import shell as platform_shell

        raise typer.Exit(platform_shell(cfg, command=list(command or []), node=pod))
    name = worker_pod(pod)
    with cluster_client() as client:
        require_running(client, cfg.namespace, name, cfg.name)  # else kubectl's exit 1
        rc = client.interactive(name, cfg.namespace, list(command or ["bash", "-l"]))
    raise typer.Exit(rc)


def register(app: typer.Typer) -> None:
    """Add ``shell`` to the app."""
    app.command("shell")(shell)
