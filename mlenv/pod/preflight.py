"""Before launching, make sure every peer is there: its name resolves and its sshd answers.

"Answers" means the server speaks: for an ssh peer the probe reads the ``SSH-2.0-…``
banner, because a TCP connect alone is completed by the peer's kernel from the listen
backlog even when sshd is frozen (SIGSTOP, a hung node filesystem) — such a peer passed
the old check and the launch then hung for minutes.

Peers are checked concurrently and re-checked until a deadline, because pods of a
Parallel StatefulSet come up in any order; what is still missing at the deadline is
named, so the user sees "ml-dev-env-3 …: connection refused" instead of a pdsh hang.

The deadline is a bound on the whole call, not per round: every probe derives its
connect timeout from the one absolute end time, probes that would start after it are
not started, and the caller stops waiting at the end time even for a DNS lookup
(``getaddrinfo`` has no timeout of its own). Probes run on daemon threads so a lookup
still stuck in the resolver never holds up the process exit.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

Resolver = Callable[..., Sequence[tuple[Any, ...]]]
# How long after the deadline the call may still be collecting probes that ended right
# at it (thread hand-off, not network time).
_GRACE_S = 0.05


@dataclass(frozen=True)
class Peer:
    """A host and the TCP port that must answer on it; ``banner`` is what the server must
    send first (``b"SSH-"`` for sshd; empty: a completed connect is enough)."""

    host: str
    port: int
    banner: bytes = b""


@dataclass
class PeerStatus:
    """Outcome for one peer: ``stage`` is where it last failed (``dns``/``connect``) or ``ok``."""

    peer: Peer
    ok: bool = False
    stage: str = "pending"
    error: str = "not checked before the deadline"
    attempts: int = 0

    def describe(self) -> str:
        """One line naming the peer and why it is missing."""
        if self.stage == "dns":
            what = "DNS name does not resolve"
        elif self.stage == "pending":
            what = "not checked"
        elif self.stage == "banner":
            what = (
                f"port {self.peer.port} accepts connections but the server does not "
                "answer (frozen or not sshd)"
            )
        else:
            what = f"port {self.peer.port} does not answer"
        return f"{self.peer.host}: {what} ({self.error}; {self.attempts} attempt(s))"


class _Probe:
    """One attempt at one peer; ``stage`` says how far it got (read when it overruns)."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.stage = "dns"


