"""``mlenv render``: write (or ``--check``) the manifests of ``k8s/<cluster>/<mode>/``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlenv.cli._common import err, guarded, repo_root
from mlenv.errors import EXIT_FAIL, InputError


@guarded
def render(
    cluster: Annotated[str | None, typer.Argument(help="Cluster name (clusters/<name>.yaml) or config file.")] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="rdma or tcp; default: both.")] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", help="Pod count (default: gpus.default_nodes).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Root folder instead of k8s/ (→ DIR/<cluster>/<mode>/).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every clusters/*.yaml in both modes.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 if the tree differs from a fresh render.")] = False,
) -> None:
    """Render validated manifests into k8s/<cluster>/<mode>/ (one file per kind + kustomization.yaml).

    Everything is rendered and validated before anything is written. Exit 0 ok, 1 stale
    tree (--check), 2 invalid config/flags/manifests.
    """
    from mlenv.config import loader
    from mlenv.render.tree import MODES, out_dir, render_tree
    from mlenv.render.write import check_tree, write_tree

    if all_ == (cluster is not None):
        raise InputError("give exactly one of CLUSTER or --all")
    if all_ and nodes is not None:
        raise InputError("--nodes applies to one cluster; it cannot be combined with --all")
    if mode is not None and mode not in MODES:
        raise InputError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    modes = MODES if mode is None else (mode,)  # type: ignore[assignment]
    root = Path(repo_root())
    clusters = loader.load_all(root) if all_ else [loader.load(cluster or "", root)]
    out_root = out if out is not None else root / "k8s"

    # render + validate everything first: a bad manifest must leave the tree untouched
    planned = []
    for c in clusters:
        for m in modes:
            if not all_:
                for w in loader.mode_warnings(c, m):
                    err(f"warning: {w}")
            planned.append((out_dir(out_root, c, m), render_tree(c, m, nodes)))

    if check:
        stale = [p for d, files in planned for p in check_tree(files, d)]
        if all_ and out_root.is_dir():
            # a tree left behind by a deleted or renamed cluster config
            known = {c.name for c in clusters}
            stale += [f"{d}/ (extra: no clusters/*.yaml renders it)"
                      for d in sorted(out_root.iterdir()) if d.is_dir() and d.name not in known]
        if stale:
            for p in stale:
                err(f"stale: {p}")
            err("the rendered manifests are out of date; regenerate with: mlenv render --all "
                "(or make render-all) and commit k8s/")
            raise typer.Exit(EXIT_FAIL)
        typer.echo(f"{len(planned)} manifest tree(s) up to date under {out_root}")
        return
    for d, files in planned:
        write_tree(files, d)
        shown = d.relative_to(root) if d.is_relative_to(root) else d
        typer.echo(f"wrote {len(files)} files to {shown}/")


def register(app: typer.Typer) -> None:
    """Add ``render`` to the app."""
    app.command("render")(render)
