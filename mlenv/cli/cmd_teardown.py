"""``mlenv teardown``: delete this deployment's objects (by label) and nothing else."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import cluster_client, load_config
from mlenv.cli._common import err, guarded
from mlenv.errors import InputError


@guarded
def teardown(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    purge: Annotated[bool, typer.Option("--purge", help="Also delete the PVCs (workspace and datasets data).")] = False,
    legacy: Annotated[bool, typer.Option("--legacy", help="Remove upstream ml-dev-env's objects instead (listed first).")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="With --legacy: no confirmation prompt.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted and kept; delete nothing.")] = False,
) -> None:
    """Delete everything labelled app.kubernetes.io/instance=<cluster>, name=ml-dev-env.
    PVCs (volumeClaimTemplate ones too) are kept unless --purge. Cluster-scoped objects
    you may not delete (the RDMA SCC, its ClusterRole) are named as left behind.
    --dry-run reads the same objects and decides the same way, and deletes nothing."""
    from mlenv.cluster.teardown import teardown as run_teardown

    cfg = load_config(cluster)
    if dry_run and (legacy or cfg.platform in ("slurm", "hosts")):
        raise InputError("--dry-run lists what an OpenShift/Kubernetes teardown would delete; "
                         "--legacy lists what it would remove and asks first (answer no to "
                         "change nothing)" if legacy else
                         f"--dry-run: not for platform {cfg.platform} (nothing to list)")
    if cfg.platform in ("slurm", "hosts"):  # issue 13: scancel the recorded job
        from mlenv.platforms.verbs import teardown as platform_teardown

        platform_teardown(cfg, say=typer.echo)
        return
    if legacy:
        from mlenv.cli._legacy import teardown_legacy

        teardown_legacy(cfg, purge=purge, yes=yes)
        return
    with cluster_client() as client:
        rep = run_teardown(cfg, client, purge=purge, dry_run=dry_run)
    if dry_run:
        for d in rep.deleted:
            typer.echo(f"would delete {d}")
        for left in rep.left:
            typer.echo(f"would keep {left}")
        typer.echo(f"teardown of {cfg.name} (dry run): {len(rep.deleted)} object(s) would be "
                   "deleted" + ("" if purge else "; PVCs kept (--purge deletes them)")
                   + "; nothing was changed")
        return
    for d in rep.deleted:
        typer.echo(f"deleted {d}")
    for left in rep.left:
        err(f"warning: left behind: {left}")
    typer.echo(f"teardown of {cfg.name}: {len(rep.deleted)} object(s) deleted"
               + ("" if purge else "; PVCs kept (--purge deletes them)")
               + (f"; {len(rep.left)} left behind (see above)" if rep.left else ""))


def register(app: typer.Typer) -> None:
    """Add ``teardown`` to the app."""
    app.command("teardown")(teardown)
