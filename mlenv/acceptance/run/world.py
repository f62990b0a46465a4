"""The world of ranks: who the launcher says we are, the rendezvous, the process group,
and the side channel (c10d TCPStore) with its heartbeats that the runner gathers through.

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
from pathlib import Path
from typing import Any

from mlenv.errors import InfraError, InputError

HEARTBEAT_PERIOD_S = 0.5
# How much longer than rank 0 the other ranks wait at start-up for rank 0's word.
ABORT_GRACE_S = 5.0


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


def select_device() -> tuple[str, str]:
    """(backend, device) for this rank: nccl on its own GPU when CUDA is present, else gloo/cpu.

    Raises InputError when the local rank has no GPU of its own (more ranks than GPUs).
    """
    import torch

    if not torch.cuda.is_available():
        return "gloo", "cpu"
    local_rank = _env_int("LOCAL_RANK") or 0
    ngpu = torch.cuda.device_count()
    if local_rank >= ngpu:
        # Wrapping around would put two ranks on one GPU, which NCCL refuses with an
        # obscure error minutes later; more ranks than GPUs is a launch mistake.
        raise InputError(f"local rank {local_rank} has no GPU of its own: this node has {ngpu} visible CUDA "
                         f"device(s) (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                         f"launch at most {ngpu} rank(s) per node")
    torch.cuda.set_device(local_rank)
    # Must precede init: without blocking wait / async error handling, a hung NCCL
    # collective is killed by torch's watchdog (process dies) instead of raising in
    # the check, and the runner could not report it as ERROR with the rank named.
    from mlenv.acceptance.checks.collectives import apply_nccl_deadline_env

    apply_nccl_deadline_env(os.environ)
    return "nccl", f"cuda:{local_rank}"


def _never_joined(missing: list[int], hosts: dict[int, str], env: LaunchEnv, waited_s: float) -> str:
    """``rank 2, 3 (node 1: host-b) never joined …``: missing ranks with the node they belong to.

    The node of a rank is ``rank // local_world_size`` (launchers give every node the
    same number of ranks); its host is known when any other rank of that node joined.
    """
    per = max(env.local_world_size, 1)
    by_node: dict[int, list[int]] = {}
    for r in missing:
        by_node.setdefault(r // per, []).append(r)
    parts = []
    for node, ranks in sorted(by_node.items()):
        known = sorted({h for r, h in hosts.items() if r // per == node})
        where = f"node {node}: {', '.join(known)}" if known else f"node {node}: no rank of it joined"
        parts.append(f"{'ranks' if len(ranks) > 1 else 'rank'} {', '.join(map(str, ranks))} ({where})")
    return f"{'; '.join(parts)} never joined the run within {waited_s:g} s (not started, or cannot reach " \
           f"{env.master_addr}:{env.master_port})"


def rendezvous(env: LaunchEnv, host: str, timeout_s: float, poll_s: float = 0.05,
               failure: InputError | None = None) -> tuple[Any, list[str]]:
    """Join the run's TCPStore, say hello, and wait for every rank's hello: (store, hosts).

    The store is made here rather than by ``env://`` so that a rank that never joins
    is *named*: torch's own rendezvous only says "1/2 workers joined". Rank 0 hosts it
    (under torchrun the agent already does, and everyone is a client). Raises InfraError
    naming the ranks (and their node) that never joined within ``timeout_s``; the other
    ranks learn of it through the store and raise too. With ``failure`` (this rank cannot
    take part), it is posted for the others to report, then raised here.
    """
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    try:
        store = TCPStore(env.master_addr, env.master_port, is_master=env.rank == 0 and not agent,
                         timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    except Exception as e:  # no server: rank 0 (or the agent) is not there
        raise InfraError(f"cannot reach the run's rendezvous store at {env.master_addr}:{env.master_port} "
                         f"(rank 0 not started or unreachable): {e}") from e
    prefix = f"mlenv/{env.restart}/hello"
    keys = [f"{prefix}/{r}" for r in range(env.world_size)]
    abort_key = f"{prefix}/abort"
    if failure is not None:
        store.set(abort_key, f"rank {env.rank} ({host}): {failure}")
        raise failure
    store.set(keys[env.rank], host)
    # Rank 0 decides; the others wait a little longer so they hear its verdict (which
    # names the missing ranks) rather than racing it to the same conclusion.
    end = time.monotonic() + timeout_s + (0.0 if env.rank == 0 else ABORT_GRACE_S)
    try:
        while not store.check(keys):
            if store.check([abort_key]):
                store.set(f"{prefix}/ack/{env.rank}", "1")
                raise InfraError(bytes(store.get(abort_key)).decode())
            if time.monotonic() >= end:
                joined = {r: bytes(store.get(k)).decode() for r, k in enumerate(keys) if store.check([k])}
                msg = _never_joined([r for r in range(env.world_size) if r not in joined], joined, env, timeout_s)
                if env.rank == 0:
                    store.set(abort_key, msg)
                    _wait_for_acks(store, prefix, [r for r in joined if r != 0], ABORT_GRACE_S)
                raise InfraError(msg)
            time.sleep(poll_s)
    except InfraError:
        raise
    except Exception as e:  # the store went away under us: rank 0 (its host) ended
        raise InfraError(f"lost the run's rendezvous store at {env.master_addr}:{env.master_port} while "
                         f"waiting for the other ranks (rank 0 ended?): {e}") from e
    return store, [bytes(store.get(k)).decode() for k in keys]


def _wait_for_acks(store: Any, prefix: str, ranks: list[int], timeout_s: float) -> None:
    """Give the ranks that joined a moment to read the abort before rank 0's store goes away."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not store.check([f"{prefix}/ack/{r}" for r in ranks]):
        time.sleep(0.05)


def init_process_group(deadline_s: float, env: LaunchEnv, host: str,
                       nccl_log_dir: Path | None = None) -> tuple[str, str, list[str]]:
    """Choose the device, rendezvous, start the default process group: (backend, device, hosts).

    The group's timeout is the per-check deadline so a collective with a missing peer
    raises instead of waiting forever. Raises InputError (more ranks than GPUs) or
    InfraError (a rank never joined, the group could not start). With NCCL and
    ``nccl_log_dir``, NCCL's log is captured there (``NCCL_DEBUG=INFO`` into
    ``rank<R>.<host>.<pid>.log``, the console keeping what the user's NCCL_DEBUG showed)
    before NCCL first reads its variables: the ``fabric.transport`` check reads it.
    """
    import torch.distributed as dist

    try:
        backend, device = select_device()
    except InputError as e:
        rendezvous(env, host, deadline_s, failure=e)  # tell the others why this rank is not coming
        raise
    if backend == "nccl" and nccl_log_dir is not None:
        from mlenv.acceptance.evidence import ncclcapture

        ncclcapture.start(os.environ, nccl_log_dir, env.rank, host)
    store, hosts = rendezvous(env, host, deadline_s)
    try:
        dist.init_process_group(backend=backend, store=store, rank=env.rank, world_size=env.world_size,
                                timeout=timedelta(seconds=deadline_s))
    except Exception as e:  # rendezvous failures are infrastructure, not the user's input
        raise InfraError(f"cannot start the process group ({backend}): {e}") from e
    return backend, device, hosts


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
