"""``mlenv deploy``: validate → render → preflight → dry run → ssh Secret → apply → wait."""

from __future__ import annotations

from typing import Annotated, Literal, cast

import typer

from mlenv.cli._clusterctx import check_mode, cluster_client, load_config, remember_cluster
from mlenv.cli._common import err, guarded
from mlenv.errors import InputError


@guarded
def deploy(
    cluster: Annotated[str, typer.Argument(help="Cluster name (clusters/<name>.yaml) or config file.")],
    mode: Annotated[str, typer.Option("--mode", help="rdma or tcp.")] = "rdma",
    nodes: Annotated[int | None, typer.Option("--nodes", help="Pod count (default: gpus.default_nodes).")] = None,
    dry_run: Annotated[str | None, typer.Option("--dry-run", help="client: print the plan; server: server-side dry run.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for all pods Ready.")] = 900.0,
    no_fallback: Annotated[bool, typer.Option("--no-fallback", help="Fail instead of falling back to TCP when RDMA prerequisites miss.")] = False,
    take_over: Annotated[bool, typer.Option("--take-over", help="Overwrite objects in the namespace that belong to another deployment (or were not created by mlenv); refused otherwise.")] = False,
) -> None:
    """Deploy a cluster config: preflight explains what is missing and a server-side dry
    run checks every object before anything is applied.

    Exit 0 deployed (or unchanged), 2 invalid config/flags, 3 cluster unreachable,
    preflight failure, dry run refused or pods not Ready by the deadline (with the reasons).
    A real deploy records the cluster in .mlenv/current-cluster for the Makefile.
    """
    from mlenv.cluster.deploy import DeployOptions, DeployTimeout
    from mlenv.cluster.deploy import deploy as run_deploy
    from mlenv.config import mode_warnings
    from mlenv.render.serialize import dump_all

    check_mode(mode)
    if dry_run not in (None, "client", "server"):
        raise InputError(f"--dry-run must be client or server, got {dry_run!r}")
    if timeout <= 0:
        raise InputError(f"--timeout must be positive, got {timeout:g}")
    cfg = load_config(cluster)
    if cfg.platform in ("slurm", "hosts"):  # issue 13: sbatch the acceptance job / preflight the hosts
        from mlenv.platforms.verbs import deploy as platform_deploy

        platform_deploy(cfg, nodes=nodes, say=typer.echo, warn=err)
        return
    m = cast(Literal["rdma", "tcp"], mode)
    for w in mode_warnings(cfg, m):
        err(f"warning: {w}")
    opts = DeployOptions(mode=m, nodes=nodes, timeout=timeout, no_fallback=no_fallback,
                         take_over=take_over,
                         dry_run=cast(Literal["client", "server"] | None, dry_run))
    if dry_run == "client":
        rep = run_deploy(cfg, opts, None)
        typer.echo(dump_all(rep.manifests, sort_keys=False), nl=False)
        err(f"plan: {len(rep.manifests)} object(s) for {cfg.name} ({rep.mode}, {rep.nodes} "
            "node(s)); nothing was sent to a cluster (--dry-run client)")
        return
    with cluster_client() as client:
        try:
            rep = run_deploy(cfg, opts, client, say=typer.echo)
        except DeployTimeout:
            remember_cluster(cfg)  # applied, just not Ready: status/teardown target it
            raise
    if dry_run == "server":
        typer.echo(f"server dry run ok: {len(rep.applied)} object(s) accepted"
                   + (f"; would recreate {', '.join(rep.recreated)}" if rep.recreated else "")
                   + "; nothing changed")
        return
    remember_cluster(cfg)
    if rep.unchanged:
        typer.echo(f"unchanged: {cfg.name} is already deployed as configured "
                   f"({rep.ready}/{rep.nodes} pods Ready, {rep.mode})")
    else:
        typer.echo(f"deployed {cfg.name}: {rep.ready}/{rep.nodes} pods Ready ({rep.mode} mode"
                   + (", fell back from rdma" if rep.fallback_reasons else "") + ")")


def register(app: typer.Typer) -> None:
    """Add ``deploy`` to the app."""
    app.command("deploy")(deploy)
