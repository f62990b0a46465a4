"""Process-group start-up and the side channel (c10d TCPStore) the runner gathers through.

Works under torchrun, under the DeepSpeed launcher (RANK/WORLD_SIZE/LOCAL_RANK/... in
the environment) and as a single process (a world of one on a free local port).
Results travel through the store, never through the process group, so a dead or hung
peer cannot wedge the gather; a heartbeat thread per rank lets rank 0 tell a dead rank
(heartbeat stopped) from a hung one (heartbeat alive, no result).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from mlenv.errors import InfraError

HEARTBEAT_PERIOD_S = 0.5


@dataclass(frozen=True)
class LaunchEnv:
    """What the launcher told this process (or the defaults of a world of one)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    node_rank: int | None  # None: derive from the gathered hostnames
    nnodes: int | None
    restart: int  # torchrun restart count, so store keys of a retried run never clash


def free_port() -> int:
    """A TCP port that was free a moment ago (good enough for a local world)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env_int(*names: str) -> int | None:
    for n in names:
        v = os.environ.get(n, "").strip()
        if v:
            try:
                return int(v)
            except ValueError:
                continue
    return None


def read_launch_env() -> LaunchEnv:
    """Read the launcher's variables; with none, set up a single-process world.

    Node rank comes from GROUP_RANK (torchrun), NODE_RANK, CROSS_RANK (DeepSpeed) or
    MLENV_NODE_RANK; the node count from GROUP_WORLD_SIZE, CROSS_SIZE or MLENV_NNODES.
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        # A world of one: torch's env:// rendezvous still wants these.
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        os.environ["RANK"] = "0"
        os.environ["WORLD_SIZE"] = "1"
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = _env_int("LOCAL_RANK") or 0
    local_world = _env_int("LOCAL_WORLD_SIZE", "LOCAL_SIZE") or world
    return LaunchEnv(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(os.environ.get("MASTER_PORT", "29500")),
        node_rank=_env_int("GROUP_RANK", "NODE_RANK", "CROSS_RANK", "MLENV_NODE_RANK"),
        nnodes=_env_int("GROUP_WORLD_SIZE", "CROSS_SIZE", "MLENV_NNODES"),
        restart=_env_int("TORCHELASTIC_RESTART_COUNT") or 0,
    )


def hostname() -> str:
    """This node's name (MLENV_HOST overrides, for harnesses that fake several nodes)."""
    return os.environ.get("MLENV_HOST") or socket.gethostname()


def node_layout(hosts: list[str], env: LaunchEnv) -> tuple[int, int]:
    """(node_rank, nnodes) for ``env.rank``: from the launcher, else by host order."""
    order: list[str] = []
    for h in hosts:
        if h not in order:
            order.append(h)
    node_rank = env.node_rank if env.node_rank is not None else order.index(hosts[env.rank])
    nnodes = env.nnodes if env.nnodes is not None else len(order)
    return node_rank, max(nnodes, node_rank + 1)


def init_process_group(deadline_s: float) -> tuple[str, str]:
    """Start the default process group; returns (backend, device).

    nccl when CUDA is present, else gloo; the group's timeout is the per-check
    deadline so a collective with a missing peer raises instead of waiting forever.
    """
    import torch
    import torch.distributed as dist

    local_rank = _env_int("LOCAL_RANK") or 0
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % max(torch.cuda.device_count(), 1))
        backend, device = "nccl", f"cuda:{torch.cuda.current_device()}"
        # Must precede init: without blocking wait / async error handling, a hung NCCL
        # collective is killed by torch's watchdog (process dies) instead of raising in
        # the check, and the runner could not report it as ERROR with the rank named.
        import os

        from mlenv.acceptance.checks.collectives import apply_nccl_deadline_env

        apply_nccl_deadline_env(os.environ)
    else:
        backend, device = "gloo", "cpu"
    try:
        dist.init_process_group(
            backend=backend, init_method="env://", timeout=timedelta(seconds=deadline_s)
        )
    except Exception as e:  # rendezvous failures are infrastructure, not the user's input
        raise InfraError(f"cannot start the process group ({backend}): {e}") from e
    return backend, device


