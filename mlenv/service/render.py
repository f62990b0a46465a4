"""``mlenv render`` below the CLI: load the configs, render and validate every tree
(:func:`plan`), then compare them with what is on disk (:func:`check`) or write them
(:func:`write`). Everything is rendered and validated before anything is written: a bad
manifest or an unwritable folder leaves the trees untouched.

The functions take checked flags, raise the typed errors of :mod:`mlenv.errors`
(InputError: a bad config, ``--out`` or checkout; InfraError: a write that fails midway)
and say their lines through a :class:`~mlenv.service.Notifier`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlenv.errors import InfraError, InputError
from mlenv.render.tree import MODES
from mlenv.service import Notifier

if TYPE_CHECKING:
    from mlenv.config.model import Cluster
    from mlenv.platforms.base import Session

__all__ = ["MODES", "RenderPlan", "Staleness", "check", "plan", "write"]


@dataclass(frozen=True)
class RenderPlan:
    """Every tree rendered and validated, not yet written: ``planned`` is (folder, files)."""

    root: Path  # the checkout
    out_root: Path  # k8s/, or --out
    out: Path | None
    every: bool  # --all: the trees of every config (and those of deleted ones are extra)
    clusters: list[Cluster]
    planned: list[tuple[Path, Any]]
    # slurm/ and hosts/ beside k8s/, with the names rendered there (--all without --out)
    platform_roots: list[tuple[Path, set[str]]] = field(default_factory=list)

    @property
    def known(self) -> set[str]:
        return {c.name for c in self.clusters}


@dataclass(frozen=True)
class Staleness:
    """What :func:`check` found: each path that differs from a fresh render, with how
    (``k8s/x/tcp/pod.yaml (missing)``), and whether some are trees of configs no longer in
    ``clusters/`` (``--prune`` removes those)."""

    differences: list[str]
    extra: bool = False


def plan(
    root: Path,
    s: Session,
    *,
    cluster: str | None,
    modes: tuple[str, ...],
    nodes: int | None,
    out: Path | None,
    writing: bool,
    say: Notifier,
) -> RenderPlan:
    """Load ``cluster`` (None: every ``clusters/*.yaml``), render each tree its platform
    writes (k8s/<c>/<mode>/, or slurm/<c>/ and hosts/<c>/ beside it) and check that each
    folder can be written (``writing``) or read. The configs' warnings are said here."""
    from mlenv.config import loader
    from mlenv.errors import Diagnostic
    from mlenv.generated import unwritable_reason
    from mlenv.platforms.dispatch import platform_for

    every = cluster is None
    warnings: list[Diagnostic] = []
    if every:
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
        if out is None and writing:
            loader.refuse_other_tree(clusters[0], root)
    for w in warnings:
        say.err(w.format())
    out_root = out if out is not None else root / "k8s"
    planned: list[tuple[Path, Any]] = []
    for c in clusters:
        planned += platform_for(c).render(c, s, modes=modes, nodes=nodes, out=out)
    flag = "--out" if out is not None else "output folder"
    for d, _ in planned:
        why = unwritable_reason(d, writing=writing)
        if why is not None:
            raise InputError(f"{flag} {out_root}: cannot write {d}: {why}")
    return RenderPlan(
        root, out_root, out, every, clusters, planned, _platform_roots(root, every, out, planned)
    )


def _platform_roots(
    root: Path, every: bool, out: Path | None, planned: list[tuple[Path, Any]]
) -> list[tuple[Path, set[str]]]:
    """slurm/ and hosts/ with the names rendered there: with ``--all`` into the checkout,
    the trees of deleted configs there are extra too."""
    if not every or out is not None:
        return []
    from mlenv.render.platforms import PLATFORM_ROOTS

    roots = []
    for folder in sorted(set(PLATFORM_ROOTS.values())):
        base = root / folder
        roots.append((base, {d.name for d, _ in planned if d.parent == base}))
    return roots


def check(p: RenderPlan) -> Staleness:
    """``--check``: what on disk differs from the plan (nothing is written)."""
    from mlenv.generated import extra_folders, stale_paths

    stale = stale_paths(p.planned, p.out_root, p.known if p.every else None, p.platform_roots)
    if not stale:
        return Staleness([])
    extra = p.every and bool(extra_folders(p.out_root, p.known, p.platform_roots))
    return Staleness(stale, extra)


def write(p: RenderPlan, *, prune: bool, say: Notifier) -> None:
    """Write every tree, then (``prune``) remove the generated files of trees no config
    renders any more, then say how to install each scheduled re-check rendered."""
    from mlenv.generated import extra_folders
    from mlenv.render.platforms import recheck_hints

    _write_all(p.planned, p.root, say)
    if prune:
        _prune(p.root, extra_folders(p.out_root, p.known, p.platform_roots), say)
    for line in recheck_hints(p.root, p.clusters, p.out):
        say.out(line)


def _write_all(planned: list[tuple[Path, Any]], root: Path, say: Notifier) -> None:
    """Write every tree, then say so: a reader that leaves early (`render --all | head -1`)
    ended the command after the first tree when each was announced as written."""
    from mlenv.generated import write_tree

    done: list[str] = []
    for d, files in planned:
        try:
            write_tree(files, d)
        except OSError as e:
            for line in done:
                say.out(line)
            raise InfraError(f"cannot write {e.filename or d}: {e.strerror or e}") from None
        shown = d.relative_to(root) if d.is_relative_to(root) else d
        done.append(f"wrote {len(files)} files to {shown}/")
    for line in done:
        say.out(line)


def _prune(root: Path, folders: list[Path], say: Notifier) -> None:
    """--prune: the generated files of trees no config renders any more, and their folders."""
    from mlenv.generated import prune

    for d in folders:
        kept = prune(d)
        shown = d.relative_to(root) if d.is_relative_to(root) else d
        say.out(f"removed the generated files of {shown}/ (no clusters/*.yaml renders it)")
        for p in kept:
            say.err(f"kept {p}: not generated by mlenv render")
