"""A real Slurm cluster on this machine: munged, slurmctld and one slurmd per compute host.

Two shapes, same class:

- ``SlurmCluster(root)``: one host, the machine itself (NodeName = ``hostname``);
- ``SlurmCluster(root, pods=netns.Cluster(2, ...))``: the controller on this machine and
  one slurmd in each network-namespace "host" of the netns harness (NodeName = that
  host's hostname, ``ml-dev-env-<i>``), reached over the harness's bridge, to which this
  machine gets an address (``<subnet>.1``).

Everything lives under ``root`` (key, state, spool, logs, ``slurm.conf``); clients find it
through ``SLURM_CONF`` (:meth:`env`). Daemons are Debian's ``slurmctld``/``slurmd``/``munged``
run as root with ``proctrack/linuxproc`` (no cgroups in a container), CPU-only nodes and no
accounting database (``sacct`` has nothing; ``scontrol show job`` keeps finished jobs for
``MinJobAge``). Only processes this class started are stopped, by their pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from harness import netns
from harness.netns import _children, _comm

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")


def _sbin(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)), None
    )


def unavailable_reason() -> str | None:
    """Why a real Slurm cluster cannot start here (None: it can)."""
    if os.geteuid() != 0:
        return "the Slurm harness runs slurmd/slurmctld as root"
    missing = [d for d in DAEMONS if _sbin(d) is None] + [
        c for c in CLIENTS if shutil.which(c) is None
    ]
    if missing:
        return (
            f"Slurm/munge not installed ({', '.join(missing)} missing; scripts/dev/system-deps.sh "
            "installs slurmctld slurmd munge slurm-client with apt)"
        )
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    """A running (after :meth:`start`) Slurm cluster; see the module docstring."""

    root: str
    pods: Any = None  # harness.netns.Cluster (already set up) or None: the machine itself
    partition: str = "debug"
    cpus: int = 2
    slurmd_timeout_s: int = (
        20  # a loaded 2-core machine answers pings late; 10 s flagged healthy nodes
    )
    nodes: list[str] = field(default_factory=list)
    addrs: list[str] = field(default_factory=list)
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _slurmd: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    _pidfiles: list[str] = field(default_factory=list)
    start_s: float = 0.0
    # leaf switch → its nodes; with it, slurm.conf names topology/tree and a
    # topology.conf beside it gives one level-0 switch per entry under one spine
    topology: dict[str, list[str]] | None = None
    # Slurm node names other than the hosts' names (NodeName=alias NodeHostname=host), as
    # at sites whose nodes' hostnames are FQDNs or vendor names; None: NodeName = hostname
    aliases: list[str] | None = None
    hostnames: list[str] = field(default_factory=list)
    # GPUs each node declares as GRES (count only: no device files, the ranks stay on CPU),
    # so that jobs can request them and site rules can demand they do; 0 = none
    gpus: int = 0
    # a site's job_submit.lua (JobSubmitPlugins=lua), written beside slurm.conf
    job_submit_lua: str | None = None
    # slurmd's spool as slurm.conf names it: a short link to <root>/spool (below)
    spool: str = ""

    @property
    def conf(self) -> str:
        return os.path.join(self.root, "slurm.conf")

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """This process's environment with ``SLURM_CONF`` pointing at the cluster."""
        env = {**os.environ, "SLURM_CONF": self.conf}
        env.update(extra or {})
        return env

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (from the controller host)."""
        return subprocess.run(
            list(argv), env=self.env(), capture_output=True, text=True, timeout=timeout, check=False
        )

    # --- start --------------------------------------------------------------------------

    def start(self, timeout: float = 40.0) -> None:
        t0 = time.monotonic()
        for d in ("munge", "state", "spool", "log"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        # A job step's Unix socket is <SlurmdSpoolDir>/<node>_<job>.<step> and may be at most
        # 108 bytes: under pytest's basetemp of a test worker with a long folder name it was
        # 113, and slurmstepd died ("Could not launch job 2 and not able to requeue it,
        # cancelling job"). So slurm.conf names the spool by a short link.
        self.spool = f"/tmp/mlsl-{os.urandom(4).hex()}"
        os.symlink(os.path.join(self.root, "spool"), self.spool)
        os.chmod(os.path.join(self.root, "munge"), 0o700)
        key = os.path.join(self.root, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(self.root, "munge", "munge.sock")
        pid = os.path.join(self.root, "munge", "munged.pid")
        r = subprocess.run(
            [
                _sbin("munged") or "munged",
                f"--key-file={key}",
                f"--socket={sock}",
                f"--pid-file={pid}",
                f"--log-file={os.path.join(self.root, 'log', 'munged.log')}",
                f"--seed-file={os.path.join(self.root, 'munge', 'seed')}",
                "--force",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            raise RuntimeError(f"munged: {r.stderr.strip()}")
        self._pidfiles.append(pid)
        host = socket.gethostname()
        if self.pods is None:
            self.nodes, self.addrs, ctl_addr = [host], [""], ""
        else:
            net = self.pods._subnet()
            ctl_addr = f"{net}.1"
            subprocess.run(
                ["ip", "addr", "add", f"{ctl_addr}/24", "dev", self.pods.bridge],
                check=True,
                capture_output=True,
            )
            self.hostnames = [p.hostname for p in self.pods.pods]
            self.nodes = list(self.aliases or self.hostnames)
            self.addrs = [p.address for p in self.pods.pods]
            if self.aliases:
                self._resolve_aliases()
        self._write_conf(host, ctl_addr, sock)
        ctld_pid = os.path.join(self.root, "slurmctld.pid")
        r = subprocess.run(
            [_sbin("slurmctld") or "slurmctld", "-i", "-f", self.conf],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            raise RuntimeError(f"slurmctld: {r.stderr.strip()}")
        self._pidfiles.append(ctld_pid)
        for i, name in enumerate(self.nodes):
            os.makedirs(os.path.join(self.root, "spool", name), exist_ok=True)
            if self.pods is not None:
                self._cgroupfs(i)
                private_shm(self.pods, i)
            self.start_slurmd(i)
        self.wait_idle(timeout)
        self.start_s = time.monotonic() - t0

    def _resolve_aliases(self) -> None:
        """Every host resolves the Slurm node names too (a site's NodeNames resolve; the
        rendezvous host is one): appended to each host's bind-mounted /etc/hosts file."""
        lines = "".join(f"{a} {n}\n" for a, n in zip(self.addrs, self.nodes, strict=True))
        for i in range(len(self.nodes)):
            with open(os.path.join(self.pods.root, f"pod{i}", "hosts"), "a", encoding="utf-8") as f:
                f.write(lines)

    def _write_conf(self, host: str, ctl_addr: str, sock: str) -> None:
        r = self.root
        ctl = f"{host}({ctl_addr})" if ctl_addr else host
        lines = [
            "ClusterName=mlenvtest",
            f"SlurmctldHost={ctl}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port() if self.pods is None else 6818}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={sock}",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={self.spool}/%n",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={self.spool}/%n/slurmd.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "JobCompType=jobcomp/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            f"SlurmdTimeout={self.slurmd_timeout_s}",
            "SlurmctldTimeout=10",
            "MessageTimeout=10",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=600",
            "HealthCheckInterval=0",
        ]
        if self.gpus:
            # slurmd counts a GPU per device file and finds none with Count alone: stand-ins
            # for /dev/nvidiaN that are /dev/null's device (nothing opens them here)
            for g in range(self.gpus):
                dev = os.path.join(r, f"gpu{g}")
                if not os.path.exists(dev):
                    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            lines.append("GresTypes=gpu")
            with open(os.path.join(r, "gres.conf"), "w", encoding="utf-8") as f:
                f.write(f"Name=gpu File={r}/gpu[0-{self.gpus - 1}]\n")
        if self.job_submit_lua:
            lines.append("JobSubmitPlugins=lua")
            with open(os.path.join(self.root, "job_submit.lua"), "w", encoding="utf-8") as f:
                f.write(self.job_submit_lua)
        for i, (name, addr) in enumerate(zip(self.nodes, self.addrs, strict=True)):
            lines.append(
                f"NodeName={name}"
                + (f" NodeHostname={self.hostnames[i]}" if self.aliases else "")
                + (f" NodeAddr={addr}" if addr else "")
                + f" CPUs={self.cpus}"
                + (f" Gres=gpu:{self.gpus}" if self.gpus else "")
                + " State=UNKNOWN"
            )
        lines.append(
            f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE"
        )
        if self.topology:
            lines.append("TopologyPlugin=topology/tree")
            leaves = [
                f"SwitchName={leaf} Nodes={','.join(nodes)}"
                for leaf, nodes in self.topology.items()
            ]
            with open(os.path.join(self.root, "topology.conf"), "w", encoding="utf-8") as f:
                f.write(
                    "\n".join([*leaves, f"SwitchName=spine Switches={','.join(self.topology)}"])
                    + "\n"
                )
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    def _cgroupfs(self, i: int) -> None:
        """``ip netns exec`` gives the host a fresh /sys without cgroups, and slurmd refuses to
        start without them: mount the machine's v1 controllers (and the v2 tree) again there."""
        script = (
            "set -e; mount -t tmpfs -o mode=0755 cgroup /sys/fs/cgroup; "
            "for c in cpu cpuacct cpuset memory devices freezer pids; do "
            "mkdir -p /sys/fs/cgroup/$c; mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || true; done; "
            "mkdir -p /sys/fs/cgroup/systemd; mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd || true; "
            "mkdir -p /sys/fs/cgroup/unified; mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified || true"
        )
        r = self.pods.run(i, ["sh", "-c", script], dict(os.environ), timeout=20)
        if r.returncode != 0:
            raise RuntimeError(f"{self.nodes[i]}: cannot mount cgroups: {r.stdout.strip()}")

    def start_slurmd(self, i: int) -> None:
        """Start node ``i``'s slurmd (again, after :meth:`kill_slurmd`)."""
        name = self.nodes[i]
        argv = [_sbin("slurmd") or "slurmd", "-D", "-N", name, "-f", self.conf]
        if self.pods is None:
            p = subprocess.Popen(
                argv,
                env=self.env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        else:
            p = self.pods.popen(
                i,
                argv,
                self.env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._procs.append(p)
        self._slurmd[i] = p

    def node_states(self) -> dict[str, str]:
        r = self.run("sinfo", "-h", "-N", "-o", "%N %T")
        out = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    def wait_idle(self, timeout: float = 40.0) -> None:
        end = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < end:
            states = self.node_states()
            if len(states) == len(self.nodes) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.3)
        raise RuntimeError(
            f"Slurm nodes not idle within {timeout:g} s: {states}; see {self.root}/log"
        )

    # --- faults -------------------------------------------------------------------------

    def slurmd_pid(self, i: int) -> int | None:
        """Host-side pid of node ``i``'s slurmd (its process, found by our own Popen's child)."""
        p = self._slurmd.get(i)
        if p is None or p.poll() is not None:
            return None
        if self.pods is None:
            return p.pid
        # nsenter forks into the pod's PID namespace: the slurmd is its child
        return next((pid for pid in _children(p.pid) if _comm(pid) == "slurmd"), None)

    def kill_slurmd(self, i: int) -> None:
        """SIGKILL node ``i``'s slurmd only (its running job steps stay, as on a real crash)."""
        pid = self.slurmd_pid(i)
        if pid is None:
            raise RuntimeError(f"no slurmd of {self.nodes[i]} is running")
        os.kill(pid, signal.SIGKILL)

    def crash_node(self, i: int) -> None:
        """Node ``i`` dies: SIGKILL every process of its host (slurmd, slurmstepd, the ranks)
        but the host's init, so slurmd can be started again afterwards. Killing slurmd alone
        leaves the job's steps running, and a short job then completes before slurmctld
        notices the node is gone: a race, not a node failure."""
        if self.pods is None:
            raise RuntimeError("crash_node needs the netns hosts")
        self.pods.run(i, ["sh", "-c", "kill -KILL -1"], dict(os.environ), timeout=20)

    def set_node(self, node: str, state: str, reason: str = "mlenv test") -> None:
        r = self.run("scontrol", "update", f"NodeName={node}", f"State={state}", f"Reason={reason}")
        if r.returncode != 0:
            raise RuntimeError(f"scontrol update {node} {state}: {r.stderr.strip()}")

    # --- stop ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel every job, stop our daemons (by pid) and drop the bridge address."""
        with contextlib.suppress(Exception):
            self.run("scancel", "--user=root", timeout=10)
        for pf in reversed(self._pidfiles):
            with contextlib.suppress(OSError, ValueError):
                with open(pf, encoding="ascii") as f:
                    os.kill(int(f.read().strip()), signal.SIGTERM)
        for p in self._procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        if self.pods is None:
            # job steps left by a killed slurmd run in this namespace: end them by their pid
            for pid in _pids_named("slurmstepd", self.conf):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.spool and os.path.islink(self.spool):
            os.unlink(self.spool)


@contextlib.contextmanager
def on_netns_hosts(
    root: str,
    hosts: int = 2,
    *,
    topology: dict[str, list[str]] | None = None,
    aliases: list[str] | None = None,
    gpus: int = 0,
    job_submit_lua: str | None = None,
) -> Iterator[SlurmCluster]:
    """A started :class:`SlurmCluster` with one slurmd in each of ``hosts`` netns hosts
    (``<root>/pods``, ``<root>/slurmd``); stopped, and the hosts torn down, on the way out.
    The shape the Slurm tests and the Slurm benchmark run on. ``topology``: leaf switch →
    host names, for Slurm's topology/tree plugin (none by default). ``aliases``: the
    hosts' Slurm node names when they are not their host names. ``gpus``: GPU GRES per
    node (count only); ``job_submit_lua``: a site's submission rule."""
    pods = netns.Cluster(hosts, os.path.join(root, "pods"))
    pods.setup()
    sl = SlurmCluster(
        os.path.join(root, "slurmd"),
        pods=pods,
        topology=topology,
        aliases=aliases,
        gpus=gpus,
        job_submit_lua=job_submit_lua,
    )
    try:
        sl.start()
        yield sl
    finally:
        sl.stop()
        pods.teardown()


def private_shm(pods: Any, i: int) -> None:
    """Give netns host ``i`` its own /dev/shm, as a real machine has. The hosts otherwise
    share this machine's: DeepSpeed's CPU all-reduce names its buffers after MASTER_ADDR,
    MASTER_PORT and the local rank, so local rank 0 of both hosts opened the same buffer
    and the training check hung now and then."""
    r = pods.run(
        i,
        ["mount", "-t", "tmpfs", "-o", "mode=1777,size=2g", "tmpfs", "/dev/shm"],
        dict(os.environ),
        timeout=20,
    )
    if r.returncode != 0:
        raise RuntimeError(f"host {i}: cannot mount a private /dev/shm: {r.stdout.strip()}")


def _pids_named(comm: str, marker: str) -> list[int]:
    """Processes called ``comm`` whose environment names ``marker`` (our SLURM_CONF): ours only."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and _comm(int(d)) == comm:
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(d))
            except OSError:
                continue
    return out
