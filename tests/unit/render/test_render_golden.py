"""Golden files: the committed k8s/ tree IS the golden tree (regenerate: make render-all)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlenv.config import cluster_files, load
from mlenv.generated import check_tree
from mlenv.render.tree import MODES, out_dir, render_tree

REPO = Path(__file__).resolve().parents[3]
FILES = cluster_files(REPO)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_committed_tree_matches_a_fresh_render(path, mode):
    cluster = load(path)
    files = render_tree(cluster, mode)
    stale = check_tree(files, out_dir(REPO / "k8s", cluster, mode))
    assert stale == [], "k8s/ is stale; regenerate with `make render-all` and commit it"


def test_every_rendered_cluster_has_a_config():
    rendered = {p.name for p in (REPO / "k8s").iterdir() if p.is_dir()}
    assert FILES, "no example clusters/*.yaml"
    assert rendered == {load(p).name for p in FILES}
