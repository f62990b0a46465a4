"""``mlenv render``: write (or ``--check``) the manifests of ``k8s/<cluster>/<mode>/``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mlenv.cli._clusterctx import platform, session
from mlenv.cli._common import err, guarded, repo_root
from mlenv.errors import EXIT_FAIL, InputError, did_you_mean


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
    from mlenv.config import loader
    from mlenv.errors import Diagnostic
    from mlenv.generated import extra_folders, stale_paths, unwritable_reason
    from mlenv.render.tree import MODES

    if all_ == (cluster is not None):
        raise InputError("give exactly one of CLUSTER or --all")
    if all_ and nodes is not None:
        raise InputError("--nodes applies to one cluster; it cannot be combined with --all")
    if prune and (not all_ or check):
        raise InputError(
            "--prune goes with --all, without --check (it removes what --check calls extra)"
        )
    if mode is not None and mode not in MODES:
        raise InputError(
            f"--mode must be one of {', '.join(MODES)}, got {mode!r}{did_you_mean(mode, MODES)}"
        )
    modes = MODES if mode is None else (mode,)
    root = Path(repo_root())
    warnings: list[Diagnostic] = []
    if all_:
        # outside a checkout `--all --check` checked 0 trees and said "up to date"
        if not (root / "clusters").is_dir():
            raise InputError(
                f"--all: no clusters/ folder in {root} or above: run inside a "
                "checkout (or set MLENV_ROOT)"
            )
        clusters = loader.load_all(root, warnings=warnings)
        if not clusters:
            raise InputError(f"--all: {root / 'clusters'} holds no cluster config (*.yaml)")
    else:
        clusters = [loader.load(cluster or "", root, warnings=warnings)]
        if out is None and not check:
            loader.refuse_other_tree(clusters[0], root)
    for w in warnings:
        err(w.format())
    out_root = out if out is not None else root / "k8s"

    # render + validate everything first: a bad manifest must leave the tree untouched
    planned: list[tuple[Path, Any]] = []
    s = session()
    for c in clusters:  # k8s/<c>/<mode>/, or slurm/<c>/ and hosts/<c>/ beside it
        planned += platform(c).render(c, s, modes=modes, nodes=nodes, out=out)
    flag = "--out" if out is not None else "output folder"
    for d, _ in planned:
        why = unwritable_reason(d, writing=not check)
        if why is not None:
            raise InputError(f"{flag} {out_root}: cannot write {d}: {why}")

    platform_roots: list[tuple[Path, set[str]]] = []
    if all_ and out is None:  # slurm/<name>/ and hosts/<name>/ of deleted configs too
        from mlenv.render.platforms import PLATFORM_ROOTS

        for folder in sorted(set(PLATFORM_ROOTS.values())):
            base = root / folder
            platform_roots.append((base, {d.name for d, _ in planned if d.parent == base}))
    known = {c.name for c in clusters}
    if check:
        stale = stale_paths(planned, out_root, known if all_ else None, platform_roots)
        if stale:
            for p in stale:
                err(f"stale: {p}")
            extra = all_ and extra_folders(out_root, known, platform_roots)
            how = (
                "mlenv render --all --prune (make render-all PRUNE=1)"
                if extra
                else ("mlenv render --all (make render-all)")
            )
            err(f"the rendered manifests are out of date; regenerate with: {how} and commit them")
            raise typer.Exit(EXIT_FAIL)
        typer.echo(f"{len(planned)} manifest tree(s) up to date under {out_root}")
        return
    _write_all(planned, root)
    if prune:
        _prune(root, extra_folders(out_root, known, platform_roots))
    _recheck_hints(root, clusters, out)


def _write_all(planned: list[tuple[Path, Any]], root: Path) -> None:
    """Write every tree, then say so: a reader that leaves early (`render --all | head -1`)
    ended the command after the first tree when each was announced as written."""
    from mlenv.errors import InfraError
    from mlenv.generated import write_tree

    done: list[str] = []
    for d, files in planned:
        try:
            write_tree(files, d)
        except OSError as e:
            for line in done:
                typer.echo(line)
            raise InfraError(f"cannot write {e.filename or d}: {e.strerror or e}") from None
        shown = d.relative_to(root) if d.is_relative_to(root) else d
        done.append(f"wrote {len(files)} files to {shown}/")
    for line in done:
        typer.echo(line)


def _prune(root: Path, folders: list[Path]) -> None:
    """--prune: the generated files of trees no config renders any more, and their folders."""
    from mlenv.generated import prune

    for d in folders:
        kept = prune(d)
        shown = d.relative_to(root) if d.is_relative_to(root) else d
        typer.echo(f"removed the generated files of {shown}/ (no clusters/*.yaml renders it)")
        for p in kept:
            err(f"kept {p}: not generated by mlenv render")


def _recheck_hints(root: Path, clusters: list[Any], out: Path | None) -> None:
    """how to install each slurm/hosts cluster's scheduled re-check (render wrote it)."""
    from mlenv.render.platforms import recheck_hints

    for line in recheck_hints(root, clusters, out):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add ``render`` to the app."""
    app.command("render")(render)
