"""``mlenv port-forward``: the enabled dev tools of the dev Pod on localhost."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import cluster_client, load_config
from mlenv.cli._common import guarded
from mlenv.errors import InputError


@guarded
def port_forward(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
) -> None:
    """Forward each enabled dev tool's port (127.0.0.1 only) from ml-dev-env-dev."""
    from mlenv.render.workload import forward_ports

    cfg = load_config(cluster)
    tools = forward_ports(cfg)  # the tools' own ports, not their oauth-proxies (see there)
    if not tools:
        raise InputError(f"cluster {cfg.name} enables no dev_tools (vscode, jupyter, tensorboard)")
    ports = [(port, port) for _, port, _ in tools]
    for t, port, scheme in tools:
        typer.echo(f"{t}: {scheme}://127.0.0.1:{port}")
    with cluster_client() as client:
        rc = client.port_forward("ml-dev-env-dev", cfg.namespace, ports)
    raise typer.Exit(rc)


def register(app: typer.Typer) -> None:
    """Add ``port-forward`` to the app."""
    app.command("port-forward")(port_forward)
