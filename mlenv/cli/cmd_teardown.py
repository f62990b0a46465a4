"""``mlenv teardown``: delete this deployment's objects (by label) and nothing else."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session
from mlenv.cli._common import guarded
from mlenv.cli._output import check_format
from mlenv.errors import InputError


@guarded
def teardown(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    purge: Annotated[
        bool,
        typer.Option(
            "--purge",
            help="Also delete the PVCs (workspace and datasets data) and the image build (BuildConfig, ImageStream).",
        ),
    ] = False,
    legacy: Annotated[
        bool,
        typer.Option(
            "--legacy", help="Remove upstream ml-dev-env's objects instead (listed first)."
        ),
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="With --legacy: no confirmation prompt.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be deleted and kept; delete nothing.")
    ] = False,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="With --dry-run: the lists as json or yaml."),
    ] = None,
) -> None:
    """Delete everything labelled app.kubernetes.io/instance=<cluster>, name=ml-dev-env.
    PVCs (volumeClaimTemplate ones too) and the image build (BuildConfig, ImageStream) are
    kept unless --purge. Cluster-scoped objects
    you may not delete (the RDMA SCC, its ClusterRole) are named as left behind.
    --dry-run reads the same objects and decides the same way, and deletes nothing."""
    if dry_run and legacy:
        raise InputError(
            "--dry-run lists what an OpenShift/Kubernetes teardown would delete; "
            "--legacy lists what it would remove and asks first (answer no to "
            "change nothing)"
        )
    fmt = check_format(output, ("json", "yaml"))
    if fmt is not None and not dry_run:
        raise InputError("-o/--output prints what would be deleted: it goes with --dry-run")
    cfg = load_config(cluster)
    s = dataclasses.replace(session(), output=fmt)
    platform(cfg).teardown(cfg, s, purge=purge, dry_run=dry_run, legacy=legacy, yes=yes)


def register(app: typer.Typer) -> None:
    """Add ``teardown`` to the app."""
    app.command("teardown")(teardown)
