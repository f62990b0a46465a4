"""The namespace of the kubeconfig's current context, read from the file(s) as kubectl
merges them: ``--kubeconfig`` (one file) or ``KUBECONFIG`` (a path list, the first file
that sets a key wins) or ``~/.kube/config``. Only read, never written; nothing is run.

`mlenv discover` defaults to it, as upstream's `discover_cluster.py` did (it read
`oc project -q`): the namespace you work in, not a fixed name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# a kubeconfig larger than this is not one (and would not be read whole)
MAX_BYTES = 4 * 1024 * 1024


def _files(kubeconfig: str | None) -> list[Path]:
    if kubeconfig:
        return [Path(kubeconfig)]
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        return [Path(p) for p in listed.split(os.pathsep) if p]
    return [Path.home() / ".kube" / "config"]


def _load(path: Path) -> dict[str, Any]:
    import yaml

    try:
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            return {}
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return doc if isinstance(doc, dict) else {}


def current_namespace(kubeconfig: str | None = None, context: str | None = None) -> str | None:
    """The namespace set on ``context`` (default: the current context), or None when the
    files name none (kubectl then uses ``default``)."""
    docs = [_load(p) for p in _files(kubeconfig)]
    wanted = context or next(
        (str(d["current-context"]) for d in docs if d.get("current-context")), None
    )
    if not wanted:
        return None
    for doc in docs:
        for entry in doc.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == wanted:
                ns = (entry.get("context") or {}).get("namespace")
                return str(ns) if ns else None
    return None
