"""NCCL environment derivation per mode (mlenv.render.env.nccl_env)."""

from __future__ import annotations

from dataclasses import replace

from render_fixtures import rdma_cluster, tcp_cluster

from mlenv.config.model import Nccl, Rdma, Tcp
from mlenv.render.env import nccl_env


def test_rdma_env_from_config():
    c = rdma_cluster()
    env = nccl_env(c, "rdma")
    r = c.rdma
    assert env["NCCL_IB_DISABLE"] == "0"
    assert env["NCCL_IB_HCA"] == ",".join(r.devices)
    assert env["NCCL_IB_GID_INDEX"] == str(r.gid_index)
    assert env["NCCL_NET_GDR_LEVEL"] == str(r.gdr_level)
    assert env["NCCL_SOCKET_IFNAME"] == ",".join(r.interfaces)
    assert env["NCCL_IB_TIMEOUT"] == str(r.ib_timeout)
    assert env["NCCL_CROSS_NIC"] == str(r.cross_nic)
    assert env["NCCL_MIN_NCHANNELS"] == str(r.min_nchannels)
    assert env["NCCL_DEBUG"] == c.nccl.debug
    assert "NCCL_P2P_LEVEL" not in env


def test_rdma_auto_devices_leaves_hca_to_pod_init():
    c = rdma_cluster(rdma=Rdma(enabled=True, auto_devices=True))
    env = nccl_env(c, "rdma")
    assert "NCCL_IB_HCA" not in env
    # no RDMA interfaces listed: fall back to excluding loopback/docker for bootstrap
    assert env["NCCL_SOCKET_IFNAME"] == "^" + ",".join(c.tcp.interface_exclude)


def test_min_nchannels_zero_is_left_to_nccl():
    c = rdma_cluster(rdma=replace(rdma_cluster().rdma, min_nchannels=0))
    assert "NCCL_MIN_NCHANNELS" not in nccl_env(c, "rdma")


def test_tcp_env():
    c = tcp_cluster(tcp=Tcp(interface_exclude=("lo", "docker0", "virbr0"), p2p_level="PIX"))
    env = nccl_env(c, "tcp")
    assert env == {
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "^lo,docker0,virbr0",
        "NCCL_P2P_LEVEL": "PIX",
        "NCCL_DEBUG": c.nccl.debug,
    }


def test_rdma_requested_on_tcp_cluster_gives_tcp_env():
    c = tcp_cluster()
    assert nccl_env(c, "rdma") == nccl_env(c, "tcp")


def test_rdma_cluster_in_tcp_mode_has_no_ib_settings():
    env = nccl_env(rdma_cluster(), "tcp")
    assert env["NCCL_IB_DISABLE"] == "1"
    assert not any(k in env for k in ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL"))


def test_extra_env_passes_through_and_wins():
    c = tcp_cluster(
        nccl=Nccl(debug="WARN", extra_env=(("NCCL_ALGO", "Tree"), ("NCCL_P2P_LEVEL", "SYS")))
    )
    env = nccl_env(c, "tcp")
    assert env["NCCL_ALGO"] == "Tree"
    assert env["NCCL_P2P_LEVEL"] == "SYS"
