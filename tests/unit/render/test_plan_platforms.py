"""what `platform: kubernetes` renders (and so what deploy applies) holds no OpenShift kind."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mlenv.config import load
from mlenv.config.model import Cluster, Mode
from mlenv.render.plan import openshift_features_off, render_cluster

ROOT = Path(__file__).resolve().parents[3]

OPENSHIFT_KINDS = {"SecurityContextConstraints", "ImageStream", "BuildConfig", "Route"}


@pytest.fixture
def barcelona() -> Cluster:
    return load("barcelona", ROOT)


@pytest.mark.parametrize("mode", ["rdma", "tcp"])
def test_plain_kubernetes_renders_no_openshift_kind(barcelona, mode: Mode) -> None:
    on_openshift = {m["kind"] for m in render_cluster(barcelona, mode)}
    assert {"ImageStream", "BuildConfig"} <= on_openshift  # the same config on OpenShift has them
    plain = dataclasses.replace(barcelona, platform="kubernetes")
    kinds = {m["kind"] for m in render_cluster(plain, mode)}
    assert not kinds & OPENSHIFT_KINDS, kinds & OPENSHIFT_KINDS
    assert "StatefulSet" in kinds and "Service" in kinds
    # no binding to an SCC role either: nothing on plain Kubernetes serves it
    assert not [
        m
        for m in render_cluster(plain, mode)
        if m["kind"] in ("ClusterRole", "RoleBinding") and "scc" in str(m).lower()
    ]


def test_the_features_left_off_are_said(barcelona) -> None:
    assert openshift_features_off(barcelona) == []
    off = openshift_features_off(dataclasses.replace(barcelona, platform="kubernetes"))
    assert any("image build" in o for o in off) and any("SCC" in o for o in off)
