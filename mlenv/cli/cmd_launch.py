"""``mlenv launch``: run the job from pod 0 through exec, streamed; its exit code is ours.

Default: ``python -m mlenv.pod launch`` in pod 0 (DeepSpeed's launcher reaches the other
pods over ssh). ``--torchrun``: the ssh-less path, ``python -m mlenv.pod run-torchrun``
started in every pod at once through exec with one shared run id; pod 0's output is
streamed and its exit code returned.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session
from mlenv.cli._common import guarded
from mlenv.errors import InputError


@guarded
def launch(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    script: Annotated[
        list[str] | None, typer.Argument(help="Script and arguments (default: the acceptance job).")
    ] = None,
    torchrun: Annotated[
        bool,
        typer.Option(
            "--torchrun", help="ssh-less: run-torchrun in every pod in parallel through exec."
        ),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="Seconds the job may run in each pod (default: no limit)."),
    ] = None,
    peer_deadline: Annotated[
        float | None,
        typer.Option(
            "--peer-deadline",
            help="Seconds pod 0's launcher waits for every peer (name resolves, sshd answers) before it gives up with exit 3 naming them (default 120).",
        ),
    ] = None,
) -> None:
    """Run SCRIPT (default: the acceptance suite) across the deployment from pod 0 and
    stream its output. Exit 0 ok, 1 acceptance FAIL, 2 bad input, 3 error or crash."""
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be positive, got {timeout:g}")
    if peer_deadline is not None and not 0 < peer_deadline < 86400:
        raise InputError(
            f"--peer-deadline must be between 0 and 86400 seconds, got {peer_deadline:g}"
        )
    if peer_deadline is not None and torchrun:
        raise InputError("--peer-deadline is pod 0's launcher's; --torchrun starts no launcher")
    cfg = load_config(cluster)
    raise typer.Exit(
        platform(cfg).launch(
            cfg,
            session(),
            script=list(script or []),
            torchrun=torchrun,
            timeout=timeout,
            peer_deadline=peer_deadline,
        )
    )


def register(app: typer.Typer) -> None:
    """Add ``launch`` to the app."""
    app.command("launch")(launch)
