"""Generated trees on disk (``k8s/<cluster>/<mode>/``): write them, check them against a
fresh render, and say why an output folder cannot be used.

Rendering is pure (``mlenv.render``); this module is the only one that writes what it
produced, so ``mlenv render``, the golden tests and anything that renders another
platform's files share one definition of "generated", "stale" and "extra". A file is
ours only when it starts with :data:`mlenv.render.serialize.HEADER_PREFIX`: hand-written
files beside it are never removed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from mlenv.render.serialize import HEADER_PREFIX


def _generated(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as f:
            return f.readline().startswith(HEADER_PREFIX)
    except (OSError, UnicodeDecodeError):
        return False


def unwritable_reason(out_dir: Path, *, writing: bool = True) -> str | None:
    """Why ``out_dir`` cannot be created or written into, or None if it looks fine.

    Checked before anything is written, so a bad ``--out`` fails with one clear line
    instead of a half-written set of trees. Looks at the deepest existing ancestor;
    ``writing=False`` (``--check`` only reads) skips the permission test.
    """
    p = out_dir
    while not p.exists():
        if p.is_symlink():
            return f"{p} is a dangling symbolic link"
        if p.parent == p:
            return None
        p = p.parent
    if not p.is_dir():
        return f"{p} exists and is not a directory"
    if writing and not os.access(p, os.W_OK | os.X_OK):
        return f"{p} is not writable"
    return None


def write_tree(files: dict[str, str], out_dir: Path) -> list[Path]:
    """Write ``files`` into ``out_dir``; remove generated files no longer rendered.

    Only files carrying our header are removed, so a hand-written file is never lost.
    Returns the paths written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in files.items():
        p = out_dir / name
        # newline="" keeps "\n" on every platform: byte-identical trees
        with p.open("w", encoding="utf-8", newline="") as f:
            f.write(content)
        written.append(p)
    for p in sorted(out_dir.glob("*.yaml")):
        if p.name not in files and _generated(p):
            p.unlink()
    return written


def check_tree(files: dict[str, str], out_dir: Path) -> list[str]:
    """Differences between ``out_dir`` and ``files``: ``path (differs|missing|extra)`` lines.

    An empty list means the committed tree is fresh.
    """
    problems = []
    for name, content in sorted(files.items()):
        p = out_dir / name
        if not p.is_file():
            problems.append(f"{p} (missing)")
        elif p.read_bytes() != content.encode("utf-8"):
            problems.append(f"{p} (differs)")
    if out_dir.is_dir():
        for p in sorted(out_dir.glob("*.yaml")):
            if p.name not in files:
                problems.append(f"{p} (extra)")
    return problems


def _marked(path: Path) -> bool:
    """Our header on the first line, or on the second after a ``#!`` line (sbatch scripts)."""
    try:
        with path.open(encoding="utf-8") as f:
            first = f.readline()
            return first.startswith(HEADER_PREFIX) or (
                first.startswith("#!") and f.readline().startswith(HEADER_PREFIX)
            )
    except (OSError, UnicodeDecodeError):
        return False


def _holds_generated(folder: Path) -> bool:
    return any(p.is_file() and _marked(p) for p in folder.rglob("*"))


def stale_paths(
    planned: Iterable[tuple[Path, dict[str, str]]],
    out_root: Path,
    known: set[str] | None = None,
    platform_roots: Iterable[tuple[Path, set[str]]] = (),
) -> list[str]:
    """Every difference between the planned trees and the disk; with ``known`` (the cluster
    names of ``--all``), also folders under ``out_root`` that no config renders any more
    (left behind by a deleted or renamed cluster). ``platform_roots``: the same
    for ``slurm/`` and ``hosts/``, each with the names that render there; a folder there
    counts only when it holds a generated file (those roots may hold the user's own)."""
    stale = [p for d, files in planned for p in check_tree(files, d)]
    extra = "(extra: no clusters/*.yaml renders it)"
    if known is not None and out_root.is_dir():
        stale += [
            f"{d}/ {extra}"
            for d in sorted(out_root.iterdir())
            if d.is_dir() and d.name not in known
        ]
    for base, names in platform_roots:
        if base.is_dir():
            stale += [
                f"{d}/ {extra}"
                for d in sorted(base.iterdir())
                if d.is_dir() and d.name not in names and _holds_generated(d)
            ]
    return stale


def extra_folders(
    out_root: Path, known: set[str], platform_roots: Iterable[tuple[Path, set[str]]] = ()
) -> list[Path]:
    """The folders :func:`stale_paths` calls extra: under ``out_root``, those no config
    renders any more; under each platform root, those among them holding a generated file."""
    found = (
        [d for d in sorted(out_root.iterdir()) if d.is_dir() and d.name not in known]
        if out_root.is_dir()
        else []
    )
    for base, names in platform_roots:
        if base.is_dir():
            found += [
                d
                for d in sorted(base.iterdir())
                if d.is_dir() and d.name not in names and _holds_generated(d)
            ]
    return found


def prune(folder: Path) -> list[Path]:
    """Remove the generated files under ``folder`` (a deleted config's tree), then the
    folders left empty; hand-written files stay, and are returned."""
    kept = []
    for p in sorted(folder.rglob("*"), reverse=True):
        if p.is_symlink() or p.is_file():
            if not p.is_symlink() and _marked(p):
                p.unlink()
            else:
                kept.append(p)
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return sorted(kept)
