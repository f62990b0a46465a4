"""Hostile values in free-text and pass-through fields never change a manifest's structure."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from render_fixtures import one, rdma_cluster, tcp_cluster

from mlenv.config.model import ClusterInfo, ImageBuild, Nccl
from mlenv.render import names
from mlenv.render.plan import render_cluster
from mlenv.render.tree import render_tree

HOSTILE = [
    "say \"hi\" and 'bye'",
    "line one\nkind: Secret\n---\napiVersion: v1",
    "{{ cluster.name }} {% if true %}x{% endif %}",
    "key: value # not a comment",
    "#!/bin/sh\n- item\n? complex\n&anchor *alias !!python/object",
    "  leading and trailing spaces  ",
    "\u00e9\u00e8 \u2014 \U0001f680 <script>&amp;",
    "sep\u2028next\x85nel\ttab\x00nul\\ud83d backslash-u",
]


def _structure(obj: object) -> object:
    """The shape of a document: keys and types, values erased."""
    if isinstance(obj, dict):
        return {k: _structure(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_structure(v) for v in obj]
    return type(obj).__name__


@pytest.mark.parametrize("value", HOSTILE)
def test_free_text_round_trips_verbatim(value):
    c = rdma_cluster(
        cluster=ClusterInfo(name="barcelona", namespace="nccl-test", description=value),
        notes=value,
        nccl=Nccl(debug="INFO", extra_env=(("NCCL_ALGO", value),)),
    )
    plain = rdma_cluster(
        cluster=ClusterInfo(name="barcelona", namespace="nccl-test", description="x"),
        notes="x",
        nccl=Nccl(debug="INFO", extra_env=(("NCCL_ALGO", "x"),)),
    )
    hostile, ref = render_cluster(c, "rdma"), render_cluster(plain, "rdma")
    assert [_structure(m) for m in hostile] == [_structure(m) for m in ref]
    sa = one(hostile, "ServiceAccount")  # from a template
    assert sa["metadata"]["annotations"][names.ANNOTATION_DESCRIPTION] == value
    assert sa["metadata"]["annotations"][names.ANNOTATION_NOTES] == value
    env = one(hostile, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "NCCL_ALGO", "value": value} in env


@pytest.mark.parametrize("value", HOSTILE)
def test_template_fields_round_trip_through_files(value):
    """Values inserted by templates (BuildConfig git fields) survive render → YAML files → parse."""
    base = tcp_cluster()
    c = replace(
        base,
        image=replace(
            base.image,
            build=ImageBuild(git_uri="https://x/" + value, git_ref=value, dockerfile_path=value),
        ),
        notes=value,
    )
    files = render_tree(c, "tcp")
    docs = list(yaml.safe_load_all(files["buildconfig.yaml"]))
    assert len(docs) == 1
    git = docs[0]["spec"]["source"]["git"]
    assert git == {"uri": "https://x/" + value, "ref": value}
    assert docs[0]["spec"]["strategy"]["dockerStrategy"]["dockerfilePath"] == value
    sa = list(yaml.safe_load_all(files["serviceaccount.yaml"]))
    assert len(sa) == 1 and sa[0]["metadata"]["annotations"][names.ANNOTATION_NOTES] == value
