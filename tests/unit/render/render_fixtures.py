"""Cluster models built in code for the render tests (the loader is tested elsewhere).

A plain module (not conftest) so tests import the helpers by name."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mlenv.config.model import (
    Cluster,
    ClusterInfo,
    DevTools,
    ExtendedResource,
    Gpus,
    Nccl,
    Rdma,
    ResourceList,
    Resources,
    Storage,
)


def rdma_cluster(**overrides: Any) -> Cluster:
    """A barcelona-like cluster: RDMA, 4 GPUs/node, per-pod storage, pinned nodes."""
    base = Cluster(
        cluster=ClusterInfo(name="barcelona", namespace="nccl-test", description="H100 lab"),
        gpu_nodes=("gpu-a", "gpu-b", "gpu-c"),
        storage=Storage(mode="volumeClaimTemplates", class_rwo="local-nvme"),
        rdma=Rdma(
            enabled=True,
            devices=("mlx5_6", "mlx5_7"),
            interfaces=("net1", "net2"),
            min_nchannels=4,
            resources=(ExtendedResource("rdma/rdma_shared_device_a", 1),),
            networks=("nccl-test/rdma-net-1", "nccl-test/rdma-net-2"),
        ),
        gpus=Gpus(per_node=4, type="H100-80GB", default_nodes=2),
        resources=Resources(
            requests=ResourceList(cpu="32", memory="256Gi"), limits=ResourceList(memory="512Gi")
        ),
        nccl=Nccl(debug="INFO", extra_env=(("NCCL_ALGO", "Ring"),)),
    )
    return replace(base, **overrides)


def tcp_cluster(**overrides: Any) -> Cluster:
    """A TCP-only cluster with shared RWX storage and every dev tool on."""
    base = Cluster(
        cluster=ClusterInfo(name="tcp-lab", namespace="ml-team"),
        storage=Storage(mode="rwx", class_rwx="cephfs"),
        gpus=Gpus(per_node=8, default_nodes=3),
        dev_tools=DevTools(vscode=True, jupyter=True, tensorboard=True),
    )
    return replace(base, **overrides)


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The manifests of one kind."""
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The single manifest of ``kind`` (fails if there are zero or several)."""
    found = by_kind(manifests, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """name → value (or valueFrom) of a container's env."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
