"""``mlenv render``: write (or ``--check``) the manifests of ``k8s/<cluster>/<mode>/``.

The verb checks its flags and prints; loading, rendering, comparing and writing are
:mod:`mlenv.service.render`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlenv.cli._clusterctx import session
from mlenv.cli._common import err, guarded, note, repo_root
from mlenv.errors import EXIT_FAIL, InputError, did_you_mean
from mlenv.service import Notifier

# The service's lines: what was written on stdout (typer.echo: a reader that leaves early
# ends the command, exit 141), warnings and kept files on stderr.
SAY = Notifier(out=typer.echo, note=note, err=err)


@guarded
def render(
    cluster: Annotated[
        str | None, typer.Argument(help="Cluster name (clusters/<name>.yaml) or config file.")
    ] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="rdma or tcp; default: both.")] = None,
    nodes: Annotated[
        int | None, typer.Option("--nodes", help="Pod count (default: gpus.default_nodes).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Root folder instead of k8s/ (→ DIR/<cluster>/<mode>/)."),
    ] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Every clusters/*.yaml in both modes.")
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Write nothing; exit 1 if the tree differs from a fresh render."
        ),
    ] = False,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="With --all: also remove the generated trees of configs no longer in clusters/.",
        ),
    ] = False,
) -> None:
    """Render validated manifests into k8s/<cluster>/<mode>/ (one file per kind + kustomization.yaml).

    Everything is rendered and validated before anything is written. Exit 0 ok, 1 stale
    tree (--check), 2 invalid config/flags/manifests or an output folder that is not a
    writable directory, 3 a write that fails midway (disk full, I/O error).
    """
    from mlenv.service import render as service

    if all_ == (cluster is not None):
        raise InputError("give exactly one of CLUSTER or --all")
    if all_ and nodes is not None:
        raise InputError("--nodes applies to one cluster; it cannot be combined with --all")
    if prune and (not all_ or check):
        raise InputError(
            "--prune goes with --all, without --check (it removes what --check calls extra)"
        )
    if mode is not None and mode not in service.MODES:
        raise InputError(
            f"--mode must be one of {', '.join(service.MODES)}, got {mode!r}"
            f"{did_you_mean(mode, service.MODES)}"
        )
    plan = service.plan(
        Path(repo_root()),
        session(),
        cluster=None if all_ else cluster,
        modes=service.MODES if mode is None else (mode,),
        nodes=nodes,
        out=out,
        writing=not check,
        say=SAY,
    )
    if check:
        stale = service.check(plan)
        if stale.differences:
            for p in stale.differences:
                err(f"stale: {p}")
            how = (
                "mlenv render --all --prune (make render-all PRUNE=1)"
                if stale.extra
                else ("mlenv render --all (make render-all)")
            )
            err(f"the rendered manifests are out of date; regenerate with: {how} and commit them")
            raise typer.Exit(EXIT_FAIL)
        typer.echo(f"{len(plan.planned)} manifest tree(s) up to date under {plan.out_root}")
        return
    service.write(plan, prune=prune, say=SAY)


def register(app: typer.Typer) -> None:
    """Add ``render`` to the app."""
    app.command("render")(render)
