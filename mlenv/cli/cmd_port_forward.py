"""``mlenv port-forward``: the enabled dev tools of the dev Pod, or a debugger's port on a
worker pod, on localhost."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session, worker_pod
from mlenv.cli._common import guarded
from mlenv.errors import InputError

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
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help=f"Forward the debugger port {DEBUG_PORT} (debugpy) of a worker pod."
        ),
    ] = False,
    port: Annotated[
        list[str] | None,
        typer.Option("--port", help="PORT or LOCAL:REMOTE of a worker pod (repeatable)."),
    ] = None,
    pod: Annotated[int, typer.Option("--pod", help="Worker pod index for --debug/--port.")] = 0,
) -> None:
    """Forward each enabled dev tool's port (127.0.0.1 only) from ml-dev-env-dev; with
    --debug or --port, the given ports of worker pod ml-dev-env-<pod> instead."""
    cfg = load_config(cluster)
    wanted = [_port_pair(p) for p in port or []] + ([(DEBUG_PORT, DEBUG_PORT)] if debug else [])
    target = worker_pod(cfg, pod) if wanted else ""
    raise typer.Exit(platform(cfg).port_forward(cfg, session(), pod=target, ports=wanted))


def register(app: typer.Typer) -> None:
    """Add ``port-forward`` to the app."""
    app.command("port-forward")(port_forward)
