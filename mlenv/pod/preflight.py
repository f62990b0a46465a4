"""Before launching, make sure every peer is there: its name resolves and its sshd answers.

Peers are checked concurrently and re-checked until a deadline, because pods of a
Parallel StatefulSet come up in any order; what is still missing at the deadline is
named, so the user sees "ml-dev-env-3 …: connection refused" instead of a pdsh hang.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    """A host and the TCP port that must answer on it."""

    host: str
    port: int


@dataclass
class PeerStatus:
    """Outcome for one peer: ``stage`` is where it last failed (``dns``/``connect``) or ``ok``."""

    peer: Peer
    ok: bool = False
    stage: str = "pending"
    error: str = "not checked"
    attempts: int = 0

    def describe(self) -> str:
        """One line naming the peer and why it is missing."""
        what = "DNS name does not resolve" if self.stage == "dns" else f"port {self.peer.port} does not answer"
        return f"{self.peer.host}: {what} ({self.error}; {self.attempts} attempt(s))"


def check_once(peer: Peer, timeout: float) -> tuple[str, str]:
    """Resolve and connect once; returns ``(stage, error)`` with stage ``ok`` on success."""
    try:
        infos = socket.getaddrinfo(peer.host, peer.port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return "dns", str(e.strerror or e)
    last = "no address"
    for family, stype, proto, _, addr in infos:
        s = socket.socket(family, stype, proto)
        s.settimeout(max(timeout, 0.05))
        try:
            s.connect(addr)
            return "ok", ""
        except OSError as e:
            last = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        finally:
            s.close()
    return "connect", last


def preflight(peers: list[Peer], deadline_s: float = 60.0, interval_s: float = 1.0,
              connect_timeout_s: float = 2.0, workers: int = 64) -> list[PeerStatus]:
    """Check every peer until all answer or ``deadline_s`` passes; returns one status each.

    Each round checks only the peers still missing, ``workers`` at a time; a connect
    never waits past the deadline, so the whole call returns within about
    ``deadline_s + connect_timeout_s``.
    """
    status = {p: PeerStatus(p) for p in peers}
    end = time.monotonic() + deadline_s
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(peers) or 1))) as pool:
        while True:
            pending = [p for p in peers if not status[p].ok]
            if not pending:
                break
            left = end - time.monotonic()
            timeout = min(connect_timeout_s, max(left, 0.05))
            outcomes = pool.map(check_once, pending, [timeout] * len(pending))
            for p, (stage, error) in zip(pending, outcomes, strict=True):
                st = status[p]
                st.attempts += 1
                st.stage, st.error, st.ok = stage, error, stage == "ok"
            if all(status[p].ok for p in pending):
                break
            left = end - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(interval_s, left))
    return [status[p] for p in peers]
