"""Preflight against real local listeners standing in for peers.

Integration tier: real sockets (a listener that comes up late, a port whose SYNs are
dropped) and the preflight's deadline, judged on the wall clock.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mlenv.acceptance.run.world import free_port
from mlenv.pod.preflight import Peer, preflight


@pytest.fixture
def listener() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


def test_all_present(listener: int) -> None:
    res = preflight([Peer("127.0.0.1", listener), Peer("localhost", listener)], deadline_s=2)
    assert [r.ok for r in res] == [True, True]
    assert all(r.attempts == 1 for r in res)


def test_missing_peers_are_named_within_the_deadline(listener: int) -> None:
    dead = free_port()
    peers = [Peer("127.0.0.1", listener), Peer("127.0.0.1", dead), Peer("no-such-pod.invalid", 22)]
    t0 = time.monotonic()
    res = preflight(peers, deadline_s=1.0, interval_s=0.2, connect_timeout_s=0.5)
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0 + 0.5 + 0.5
    assert [r.ok for r in res] == [True, False, False]
    assert res[1].stage == "connect" and str(dead) in res[1].describe()
    assert res[2].stage == "dns" and "no-such-pod.invalid" in res[2].describe()
    assert res[1].attempts >= 2  # it kept retrying until the deadline


def test_a_peer_that_comes_up_late_is_waited_for() -> None:
    port = free_port()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def late() -> None:
        time.sleep(0.6)
        srv.bind(("127.0.0.1", port))
        srv.listen(1)

    th = threading.Thread(target=late)
    th.start()
    try:
        res = preflight(
            [Peer("127.0.0.1", port)], deadline_s=5, interval_s=0.1, connect_timeout_s=0.5
        )
    finally:
        th.join()
        srv.close()
    assert res[0].ok and res[0].attempts >= 2


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port whose SYNs are dropped: a listener with a full accept queue that never accepts.

    Linux drops a SYN to a listener whose accept queue is full, so a connect to any
    127.x address on this port hangs like a peer behind a firewall that drops packets.
    """
    srv = socket.socket()
    srv.bind(("0.0.0.0", 0))
    srv.listen(0)
    port = int(srv.getsockname()[1])
    fill = []
    for _ in range(3):  # the queue holds one; the rest sit in SYN_SENT
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fill.append(c)
    probe = socket.socket()
    probe.settimeout(0.3)
    try:
        probe.connect(("127.0.0.1", port))
        dropped = False
    except TimeoutError:
        dropped = True
    finally:
        probe.close()
    if not dropped:
        for c in fill:
            c.close()
        srv.close()
        pytest.skip("this kernel does not drop SYNs to a full accept queue")
    yield port
    for c in fill:
        c.close()
    srv.close()


def test_many_black_holed_peers_end_within_the_deadline(black_hole: int) -> None:
    # 512 peers that never answer, 64 probes at a time: the deadline must bound the call
    # (probes that would start after it are not started), not ceil(512 / 64) timeouts.
    peers = [Peer(f"127.0.{k // 250}.{k % 250 + 2}", black_hole) for k in range(512)]
    t0 = time.monotonic()
    res = preflight(peers, deadline_s=1.5, interval_s=0.2, connect_timeout_s=2.0)
    elapsed = time.monotonic() - t0
    assert elapsed < 1.5 + 0.5, elapsed
    assert not any(r.ok for r in res)
    tried = [r for r in res if r.attempts]
    assert tried and all(r.stage == "connect" and "timed out" in r.error for r in tried)
    # Every peer is named, tried or not.
    assert all(r.peer.host in r.describe() for r in res)
    assert any("not checked" in r.describe() for r in res if not r.attempts) or len(tried) == len(
        res
    )


def test_a_hanging_dns_lookup_is_bounded_and_does_not_hold_up_other_peers() -> None:
    release = threading.Event()
    port = free_port()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def resolve(host: str, port: int, **kw: Any) -> Any:
        if host == "hung.svc":
            release.wait(30)  # a resolver that never answers within the deadline
        return socket.getaddrinfo(host, port, **kw)

    def late() -> None:
        time.sleep(0.5)
        srv.bind(("127.0.0.1", port))
        srv.listen(4)

    th = threading.Thread(target=late)
    th.start()
    try:
        t0 = time.monotonic()
        res = preflight(
            [Peer("hung.svc", 22), Peer("127.0.0.1", port)],
            deadline_s=1.5,
            interval_s=0.1,
            connect_timeout_s=0.5,
            resolve=resolve,
        )
        elapsed = time.monotonic() - t0
    finally:
        release.set()
        th.join()
        srv.close()
    assert elapsed < 1.5 + 0.5, elapsed
    assert res[0].stage == "dns" and not res[0].ok and "did not finish" in res[0].describe()
    # The stuck lookup did not stop the late peer from being re-checked and found.
    assert res[1].ok and res[1].attempts >= 2