def check_once(
    peer: Peer,
    end: float,
    connect_timeout_s: float = 2.0,
    resolve: Resolver = socket.getaddrinfo,
    probe: _Probe | None = None,
) -> tuple[str, str]:
    """Resolve and connect once, never past the monotonic time ``end``.

    Returns ``(stage, error)``: ``("ok", "")`` on success, ``("dns", why)`` or
    ``("connect", why)`` on failure, ``("pending", why)`` when ``end`` had passed before
    the probe could start. The resolver call itself cannot be interrupted; the caller
    bounds it by not waiting past ``end``.
    """
    pr = probe or _Probe(peer)
    if time.monotonic() >= end:
        return "pending", "not checked before the deadline"
    try:
        infos = resolve(peer.host, peer.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:  # gaierror, or an IDNA-invalid name
        return "dns", str(getattr(e, "strerror", None) or e)
    pr.stage = "connect"
    last = "no address"
    for family, stype, proto, _, addr in infos:
        left = end - time.monotonic()
        if left <= 0:
            return "connect", "timed out at the deadline"
        try:
            with socket.socket(family, stype, proto) as s:
                s.settimeout(min(connect_timeout_s, left))
                s.connect(addr)
                if peer.banner:
                    pr.stage = "banner"
                    return _read_banner(s, peer.banner, end, connect_timeout_s)
            return "ok", ""
        except OSError as e:
            last = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
    return "connect", last


def _read_banner(s: socket.socket, want: bytes, end: float, timeout_s: float) -> tuple[str, str]:
    """Read the server's first line, never past ``end``; ("ok", "") when it starts with
    ``want``. sshd sends its version line first, within milliseconds when alive."""
    got = b""
    limit = time.monotonic() + timeout_s
    while b"\n" not in got and len(got) < 256:
        left = min(end, limit) - time.monotonic()
        if left <= 0:
            return "banner", f"no {want.decode(errors='replace')!r} banner within {timeout_s:g} s"
        s.settimeout(left)
        try:
            chunk = s.recv(256)
        except TimeoutError:
            continue  # loop ends on the time check above
        except OSError as e:
            return "banner", e.strerror or str(e)
        if not chunk:
            return "banner", "connection closed before the banner"
        got += chunk
    if got.startswith(want):
        return "ok", ""
    return "banner", f"unexpected greeting {got[:40]!r}"


class _DaemonPool:
    """A minimal thread pool whose workers are daemons.

    ``ThreadPoolExecutor`` joins its workers at interpreter exit, so one resolver call
    stuck for 30 s would hold the failed launch's exit for 30 s past its deadline.
    """

    def __init__(self, workers: int) -> None:
        self._max = max(1, workers)
        self._q: queue.SimpleQueue[
            tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None
        ] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self._q.put((fut, fn, args))
        if len(self._threads) < self._max:
            t = threading.Thread(target=self._work, name="mlenv-preflight", daemon=True)
            t.start()
            self._threads.append(t)
        return fut

    def _work(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                fut.set_exception(e)

    def close(self) -> None:
        """Let idle workers exit; a busy one exits after its current probe (never joined)."""
        for _ in self._threads:
            self._q.put(None)


def preflight(
    peers: list[Peer],
    deadline_s: float = 60.0,
    interval_s: float = 1.0,
    connect_timeout_s: float = 2.0,
    workers: int = 64,
    resolve: Resolver = socket.getaddrinfo,
) -> list[PeerStatus]:
    """Check every peer until all answer or ``deadline_s`` passes; returns one status each.

    Each peer still missing is probed again ``interval_s`` after its last probe ended,
    ``workers`` probes at a time, so one slow peer never delays the re-checks of the
    others. The call returns within ``deadline_s`` plus scheduling slack whatever the
    peers do (drop SYNs, hang in DNS): probes take their timeouts from the absolute end
    time, none is started after it, and a probe still running at the end is reported at
    the stage it was in. ``resolve`` is injectable for tests (``socket.getaddrinfo``).
    """
    status = {p: PeerStatus(p) for p in peers}
    start = time.monotonic()
    end = start + max(deadline_s, 0.0)
    next_at = dict.fromkeys(peers, start)
    running: dict[Future[tuple[str, str]], _Probe] = {}
    pool = _DaemonPool(min(workers, len(peers) or 1))
    try:
        while True:
            now = time.monotonic()
            busy = {pr.peer for pr in running.values()}
            idle = [p for p in peers if not status[p].ok and p not in busy]
            if now < end:
                for p in idle:
                    if next_at[p] <= now:
                        pr = _Probe(p)
                        running[pool.submit(check_once, p, end, connect_timeout_s, resolve, pr)] = (
                            pr
                        )
            if not running and all(st.ok for st in status.values()):
                break
            left = end + (_GRACE_S if running else 0.0) - now
            if left <= 0:
                break
            waits = [next_at[p] - now for p in idle if next_at[p] > now]
            timeout = min([left, *waits])
            if running:
                done, _ = wait(set(running), timeout=timeout, return_when=FIRST_COMPLETED)
            else:
                time.sleep(timeout)
                done = set()
            for fut in done:
                pr = running.pop(fut)
                stage, error = fut.result()
                if stage == "pending":
                    continue  # the deadline passed before this probe could start
                st = status[pr.peer]
                st.attempts += 1
                st.stage, st.error, st.ok = stage, error, stage == "ok"
                next_at[pr.peer] = time.monotonic() + interval_s
        for fut, pr in running.items():
            if fut.cancel():
                continue  # queued behind busy workers, never started
            st = status[pr.peer]
            if fut.done():
                stage, error = fut.result()
                if stage != "pending":
                    st.attempts += 1
                    st.stage, st.error, st.ok = stage, error, stage == "ok"
                continue
            st.attempts += 1
            if pr.stage == "dns":
                st.stage, st.error = "dns", "lookup did not finish before the deadline"
            else:
                st.stage, st.error = "connect", "timed out at the deadline"
    finally:
        pool.close()
    return [status[p] for p in peers]
