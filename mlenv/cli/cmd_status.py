"""``mlenv status``: pods, nodes, readiness, restarts and PVCs of one deployment."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import cluster_client, load_config
from mlenv.cli._common import guarded


@guarded
def status(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
) -> None:
    """Show the deployment's pods (node, readiness, restarts) and PVCs."""
    from mlenv.cluster.ops import status as read_status

    cfg = load_config(cluster)
    with cluster_client() as client:
        rep = read_status(cfg, client)
    typer.echo(f"{cfg.name} in {cfg.namespace}: statefulset ml-dev-env {rep.ready}/{rep.desired} Ready")
    if not rep.pods:
        typer.echo("no pods (not deployed? run: mlenv deploy " + cfg.name + ")")
    else:
        typer.echo(f"{'POD':<24} {'PHASE':<10} {'READY':<6} {'RESTARTS':<9} NODE")
        for p in rep.pods:
            typer.echo(f"{p.name:<24} {(p.waiting_reason or p.phase):<10} "
                       f"{'yes' if p.ready else 'no':<6} {p.restarts:<9} {p.node or '-'}")
    for pod, line in sorted(rep.interfaces.items()):
        typer.echo(f"{pod}: RDMA interfaces: {line}")
    if rep.pvcs:
        typer.echo(f"{'PVC':<40} {'STATUS':<8} SIZE")
        for name, phase, size in rep.pvcs:
            typer.echo(f"{name:<40} {phase:<8} {size}")


def register(app: typer.Typer) -> None:
    """Add ``status`` to the app."""
    app.command("status")(status)
