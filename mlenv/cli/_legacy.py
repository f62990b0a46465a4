"""``mlenv teardown --legacy``: list upstream ml-dev-env's objects, confirm, remove (i10.3).

Kept apart from cmd_teardown so the migration logic stays in one place; not a verb."""

from __future__ import annotations

import typer

from mlenv.cli._clusterctx import cluster_client
from mlenv.config.model import Cluster as ClusterConfig


def teardown_legacy(cfg: ClusterConfig, *, purge: bool, yes: bool) -> None:
    """List, ask (unless ``yes``), delete; PVCs only with ``purge``."""
    from mlenv.cluster import legacy

    with cluster_client() as client:
        objs = legacy.find(client, cfg.namespace)
        if not objs:
            typer.echo(f"no upstream ml-dev-env objects in namespace {cfg.namespace}")
            return
        typer.echo(f"upstream ml-dev-env objects in namespace {cfg.namespace}:")
        for o in objs:
            keep = o.kind == "PersistentVolumeClaim" and not purge
            typer.echo(f"  {o.ref} ({o.why}){': kept (--purge deletes it and its data)' if keep else ''}")
        if not yes:
            try:
                ok = typer.confirm("delete the objects listed (not the kept ones)?", default=False)
            except typer.Abort:  # no terminal to answer from (EOF): the listing is the answer
                ok = False
            if not ok:
                typer.echo("\nnothing deleted (answer y, or pass --yes)")
                return
        deleted, kept = legacy.remove(client, cfg.namespace, objs, purge=purge)
    for d in deleted:
        typer.echo(f"deleted {d}")
    typer.echo(f"legacy teardown: {len(deleted)} object(s) deleted"
               + (f"; {len(kept)} PVC(s) kept (--purge deletes them)" if kept else ""))
