"""The kube tier's pod network, with real network namespaces, veths and a
bridge: what the pod-root controller gives each pod (mlenv/testing/kube/podnet.py), and
that only what it made is removed. tests/kube proves it again through kwok: a DeepSpeed
run over ssh between two pods (tests/kube/test_flows.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlenv.testing.kube import podnet

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")),
        reason="needs root, unshare and ip (network namespaces, veths, a bridge)",
    )
]


def _links() -> set[str]:
    return {
        link["ifname"]
        for link in json.loads(
            subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True).stdout
        )
    }


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "pods").mkdir()
    yield tmp_path
    podnet.release_all(tmp_path / "pods")
    podnet.delete_plane_net(tmp_path)


def _pod(tier: Path, net: podnet.PlaneNet, name: str) -> podnet.PodNet:
    folder = tier / "pods" / "ns" / name
    folder.mkdir(parents=True)
    return podnet.attach(folder, net, f"uid-{name}")


def _in(rec: podnet.PodNet, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net=/proc/{rec.pid}/ns/net", "--", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def test_two_pods_have_their_own_address_and_reach_each_other_on_one_port(tier: Path) -> None:
    net = podnet.create_plane_net(tier)
    a, b = _pod(tier, net, "a"), _pod(tier, net, "b")
    assert (
        a.ip != b.ip
        and {a.ip, b.ip} <= {str(h) for h in net.cidr.hosts()}
        and str(net.gateway) not in (a.ip, b.ip)
    )
    shown = _in(a, "ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout
    assert f"inet {a.ip}/{net.cidr.prefixlen}" in shown, shown
    assert f"default via {net.gateway}" in _in(a, "ip", "route").stdout
    # the same port in both pods (what one shared network could not have), each reached
    # from the other pod at its own address
    serve = (
        "import socket,sys;s=socket.socket();s.bind(('0.0.0.0',2222));s.listen();print('up',flush=True);"
        "c,_=s.accept();c.sendall(sys.argv[1].encode());c.close()"
    )
    servers = {}
    for rec in (a, b):
        servers[rec.ip] = subprocess.Popen(
            ["nsenter", f"--net=/proc/{rec.pid}/ns/net", "--", sys.executable, "-c", serve, rec.ip],
            stdout=subprocess.PIPE,
            text=True,
        )
    try:
        for p in servers.values():
            assert p.stdout is not None and p.stdout.readline().strip() == "up"
        for rec, other in ((a, b), (b, a)):
            got = _in(
                rec,
                sys.executable,
                "-c",
                f"import socket;s=socket.create_connection(('{other.ip}',2222),"
                "timeout=10);print(s.recv(64).decode())",
            )
            assert got.returncode == 0 and got.stdout.strip() == other.ip, got.stderr
    finally:
        for p in servers.values():
            p.kill()
            p.wait()


def test_a_released_pod_frees_its_address_and_only_what_was_made_for_it_goes(tier: Path) -> None:
    net = podnet.create_plane_net(tier)
    a, b = _pod(tier, net, "a"), _pod(tier, net, "b")
    # links named like ours that no record holds (someone else's): left alone throughout
    foreign = [
        prefix + "f0" + os.urandom(3).hex() for prefix in (podnet.VETH_PREFIX, podnet.BRIDGE_PREFIX)
    ]
    for link in foreign:
        subprocess.run(["ip", "link", "add", link, "type", "bridge"], check=True)
    try:
        assert podnet.release(tier / "pods" / "ns" / "a") == a
        assert not podnet.holder_alive(a) and a.veth not in _links()
        assert podnet.holder_alive(b) and b.veth in _links()
        assert podnet.allocate(net, tier / "pods") == a.ip  # its address is free again
        # a pod of the same name with another uid (the old one's deletion unseen) is a new network
        c = podnet.attach(tier / "pods" / "ns" / "b", net, "uid-b-again")
        assert c.pid != b.pid and not podnet.holder_alive(b) and b.veth not in _links()
        assert podnet.release_all(tier / "pods") == [c]
        assert podnet.delete_plane_net(tier) == net.bridge
        assert net.bridge not in _links() and not (tier / podnet.NET_FILE).exists()
        assert set(foreign) <= _links()
    finally:
        for link in foreign:
            subprocess.run(["ip", "link", "del", link], check=False)