def all_gather_hosts(host: str) -> list[str]:
    """Every rank's host name, in rank order (one collective, at start-up only)."""
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, host)
    return [str(h) for h in out]


class SideChannel:
    """Keyed messages between ranks through the c10d TCPStore of the launcher/rank 0.

    Two clients: one for the main thread, one for the heartbeat thread, so a slow
    store call on one never blocks the other. All waits poll with ``check`` (which
    does not block) so a signal handler in the main thread can always run.
    """

    def __init__(self, addr: str, port: int, prefix: str, timeout_s: float = 30.0) -> None:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        def client() -> Any:
            return TCPStore(
                addr, port, is_master=False, timeout=timedelta(seconds=timeout_s),
                wait_for_workers=False,
            )

        self._main = client()
        self._hb = client()
        self.prefix = prefix
        self._hb_stop = threading.Event()
        self._hb_thread: threading.Thread | None = None

    def key(self, name: str) -> str:
        """The full store key of ``name`` (namespaced per run attempt)."""
        return f"{self.prefix}/{name}"

    def set(self, name: str, value: str) -> None:
        """Post ``value`` under ``name``."""
        self._main.set(self.key(name), value.encode())

    def get_now(self, name: str) -> str | None:
        """The value under ``name`` if it was posted, else None; never blocks."""
        k = self.key(name)
        if not self._main.check([k]):
            return None
        return bytes(self._main.get(k)).decode()

    def wait_for(self, name: str, timeout_s: float, poll_s: float = 0.05) -> str | None:
        """Poll for ``name`` up to ``timeout_s``; None when it never came."""
        end = time.monotonic() + timeout_s
        while True:
            v = self.get_now(name)
            if v is not None:
                return v
            if time.monotonic() >= end:
                return None
            time.sleep(poll_s)

    def heartbeats(self, world_size: int) -> list[int | None]:
        """Each rank's heartbeat counter (None where it never beat)."""
        out: list[int | None] = []
        for r in range(world_size):
            k = self.key(f"hb/{r}")
            out.append(int(bytes(self._main.get(k)).decode()) if self._main.check([k]) else None)
        return out

    def start_heartbeat(self, rank: int) -> None:
        """Beat every HEARTBEAT_PERIOD_S from a daemon thread until :meth:`stop`."""

        def beat() -> None:
            n = 0
            while not self._hb_stop.is_set():
                n += 1
                try:
                    self._hb.set(self.key(f"hb/{rank}"), str(n).encode())
                except Exception:  # the store went away (rank 0 ended): nothing to tell
                    return
                self._hb_stop.wait(HEARTBEAT_PERIOD_S)

        self._hb_thread = threading.Thread(target=beat, name="mlenv-heartbeat", daemon=True)
        self._hb_thread.start()

    def stop(self) -> None:
        """Stop the heartbeat thread."""
        self._hb_stop.set()


class HeartbeatWatch:
    """Rank 0's view of the heartbeats: which ranks stopped beating, and since when."""

    def __init__(self, chan: SideChannel, world_size: int, stale_s: float) -> None:
        self.chan = chan
        self.world_size = world_size
        self.stale_s = stale_s
        self._last: list[int | None] = [None] * world_size
        now = time.monotonic()
        self._changed = [now] * world_size

    def poll(self) -> None:
        """Sample the counters; remember when each last moved."""
        now = time.monotonic()
        for r, v in enumerate(self.chan.heartbeats(self.world_size)):
            if v != self._last[r]:
                self._last[r] = v
                self._changed[r] = now

    def stale(self, ranks: list[int] | None = None) -> list[int]:
        """Ranks (of ``ranks``) whose heartbeat has not moved for ``stale_s``."""
        now = time.monotonic()
        pool = range(self.world_size) if ranks is None else ranks
        return [r for r in pool if now - self._changed[r] > self.stale_s]
