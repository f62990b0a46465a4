"""Fixtures: real example configs (clusters/*.yaml) and a fake cluster that fits them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlenv.cluster.fake import FakeCluster
from mlenv.config import load
from mlenv.config.model import Cluster as ClusterConfig

ROOT = Path(__file__).resolve().parents[3]


def fake_for(cfg: ClusterConfig, *, nodes: int | None = None, rdma: bool = True) -> FakeCluster:
    """A fake that satisfies every preflight check of ``cfg`` (tests then break one thing)."""
    names = list(cfg.gpu_nodes) or [f"gpu-{i}" for i in range(nodes or cfg.gpus.default_nodes)]
    fake = FakeCluster.typical(
        cfg.namespace, names, gpus=cfg.gpus.per_node,
        resources={r.name: r.count for r in cfg.rdma.resources} if rdma else None,
        networks=cfg.rdma.networks if rdma else (),
        storage_classes=["standard"])
    for sc in {cfg.storage.class_rwx, cfg.storage.class_rwo} - {""}:
        fake.add_storage_class(sc)
    if cfg.cluster.api:
        fake.server_url = cfg.cluster.api if "://" in cfg.cluster.api else f"https://{cfg.cluster.api}"
    return fake


@pytest.fixture
def barcelona() -> ClusterConfig:
    """The RDMA example: 4 pinned nodes, RoCE networks, per-pod volumes."""
    return load("barcelona", ROOT)


@pytest.fixture
def local_cfg() -> ClusterConfig:
    """The TCP demo profile."""
    return load("local", ROOT)


@pytest.fixture(name="fake_for")
def fake_for_fixture():  # type: ignore[no-untyped-def]
    """The :func:`fake_for` factory, as a fixture."""
    return fake_for
