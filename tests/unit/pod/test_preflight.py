"""Preflight against real local listeners standing in for peers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from mlenv.pod.preflight import Peer, preflight


@pytest.fixture
def listener() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


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
        res = preflight([Peer("127.0.0.1", port)], deadline_s=5, interval_s=0.1, connect_timeout_s=0.5)
    finally:
        th.join()
        srv.close()
    assert res[0].ok and res[0].attempts >= 2
