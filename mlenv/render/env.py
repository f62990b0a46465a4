"""Environment variables the pods get: NCCL settings from the config, plus the MLENV_* contract.

``nccl_env`` is the single place NCCL_* values are derived from a config; the pod runtime
(``.deepspeed_env``) and the acceptance report read the result, they never re-derive it.
"""

from __future__ import annotations

from typing import Any

from mlenv import contract
from mlenv.config.model import Cluster, Mode
from mlenv.render import names


def nccl_env(cluster: Cluster, mode: Mode) -> dict[str, str]:
    """NCCL_* variables for ``cluster`` in the *effective* ``mode`` (rdma on a TCP-only cluster → tcp).

    RDMA: InfiniBand/RoCE on (``NCCL_IB_DISABLE=0``) with HCAs, GID index, GPUDirect level,
    timeouts from ``network.rdma``; ``NCCL_IB_HCA`` is left out with ``devices: auto``
    because each pod's init finds its own HCAs (names differ per node).
    TCP: IB off, bootstrap/data sockets on every interface except the excluded ones.
    ``nccl.env`` (``extra_env`` in the model) is applied last and wins: it is the documented escape hatch.
    Returns an insertion-ordered dict (deterministic output).
    """
    eff = cluster.effective_mode(mode)
    env: dict[str, str] = {}
    exclude = ",".join(cluster.tcp.interface_exclude)
    if eff == "rdma":
        r = cluster.rdma
        env["NCCL_IB_DISABLE"] = "0"
        if r.devices and not r.auto_devices:
            env["NCCL_IB_HCA"] = ",".join(r.devices)
        env["NCCL_IB_GID_INDEX"] = str(r.gid_index)
        env["NCCL_NET_GDR_LEVEL"] = str(r.gdr_level)
        if r.interfaces:
            env["NCCL_SOCKET_IFNAME"] = ",".join(r.interfaces)
        elif exclude:
            env["NCCL_SOCKET_IFNAME"] = "^" + exclude
        env["NCCL_IB_TIMEOUT"] = str(r.ib_timeout)
        env["NCCL_CROSS_NIC"] = str(r.cross_nic)
        if r.min_nchannels > 0:
            env["NCCL_MIN_NCHANNELS"] = str(r.min_nchannels)
    else:
        env["NCCL_IB_DISABLE"] = "1"
        if exclude:
            # "^a,b" = every interface except a and b (NCCL's exclusion syntax)
            env["NCCL_SOCKET_IFNAME"] = "^" + exclude
        env["NCCL_P2P_LEVEL"] = cluster.tcp.p2p_level
    env["NCCL_DEBUG"] = cluster.nccl.debug
    for key, value in cluster.nccl.extra_env:
        env[key] = value
    return env


def topology_env(cluster: Cluster) -> dict[str, str]:
    """``MLENV_TOPOLOGY``: ``nodes.topology`` as JSON rack → nodes, for fabric.localize on
    rank 0; nothing without a topology (the rendered trees stay as they were)."""
    if not cluster.topology:
        return {}
    return {
        contract.TOPOLOGY_ENV: contract.topology_json(
            {rack: list(nodes) for rack, nodes in cluster.topology}
        )
    }


def _field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def pod_env(cluster: Cluster, mode: Mode, nodes: int) -> list[dict[str, Any]]:
    """The worker pods' container ``env`` list (docs/contracts.md), in a fixed order."""
    eff = cluster.effective_mode(mode)
    wl = names.workload(cluster)
    env: list[dict[str, Any]] = [
        {"name": "MLENV_CLUSTER", "value": cluster.name},
        {"name": "MLENV_NAMESPACE", **_field("metadata.namespace")},
        {"name": "MLENV_POD_NAME", **_field("metadata.name")},
        # the rank, from the label the workload puts on each pod (pod/env.py reads it)
        {"name": "MLENV_POD_INDEX", **_field(f"metadata.labels['{wl.rank_label}']")},
        {"name": "MLENV_NODE_NAME", **_field("spec.nodeName")},
        {"name": "MLENV_STATEFULSET", "value": wl.name},
        {"name": "MLENV_HEADLESS_SERVICE", "value": names.HEADLESS_SERVICE},
        {"name": "MLENV_NNODES", "value": str(nodes)},
        {"name": "MLENV_GPUS_PER_NODE", "value": str(cluster.gpus.per_node)},
        {"name": "MLENV_NETWORK_MODE", "value": eff},
        *({"name": k, "value": v} for k, v in topology_env(cluster).items()),
    ]
    if eff == "rdma":
        devices = "auto" if cluster.rdma.auto_devices else ",".join(cluster.rdma.devices)
        env.append({"name": "MLENV_RDMA_DEVICES", "value": devices})
    env += [
        {"name": "MLENV_SSH_PORT", "value": str(cluster.ssh_port)},
        {"name": "MLENV_SSH_DIR", "value": names.SSH_DIR},
        {"name": "MASTER_ADDR", "value": names.master_addr(cluster)},
        {"name": "MASTER_PORT", "value": str(cluster.master_port)},
        # the names upstream ml-dev-env's training scripts read. NODE_RANK is not
        # here: the pod init derives it from MLENV_POD_INDEX.
        {"name": "POD_IP", **_field("status.podIP")},
        {"name": "POD_NAME", **_field("metadata.name")},
        {"name": "POD_NAMESPACE", **_field("metadata.namespace")},
        {"name": "GPUS_PER_NODE", "value": str(cluster.gpus.per_node)},
        {"name": "LOCAL_WORLD_SIZE", "value": str(cluster.gpus.per_node)},
        {"name": "WORLD_SIZE", "value": str(nodes * cluster.gpus.per_node)},
    ]
    env += [{"name": k, "value": v} for k, v in nccl_env(cluster, mode).items()]
    return env
