"""``mlenv status``: pods, nodes, readiness, restarts and PVCs of one deployment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from mlenv.cli._clusterctx import cluster_client, load_config
from mlenv.cli._common import guarded
from mlenv.cli._output import OutputOpt, check_format, emit
from mlenv.contract import STATEFULSET

if TYPE_CHECKING:
    from mlenv.cluster.status import StatusReport


@guarded
def status(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    output: OutputOpt = None,
) -> None:
    """Show the deployment's pods (node, readiness, restarts) and PVCs; -o json|yaml for
    one document."""
    from mlenv.cluster.status import status as read_status

    check_format(output)
    cfg = load_config(cluster)
    if cfg.platform in ("slurm", "hosts"):  # issue 13: the job's state and its nodes'
        from mlenv.platforms.verbs import status as platform_status

        platform_status(cfg, say=typer.echo)
        return
    with cluster_client() as client:
        rep = read_status(cfg, client)
    if output is not None:
        emit(status_doc(cfg.name, cfg.namespace, rep), output)
        return
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


def status_doc(name: str, namespace: str, rep: StatusReport) -> dict[str, Any]:
    """The status report as plain data (``-o json|yaml``)."""
    return {
        "cluster": name,
        "namespace": namespace,
        "statefulset": {"name": STATEFULSET, "desired": rep.desired, "ready": rep.ready},
        "pods": [{"name": p.name, "phase": p.phase, "waiting_reason": p.waiting_reason,
                  "ready": p.ready, "restarts": p.restarts, "node": p.node,
                  "rdma_interfaces": rep.interfaces.get(p.name)} for p in rep.pods],
        "pvcs": [{"name": n, "phase": ph, "size": size} for n, ph, size in rep.pvcs],
    }


def register(app: typer.Typer) -> None:
    """Add ``status`` to the app."""
    app.command("status")(status)
