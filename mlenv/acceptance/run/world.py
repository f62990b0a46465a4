"""The world of ranks: who the launcher says we are, the rendezvous, the process group,
and the side channel (c10d TCPStore) with its heartbeats that the runner gathers through.

Works under torchrun, under the DeepSpeed launcher (RANK/WORLD_SIZE/LOCAL_RANK/... in
the environment) and as a single process (a world of one on a free local port).
Results travel through the store, never through the process group, so a dead or hung
peer cannot wedge the gather. A heartbeat thread per rank says the process is running;
a heartbeat that stops does not by itself say it died: a stopped (SIGSTOP, Ctrl-Z, a
debugger) or frozen process stops beating too. So each rank also posts where its
process can be looked at (:class:`Life`): its pid, for a watcher on the same machine
(``/proc/<pid>/stat``: gone, stopped ``T``, blocked ``D``, alive), and a port it holds
for as long as it lives (:class:`Lifeline`), for a watcher on another machine: a
connection refused means the process is gone, one accepted (the kernel accepts even for
a stopped process) means it is still there, no answer means its host cannot be reached.
:func:`probe` turns that into a :class:`Liveness`. Rank 0 watches the others (the
runner); the other ranks watch rank 0 (:meth:`SideChannel.watch_rank0`), which hosts the
store under the DeepSpeed launcher, so a frozen rank 0 freezes the store with it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from mlenv.errors import InfraError, InputError

HEARTBEAT_PERIOD_S = 0.5
# How much longer than the check's deadline the other ranks give a silent rank 0 before
# they name it hung and leave (the local CLI acts at the deadline itself, first).
RANK0_GRACE_S = 5.0
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


def local_world_size(default: int) -> int:
    """The ranks on this node, as this launch set them (``default`` when it said nothing).

    DeepSpeed's launch.py sets LOCAL_SIZE for this launch and leaves LOCAL_WORLD_SIZE as
    inherited: in a pod that is the spec's static value (GPUs per node, for upstream's
    scripts), 2 where a CPU pod runs 1 rank (MLENV_CPU_SLOTS), and a missing rank was then
    put on the wrong node and each rank given half its cores. torchrun sets
    LOCAL_WORLD_SIZE and no LOCAL_SIZE."""
    return _env_int("LOCAL_SIZE", "LOCAL_WORLD_SIZE") or default


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
    local_world = local_world_size(world)
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


def platform_node(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(name, source) of the node this rank runs on as its platform names it, ("", "") if none.

    Kubernetes: the Node from the downward API (``MLENV_NODE_NAME`` = ``spec.nodeName``,
    the pod's name being no node); Slurm: ``SLURMD_NODENAME``, the name scontrol knows
    (a host's own name may differ from it). Elsewhere the host is the node.
    """
    env = os.environ if environ is None else environ
    for var, source in (("MLENV_NODE_NAME", "kubernetes"), ("SLURMD_NODENAME", "slurm")):
        name = env.get(var, "").strip()
        if name:
            return name, source
    return "", ""


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
        raise InputError(
            f"local rank {local_rank} has no GPU of its own: this node has {ngpu} visible CUDA "
            f"device(s) (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
            f"launch at most {ngpu} rank(s) per node"
        )
    torch.cuda.set_device(local_rank)
    # Must precede init: without blocking wait / async error handling, a hung NCCL
    # collective is killed by torch's watchdog (process dies) instead of raising in
    # the check, and the runner could not report it as ERROR with the rank named.
    from mlenv.acceptance.checks.collectives import apply_nccl_deadline_env

    apply_nccl_deadline_env(os.environ)
    return "nccl", f"cuda:{local_rank}"


def _never_joined(
    missing: list[int], hosts: dict[int, str], env: LaunchEnv, waited_s: float
) -> str:
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
        where = (
            f"node {node}: {', '.join(known)}" if known else f"node {node}: no rank of it joined"
        )
        parts.append(
            f"{'ranks' if len(ranks) > 1 else 'rank'} {', '.join(map(str, ranks))} ({where})"
        )
    return (
        f"{'; '.join(parts)} never joined the run within {waited_s:g} s (not started, or cannot reach "
        f"{env.master_addr}:{env.master_port})"
    )


