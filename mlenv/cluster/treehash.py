"""The tree checksum ``sync`` compares across pods.

``SCRIPT`` runs inside each pod (``python3 -c SCRIPT ROOT``) and prints one hex
digest; :func:`digest_files` computes the same digest from an in-memory mapping (the
fake's pod filesystem, or a local tree read by :func:`local_files`). A unit test runs
the real script over a real directory and checks the two agree.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping

# Paths never synced nor compared: ``results/`` at the top of the tree (runs write there
# in the pods; a ``results`` folder deeper down is ordinary content) and caches at any
# depth. As rsync patterns: a leading "/" anchors at the top, a bare name matches at any
# depth. ``excluded``, ``SCRIPT`` and the kubectl prune step follow the same rules, so the
# checksum never compares a path the copy skipped.
RSYNC_EXCLUDES = ("/results", "__pycache__", ".git")

# Kept dependency-free and short: it runs with the pod image's python3.
SCRIPT = r"""
import hashlib, os, sys
root = sys.argv[1]
entries = []
for d, dirs, files in os.walk(root):
    dirs[:] = sorted(x for x in dirs if not (d == root and x == "results") and x not in ("__pycache__", ".git"))
    for f in files:
        p = os.path.join(d, f)
        with open(p, "rb") as fh:
            h = hashlib.sha256(fh.read()).hexdigest()
        entries.append((os.path.relpath(p, root).replace(os.sep, "/"), h))
t = hashlib.sha256()
for rel, h in sorted(entries):
    t.update(rel.encode() + b"\0" + h.encode() + b"\n")
print(len(entries), t.hexdigest())
"""


def excluded(rel: str) -> bool:
    """True for paths the sync neither copies nor compares (``results/`` at the top, caches)."""
    parts = rel.split("/")
    if parts[0] == "results" and len(parts) > 1:
        return True
    return any(p in ("__pycache__", ".git") for p in parts[:-1])


def digest_files(files: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> str:
    """``"<count> <sha256>"`` over relative path → content, as ``SCRIPT`` prints it."""
    items = files.items() if isinstance(files, Mapping) else files
    entries = sorted((rel, hashlib.sha256(data).hexdigest())
                     for rel, data in items if not excluded(rel))
    t = hashlib.sha256()
    for rel, h in entries:
        t.update(rel.encode() + b"\0" + h.encode() + b"\n")
    return f"{len(entries)} {t.hexdigest()}"


def local_files(root: str) -> dict[str, bytes]:
    """Read a local tree into relative path → content (excluded paths left out)."""
    out: dict[str, bytes] = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in files:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if excluded(rel):
                continue
            with open(p, "rb") as fh:
                out[rel] = fh.read()
    return out
