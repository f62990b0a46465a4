"""``mlenv deploy``: validate → render → preflight → dry run → ssh Secret → apply → wait."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from mlenv.cli._clusterctx import check_mode, load_config, platform, session
from mlenv.cli._common import guarded
from mlenv.cli._output import check_format
from mlenv.errors import InputError


@guarded
def deploy(
    cluster: Annotated[
        str, typer.Argument(help="Cluster name (clusters/<name>.yaml) or config file.")
    ],
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="rdma or tcp (default: the config's: rdma when network.rdma.enabled, else tcp).",
        ),
    ] = None,
    nodes: Annotated[
        int | None, typer.Option("--nodes", help="Pod count (default: gpus.default_nodes).")
    ] = None,
    dry_run: Annotated[
        str | None,
        typer.Option("--dry-run", help="client: print the plan; server: server-side dry run."),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for all pods Ready.")
    ] = 900.0,
    no_fallback: Annotated[
        bool,
        typer.Option(
            "--no-fallback",
            help="Fail instead of falling back to TCP when RDMA prerequisites miss.",
        ),
    ] = False,
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over",
            help="Overwrite objects in the namespace that belong to another deployment (or were not created by mlenv); refused otherwise.",
        ),
    ] = False,
    skip_probe: Annotated[
        bool,
        typer.Option(
            "--skip-probe",
            help="Slurm: no one-node import probe before sbatch (sites that forbid small jobs; as slurm.import_probe: false).",
        ),
    ] = False,
    scale_down: Annotated[
        bool,
        typer.Option(
            "--scale-down",
            help="Allow --nodes below the live deployment's pod count (refused otherwise).",
        ),
    ] = False,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", help="With --dry-run client: the plan as json or yaml (one List)."
        ),
    ] = None,
) -> None:
    """Deploy a cluster config: preflight explains what is missing and a server-side dry
    run checks every object before anything is applied.

    Exit 0 deployed (or unchanged), 2 invalid config/flags, 3 cluster unreachable,
    preflight failure, dry run refused or pods not Ready by the deadline (with the reasons).
    A real deploy records the cluster in .mlenv/current-cluster for the Makefile.
    """
    if mode is not None:
        check_mode(mode)
    if dry_run not in (None, "client", "server"):
        raise InputError(f"--dry-run must be client or server, got {dry_run!r}")
    if timeout <= 0:
        raise InputError(f"--timeout must be positive, got {timeout:g}")
    fmt = check_format(output, ("json", "yaml"))
    if fmt is not None and dry_run != "client":
        raise InputError("-o/--output prints the plan: it goes with --dry-run client")
    cfg = load_config(cluster)
    if skip_probe:
        from mlenv.platforms.slurm import without_probe

        cfg = without_probe(cfg)
    # no --mode is the config's own (rdma when network.rdma.enabled, else tcp)
    platform(cfg).deploy(
        cfg,
        dataclasses.replace(session(), output=fmt),
        mode=mode or cfg.own_mode,
        nodes=nodes,
        dry_run=dry_run,
        timeout=timeout,
        no_fallback=no_fallback,
        take_over=take_over,
        scale_down=scale_down,
    )


def register(app: typer.Typer) -> None:
    """Add ``deploy`` to the app."""
    app.command("deploy")(deploy)
