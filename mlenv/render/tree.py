"""One call from a Cluster to the validated files of ``k8s/<cluster>/<mode>/`` (pure).

Shared by ``mlenv render`` (writes or checks them) and the golden-file tests.
"""

from __future__ import annotations

from pathlib import Path

from mlenv.config.model import Cluster, Mode
from mlenv.render.plan import render_cluster
from mlenv.render.serialize import header, render_files
from mlenv.render.validate import validate_manifests

MODES: tuple[Mode, ...] = ("rdma", "tcp")


def source_label(cluster: Cluster) -> str:
    """``clusters/<file>`` for the header; stable whatever the current directory is."""
    if cluster.source is None:
        return f"clusters/{cluster.name}.yaml"
    src = Path(cluster.source)
    return f"{src.parent.name}/{src.name}" if src.parent.name else src.name


def out_dir(root: Path, cluster: Cluster, mode: Mode) -> Path:
    """``<root>/<cluster>/<mode>``: the requested mode names the folder even if it fell back."""
    return root / cluster.name / mode


def render_tree(cluster: Cluster, mode: Mode, nodes: int | None = None) -> dict[str, str]:
    """Render, validate (InputError if invalid) and serialise: file name → content."""
    src = source_label(cluster)
    manifests = render_cluster(cluster, mode, nodes, validate=False)
    validate_manifests(manifests, f"{src} (mode {mode})")
    regen = f"mlenv render {cluster.name} --mode {mode}" + (
        f" --nodes {nodes}" if nodes is not None else ""
    )
    return render_files(manifests, header(src, regen))
