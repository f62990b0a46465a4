"""``mlenv url`` and ``mlenv gpu-info``: the dev loop's read-only views (upstream's
``make vscode`` / ``make jupyter`` / ``make gpu-info``)."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import cluster_client, load_config
from mlenv.cli._common import guarded


@guarded
def url(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    tool: Annotated[str, typer.Argument(help="vscode, jupyter or tensorboard.")],
) -> None:
    """Print the URL of a dev tool's Route and how it is authenticated."""
    from mlenv.cluster.devloop import tool_url

    cfg = load_config(cluster)
    with cluster_client() as client:
        u = tool_url(cfg, client, tool)
    typer.echo(f"{u.tool}: {u.url}")
    typer.echo(f"  {u.auth}")


@guarded
def gpu_info(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
) -> None:
    """nvidia-smi on every running pod of the deployment, as one table."""
    from mlenv.cluster.devloop import gpu_table

    cfg = load_config(cluster)
    with cluster_client() as client:
        rows = gpu_table(cfg, client)
    typer.echo(f"{'POD':<20} {'GPU':<4} {'NAME':<28} {'MEM USED/TOTAL MiB':<20} UTIL")
    for r in rows:
        if r.error:
            typer.echo(f"{r.pod:<20} {'-':<4} {r.error}")
        else:
            typer.echo(f"{r.pod:<20} {r.index:<4} {r.name[:28]:<28} "
                       f"{r.mem_used_mib + '/' + r.mem_total_mib:<20} {r.util_pct}%")
    if any(r.error for r in rows):
        raise typer.Exit(3)


def register(app: typer.Typer) -> None:
    """Add ``url`` and ``gpu-info`` to the app."""
    app.command("url")(url)
    app.command("gpu-info")(gpu_info)