def rendezvous(
    env: LaunchEnv,
    host: str,
    timeout_s: float,
    poll_s: float = 0.05,
    failure: InputError | None = None,
    life: Life | None = None,
) -> tuple[Any, list[str]]:
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
        store = TCPStore(
            env.master_addr,
            env.master_port,
            is_master=env.rank == 0 and not agent,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except Exception as e:  # no server: rank 0 (or the agent) is not there
        raise InfraError(
            f"cannot reach the run's rendezvous store at {env.master_addr}:{env.master_port} "
            f"(rank 0 not started or unreachable): {e}"
        ) from e
    prefix = f"mlenv/{env.restart}/hello"
    keys = [f"{prefix}/{r}" for r in range(env.world_size)]
    abort_key = f"{prefix}/abort"
    if failure is not None:
        store.set(abort_key, f"rank {env.rank} ({host}): {failure}")
        raise failure
    if life is not None:  # before the hello: once every rank said hello, every rank's life is there
        store.set(f"mlenv/{env.restart}/life/{env.rank}", life.to_json())
    # Before the hello: once every rank said hello, every rank's node name is there.
    store.set(f"{prefix}/node/{env.rank}", json.dumps(platform_node()))
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
                joined = {
                    r: bytes(store.get(k)).decode() for r, k in enumerate(keys) if store.check([k])
                }
                msg = _never_joined(
                    [r for r in range(env.world_size) if r not in joined], joined, env, timeout_s
                )
                if env.rank == 0:
                    store.set(abort_key, msg)
                    _wait_for_acks(store, prefix, [r for r in joined if r != 0], ABORT_GRACE_S)
                raise InfraError(msg)
            time.sleep(poll_s)
    except InfraError:
        raise
    except Exception as e:  # the store went away under us: rank 0 (its host) ended
        raise InfraError(
            f"lost the run's rendezvous store at {env.master_addr}:{env.master_port} while "
            f"waiting for the other ranks (rank 0 ended?): {e}"
        ) from e
    return store, [bytes(store.get(k)).decode() for k in keys]


def node_names(store: Any, env: LaunchEnv) -> list[tuple[str, str]]:
    """Every rank's (node name, source) as it posted them at the rendezvous (("", "") if unreadable)."""
    out: list[tuple[str, str]] = []
    for r in range(env.world_size):
        key = f"mlenv/{env.restart}/hello/node/{r}"
        try:
            if not store.check([key]):  # get would wait for it until the store's timeout
                raise KeyError(key)
            name, source = json.loads(bytes(store.get(key)))
            out.append((str(name), str(source)))
        except Exception:  # a rank of an older mlenv, or a value that is not ours
            out.append(("", ""))
    return out


def _wait_for_acks(store: Any, prefix: str, ranks: list[int], timeout_s: float) -> None:
    """Give the ranks that joined a moment to read the abort before rank 0's store goes away."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not store.check([f"{prefix}/ack/{r}" for r in ranks]):
        time.sleep(0.05)


def init_process_group(
    deadline_s: float,
    env: LaunchEnv,
    host: str,
    nccl_log_dir: Path | None = None,
    life: Life | None = None,
) -> tuple[str, str, list[str], list[tuple[str, str]]]:
    """Choose the device, rendezvous, start the default process group: (backend, device,
    hosts, nodes), ``nodes`` being every rank's (platform node name, source) on rank 0
    (:func:`platform_node`; empty on the other ranks).

    The group's timeout is the per-check deadline so a collective with a missing peer
    raises instead of waiting forever. Raises InputError (more ranks than GPUs) or
    InfraError (a rank never joined, the group could not start). ``life``: where this
    rank's process can be looked at, posted with its hello (:class:`Life`). With NCCL and
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
    store, hosts = rendezvous(env, host, deadline_s, life=life)
    nodes = node_names(store, env) if env.rank == 0 else []
    try:
        dist.init_process_group(
            backend=backend,
            store=store,
            rank=env.rank,
            world_size=env.world_size,
            timeout=timedelta(seconds=deadline_s),
        )
    except Exception as e:  # rendezvous failures are infrastructure, not the user's input
        raise InfraError(f"cannot start the process group ({backend}): {e}") from e
    return backend, device, hosts, nodes


# -- where a rank's process can be looked at --------------------------------------------

GONE, STOPPED, BLOCKED, ALIVE, THERE, UNKNOWN = (
    "gone",
    "stopped",
    "blocked",
    "alive",
    "there",
    "unknown",
)


@dataclass(frozen=True)
class Liveness:
    """What a look at a rank's process found: ``kind`` (one of GONE, STOPPED, BLOCKED,
    ALIVE, THERE: its port still held, UNKNOWN) and a clause saying so (``its process, pid
    123, is stopped (…)``)."""

    kind: str
    text: str

    @property
    def final(self) -> bool:
        """The process is gone, or cannot be looked at: looking again will not tell more."""
        return self.kind in (GONE, UNKNOWN)

    @property
    def halted(self) -> bool:
        """The process exists but cannot run: stopped or blocked in the kernel."""
        return self.kind in (STOPPED, BLOCKED)


@dataclass(frozen=True)
class Life:
    """Where a rank's process can be looked at from another process (posted under ``life/<rank>``)."""

    host: str
    pid: int
    start: int  # the process's start time (clock ticks after boot): a reused pid is not it
    machine: str  # boot id and pid namespace: a watcher with the same one sees the pid
    addr: str = ""  # the lifeline's address and port ("" and 0: none)
    port: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Life | None:
        try:
            d = json.loads(text)
            return cls(
                host=str(d["host"]),
                pid=int(d["pid"]),
                start=int(d["start"]),
                machine=str(d["machine"]),
                addr=str(d.get("addr", "")),
                port=int(d.get("port", 0)),
            )
        except (ValueError, KeyError, TypeError):
            return None


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of ``pid`` from ``/proc/<pid>/stat``; None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        rest = raw[raw.rindex(")") + 2 :].split()
        return rest[0], int(rest[19])
    except (OSError, ValueError, IndexError):
        return None


def machine_id() -> str:
    """This machine's boot id and this process's pid namespace (``""`` where unreadable):
    two processes with the same one see each other's pids in ``/proc``."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


# What a state letter of /proc/<pid>/stat says about a process that should be running
# and cannot: a stopped one, a blocked one.
HALTED = {
    "T": (STOPPED, "stopped (state T: SIGSTOP, Ctrl-Z or a debugger)"),
    "t": (STOPPED, "stopped by a debugger (state t)"),
    "D": (BLOCKED, "blocked in the kernel (state D: uninterruptible sleep, on I/O or a driver)"),
}


def look_at_pid(pid: int, start: int | None = None) -> Liveness:
    """The state of ``pid`` on this machine (``start``: the start time it must have, else it is
    another process that reused the pid)."""
    st = proc_stat(pid)
    if st is None or st[0] in "ZX" or (start is not None and st[1] != start):
        return Liveness(GONE, f"its process, pid {pid}, has exited")
    kind, what = HALTED.get(st[0], (ALIVE, f"alive (state {st[0]})"))
    return Liveness(kind, f"its process, pid {pid}, is {what}")


def same_machine(life: Life) -> bool:
    """Whether ``life``'s pid means the same process here (same machine, same pid namespace)."""
    return bool(life.machine) and life.machine == machine_id()


def probe(life: Life | None, timeout_s: float = 0.5, port_ok: bool | None = True) -> Liveness:
    """Look at a rank's process: by its pid where this process sees it (same machine and pid
    namespace), else by its lifeline port. ``port_ok``: whether that port answered once
    while the rank surely lived (:class:`PortCheck`); a port that never did (a firewall that
    drops, or rejects with a reset, between the nodes) tells nothing, so the rank is
    UNKNOWN rather than gone."""
    if life is None:
        return Liveness(UNKNOWN, "its process cannot be looked at from here (it posted no address)")
    if same_machine(life):
        return look_at_pid(life.pid, life.start)
    if not life.port:
        return Liveness(
            UNKNOWN, f"its process on {life.host} cannot be looked at from here (it posted no port)"
        )
    if not port_ok:
        return Liveness(
            UNKNOWN,
            f"its process on {life.host} cannot be looked at from here (its port "
            f"{life.addr}:{life.port} {'was not checked yet' if port_ok is None else 'did not answer when the run started'})",
        )
    try:
        with socket.create_connection((life.addr, life.port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        return Liveness(
            GONE,
            f"its process on {life.host} has exited, its port {life.addr}:{life.port} is closed",
        )
    except OSError as e:
        return Liveness(
            UNKNOWN,
            f"{life.host} does not answer on {life.addr}:{life.port} "
            f"({e.strerror or type(e).__name__}: host down or unreachable)",
        )
    return Liveness(
        THERE,
        f"its process on {life.host} is still there (it holds its port "
        f"{life.addr}:{life.port}): frozen or stopped, not dead",
    )


class PortCheck:
    """The first look at other ranks' lifeline ports, made at the start while every rank
    surely lives, from a thread (many at once, ``timeout_s`` each): only a port that
    answered then can later say "gone" by refusing (see :func:`probe`)."""

    def __init__(self, lives: dict[int, Life], timeout_s: float = 1.0) -> None:
        self._ok: dict[int, bool] = {}
        remote = {r: life for r, life in lives.items() if not same_machine(life) and life.port}

        def check() -> None:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=32, thread_name_prefix="mlenv-portcheck") as pool:
                for r, seen in zip(
                    remote,
                    pool.map(lambda life: probe(life, timeout_s), remote.values()),
                    strict=True,
                ):
                    self._ok[r] = seen.kind == THERE

        if remote:
            threading.Thread(target=check, name="mlenv-portcheck", daemon=True).start()

    def ok(self, rank: int) -> bool | None:
        """Whether ``rank``'s port answered at the start (None: not checked yet)."""
        return self._ok.get(rank)


class Lifeline:
    """A TCP port this process holds for as long as it lives, so that a rank on another
    machine can tell a process that is gone (connection refused) from one that is stopped
    or frozen (the kernel completes the connection from the listen backlog even then).
    Bound to the address this rank reaches the store from; a thread accepts and closes."""

    def __init__(self, toward: str, port: int) -> None:
        self.addr, self.port = "", 0
        self._sock: socket.socket | None = None
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(toward, port, type=socket.SOCK_DGRAM)[0]
            with socket.socket(
                family, socket.SOCK_DGRAM
            ) as probe_sock:  # no packet: only the route
                probe_sock.connect(sockaddr)
                ip = probe_sock.getsockname()[0]
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.bind((ip, 0))
            sock.listen(64)
        except OSError:  # no lifeline: a watcher elsewhere says it cannot look (never "died")
            return
        self._sock, self.addr, self.port = sock, str(ip), int(sock.getsockname()[1])
        threading.Thread(target=self._serve, name="mlenv-lifeline", daemon=True).start()

    def _serve(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.close()

    def life(self, host: str) -> Life:
        """This process's :class:`Life`."""
        st = proc_stat(os.getpid())
        return Life(
            host=host,
            pid=os.getpid(),
            start=st[1] if st else 0,
            machine=machine_id(),
            addr=self.addr,
            port=self.port,
        )


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
                addr,
                port,
                is_master=False,
                timeout=timedelta(seconds=timeout_s),
                wait_for_workers=False,
            )

        self._main = client()
        self._hb = client()
        self.prefix = prefix
        self._hb_stop = threading.Event()
        self._hb_thread: threading.Thread | None = None
        self._lives: dict[int, Life] = {}
        self._rank0_hb: str | None = None
        self._rank0_moved = self._store_ok = time.monotonic()
        self._rank0_port_ok: bool | None = None

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

    def post_life(self, rank: int, life: Life) -> None:
        """Post where this rank's process can be looked at (:func:`rendezvous` does, with its hello)."""
        self.set(f"life/{rank}", life.to_json())

    def life(self, rank: int) -> Life | None:
        """Where ``rank``'s process can be looked at (None when it posted nothing yet)."""
        if rank not in self._lives:
            raw = self.get_now(f"life/{rank}")
            if raw is None:
                return None
            life = Life.from_json(raw)
            if life is None:
                return None
            self._lives[rank] = life
        return self._lives[rank]

    def start_heartbeat(self, rank: int) -> None:
        """Beat every HEARTBEAT_PERIOD_S from a daemon thread until :meth:`stop`.

        On the other ranks the same thread reads rank 0's heartbeat (and, once, where rank
        0's process can be looked at), for :meth:`watch_rank0`. A store call that fails is
        tried again next period: the store may be frozen with rank 0 and come back."""

        def beat() -> None:
            n = 0
            key0 = self.key("hb/0")
            while not self._hb_stop.is_set():
                n += 1
                try:
                    self._hb.set(self.key(f"hb/{rank}"), str(n).encode())
                    if rank != 0:
                        v = bytes(self._hb.get(key0)).decode() if self._hb.check([key0]) else None
                        if v != self._rank0_hb:
                            self._rank0_hb, self._rank0_moved = v, time.monotonic()
                        if 0 not in self._lives and self._hb.check([self.key("life/0")]):
                            life = Life.from_json(bytes(self._hb.get(self.key("life/0"))).decode())
                            if (
                                life is not None
                            ):  # rank 0 beats: its port, if any, answers now or never
                                self._rank0_port_ok = (
                                    same_machine(life) or probe(life, 1.0).kind == THERE
                                )
                                self._lives[0] = life
                    self._store_ok = time.monotonic()
                except Exception:  # the store went away (rank 0 ended, or froze): watch_rank0 tells
                    pass
                self._hb_stop.wait(HEARTBEAT_PERIOD_S)

        self._hb_thread = threading.Thread(target=beat, name="mlenv-heartbeat", daemon=True)
        self._hb_thread.start()

    def watch_rank0(self, limit_s: float, on_lost: Callable[[str], None], host0: str) -> None:
        """Another rank's watch on rank 0: when rank 0's heartbeat has not moved for
        ``limit_s`` (rank 0 stopped, frozen or gone: under the DeepSpeed launcher the store
        lives in rank 0, so it stops answering with it), call ``on_lost`` once with a line
        naming rank 0, its host and what its process is doing. From a thread that never
        touches the store (the heartbeat thread may be stuck in a call to it)."""

        def watch() -> None:
            while not self._hb_stop.wait(HEARTBEAT_PERIOD_S):
                quiet = time.monotonic() - self._rank0_moved
                if quiet <= limit_s:
                    continue
                on_lost(self.rank0_lost_line(host0, quiet))
                return

        threading.Thread(target=watch, name="mlenv-rank0-watch", daemon=True).start()

    def rank0_silent_s(self) -> float:
        """Seconds since this rank last saw rank 0's heartbeat move."""
        return time.monotonic() - self._rank0_moved

    def rank0_lost_line(self, host0: str, quiet: float | None = None) -> str:
        """``rank 0 (host) hung: …``: what this rank can tell about a silent rank 0."""
        quiet = self.rank0_silent_s() if quiet is None else quiet
        life = probe(self._lives.get(0), port_ok=self._rank0_port_ok)
        verb = {GONE: "died", UNKNOWN: "lost"}.get(life.kind, "hung")
        store = time.monotonic() - self._store_ok
        frozen = (
            f"; the run's store does not answer either (for {store:.0f} s)"
            if store > 2 * HEARTBEAT_PERIOD_S
            else ""
        )
        return (
            f"rank 0 ({host0}) {verb}: no heartbeat from it for {quiet:.0f} s{frozen}; {life.text}"
        )

    def stop(self) -> None:
        """Stop the heartbeat thread (and the watch on rank 0)."""
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

    def quiet_for(self, rank: int) -> float:
        """Seconds since ``rank``'s heartbeat last moved (or since the watch began)."""
        return time.monotonic() - self._changed[rank]

    def stale(self, ranks: list[int] | None = None) -> list[int]:
        """Ranks (of ``ranks``) whose heartbeat has not moved for ``stale_s``."""
        now = time.monotonic()
        pool = range(self.world_size) if ranks is None else ranks
        return [r for r in pool if now - self._changed[r] > self.stale_s]
