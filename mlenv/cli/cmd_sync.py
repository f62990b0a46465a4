"""``mlenv sync``: copy workspace/ into every pod (adds and updates only), verify every file
arrived; ``--delete`` also removes pod files gone locally (never results/, checkpoints or
dot-files); ``--dry-run`` lists what would change; ``--watch`` re-syncs."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session, workspace_dir
from mlenv.cli._common import guarded
from mlenv.errors import InputError


@guarded
def sync(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    watch: Annotated[
        bool, typer.Option("--watch", help="Re-sync whenever workspace/ changes (Ctrl-C stops).")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between change checks with --watch.")
    ] = 1.0,
    max_rounds: Annotated[
        int | None, typer.Option("--max-rounds", help="Stop --watch after this many checks.")
    ] = None,
    local: Annotated[
        str | None, typer.Option("--dir", help="Local tree (default: workspace/).")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            help="Seconds each copy and checksum may take (default: MLENV_EXEC_TIMEOUT or 600).",
        ),
    ] = None,
    delete: Annotated[
        bool,
        typer.Option(
            "--delete",
            help="Also delete pod files removed locally (never results/, checkpoint*/global_step* paths, .ckpt/.pt/.pth/.safetensors files, dot-files or caches).",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="List what would be added, updated (and with --delete, deleted) per pod; change nothing.",
        ),
    ] = False,
) -> None:
    """Copy workspace/ to every pod in parallel (once in rwx mode), adding and updating
    files only: what a pod wrote under /workspace is never deleted unless --delete says
    so. Then check every local file is in every pod (sha256). Exit 3 if a file is missing
    or differs, or a copy outlives --timeout."""
    if interval <= 0:
        raise InputError(f"--interval must be positive, got {interval:g}")
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be positive, got {timeout:g}")
    if watch and dry_run:
        raise InputError(
            "--dry-run and --watch do not go together (a dry run changes nothing to watch)"
        )
    cfg = load_config(cluster)
    platform(cfg).sync(
        cfg,
        session(),
        src=local or workspace_dir(),
        watch=watch,
        interval=interval,
        max_rounds=max_rounds,
        timeout=timeout,
        delete=delete,
        dry_run=dry_run,
    )


def register(app: typer.Typer) -> None:
    """Add ``sync`` to the app."""
    app.command("sync")(sync)
