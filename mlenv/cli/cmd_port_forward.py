"""``mlenv port-forward``: the enabled dev tools of the dev Pod, or a debugger's port on a
worker pod, on localhost."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import cluster_client, load_config, require_running, worker_pod
from mlenv.cli._common import guarded
from mlenv.errors import InputError
from mlenv.render.names import DEV_POD

DEBUG_PORT = 5678  # debugpy's default, upstream ml-dev-env's DEBUG_PORT


def _port_pair(spec: str) -> tuple[int, int]:
    local, _, remote = spec.partition(":")
    try:
        a, b = int(local), int(remote or local)
    except ValueError:
        raise InputError(f"--port {spec!r}: expected PORT or LOCAL:REMOTE (numbers)") from None
    if not (0 < a < 65536 and 0 < b < 65536):
        raise InputError(f"--port {spec!r}: ports are 1-65535")
    return a, b


@guarded
def port_forward(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    debug: Annotated[bool, typer.Option("--debug", help=f"Forward the debugger port {DEBUG_PORT} (debugpy) of a worker pod.")] = False,
    port: Annotated[list[str] | None, typer.Option("--port", help="PORT or LOCAL:REMOTE of a worker pod (repeatable).")] = None,
    pod: Annotated[int, typer.Option("--pod", help="Worker pod index for --debug/--port.")] = 0,
) -> None:
    """Forward each enabled dev tool's port (127.0.0.1 only) from ml-dev-env-dev; with
    --debug or --port, the given ports of worker pod ml-dev-env-<pod> instead."""
    from mlenv.render.workload import forward_ports

    cfg = load_config(cluster)
    wanted = [_port_pair(p) for p in port or []] + ([(DEBUG_PORT, DEBUG_PORT)] if debug else [])
    if wanted:
        target = worker_pod(pod)
        with cluster_client() as client:  # the ports are announced once the server answers
            require_running(client, cfg.namespace, target, cfg.name)
            for a, b in wanted:
                typer.echo(f"127.0.0.1:{a} -> {target}:{b}")
            rc = client.port_forward(target, cfg.namespace, wanted)
        raise typer.Exit(rc)
    tools = forward_ports(cfg)  # the tools' own ports, not their oauth-proxies (see there)
    if not tools:
        raise InputError(f"cluster {cfg.name} enables no dev_tools (vscode, jupyter, "
                         f"tensorboard); for a debugger use: mlenv port-forward {cfg.name} --debug")
    ports = [(p, p) for _, p, _ in tools]
    with cluster_client() as client:
        require_running(client, cfg.namespace, DEV_POD, cfg.name)
        for t, p, scheme in tools:
            typer.echo(f"{t}: {scheme}://127.0.0.1:{p}")
        rc = client.port_forward(DEV_POD, cfg.namespace, ports)
    raise typer.Exit(rc)


def register(app: typer.Typer) -> None:
    """Add ``port-forward`` to the app."""
    app.command("port-forward")(port_forward)
