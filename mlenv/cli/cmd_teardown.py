"""``mlenv teardown``: delete this deployment's objects (by label) and nothing else."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config
from mlenv.cli._common import guarded


@guarded
def teardown(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    purge: Annotated[bool, typer.Option("--purge", help="Also delete the PVCs (workspace and datasets data).")] = False,
) -> None:
    """Delete everything labelled app.kubernetes.io/instance=<cluster>, name=ml-dev-env.
    PVCs (volumeClaimTemplate ones too) are kept unless --purge."""
    from mlenv.cluster.connect import connect
    from mlenv.cluster.ops import teardown as run_teardown

    cfg = load_config(cluster)
    with connect() as client:
        deleted = run_teardown(cfg, client, purge=purge)
    for d in deleted:
        typer.echo(f"deleted {d}")
    typer.echo(f"teardown of {cfg.name}: {len(deleted)} object(s) deleted"
               + ("" if purge else "; PVCs kept (--purge deletes them)"))


def register(app: typer.Typer) -> None:
    """Add ``teardown`` to the app."""
    app.command("teardown")(teardown)
