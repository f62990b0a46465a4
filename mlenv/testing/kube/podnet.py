"""Pod networking for the kube tier: what a CNI bridge plugin and a pause container give a
pod on a real node (a DeepSpeed run over ssh between the pods).

Per plane, ``up`` makes a bridge ``mlkb<tag>`` holding the gateway (the first address) of
a /16 chosen free on this machine at start (:func:`create_plane_net`, recorded in the
tier's ``network.json``; two planes never share one, see :func:`_claim`). Per pod, the
pod-root controller starts a holder (``unshare --net -- sleep infinity``: the pause
container), moves one end of a veth pair into its network namespace as ``eth0`` with the
pod's address and a default route via the gateway, and attaches the other end
(``mlkv<tag>``) to the bridge (:func:`attach`). The record ``<pod folder>/netns`` (one line:
holder pid, its start time, its namespace's inode, the veth, the address, the pod's uid)
is how confine.sh enters that namespace for every exec: through ``/proc/PID/ns/net``,
since a ``/run/netns`` mount made after kwok started would not reach kwok's private mount
namespace, and only after checking that the namespace there is still the one recorded
(its inode), so a reused pid is never entered. Nothing here routes beyond the bridge
(this machine's forwarding is left as it is), and NetworkPolicy is not enforced.

Everything created on the host is named with the ``mlk`` prefix and recorded, and only
what is recorded is removed (:func:`release`, :func:`delete_plane_net`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "mlk"
BRIDGE_PREFIX = PREFIX + "b"
VETH_PREFIX = PREFIX + "v"
NET_FILE = "network.json"
RECORD = "netns"
# Where a plane's /16 is taken from: 10.128.0.0 to 10.223.255.255 (the netns harness of the
# integration tests uses 10.231.x; anything this machine already has is skipped as well).
SECOND_OCTETS = range(128, 224)
HOLDER = ("unshare", "--net", "--", "sleep", "infinity")


class NetError(RuntimeError):
    """A pod's or the plane's network could not be made (the message says which command)."""


def _ip(*args: str) -> str:
    argv = ["ip", *args]
    res = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    if res.returncode != 0:
        raise NetError(f"{' '.join(argv)}: {res.stderr.strip()}")
    return res.stdout


def _in_netns(pid: int, *args: str) -> None:
    argv = ["nsenter", f"--net=/proc/{pid}/ns/net", "--", "ip", *args]
    res = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    if res.returncode != 0:
        raise NetError(f"{' '.join(argv)}: {res.stderr.strip()}")


def _host_networks() -> list[tuple[str, ipaddress.IPv4Network]]:
    """(interface, network) of every IPv4 address and route on this machine."""
    out: list[tuple[str, ipaddress.IPv4Network]] = []
    for link in json.loads(_ip("-4", "-j", "addr") or "[]"):
        for a in link.get("addr_info") or []:
            out.append(
                (
                    link["ifname"],
                    ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False),
                )
            )
    for r in json.loads(_ip("-4", "-j", "route") or "[]"):
        if r.get("dst", "default") != "default":
            dst = r["dst"] if "/" in r["dst"] else f"{r['dst']}/32"
            out.append((r.get("dev", ""), ipaddress.IPv4Network(dst, strict=False)))
    return out


@dataclass(frozen=True)
class PlaneNet:
    bridge: str
    cidr: ipaddress.IPv4Network

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return self.cidr.network_address + 1

    def to_json(self) -> str:
        return (
            json.dumps(
                {"bridge": self.bridge, "cidr": str(self.cidr), "gateway": str(self.gateway)}
            )
            + "\n"
        )


def load_plane_net(folder: Path) -> PlaneNet | None:
    try:
        doc = json.loads((folder / NET_FILE).read_text())
        return PlaneNet(doc["bridge"], ipaddress.IPv4Network(doc["cidr"]))
    except (OSError, ValueError, KeyError):
        return None


def _link_exists(name: str) -> bool:
    return (
        subprocess.run(
            ["ip", "link", "show", "dev", name], capture_output=True, check=False, timeout=30
        ).returncode
        == 0
    )


def _claim(bridge: str, cidr: ipaddress.IPv4Network) -> bool:
    """Put the gateway of ``cidr`` on our bridge, then look again: when another interface
    has an address in ``cidr`` too (another plane that chose it at the same moment), take
    ours off and say no; both sides then choose again at random."""
    _ip("addr", "add", f"{cidr.network_address + 1}/{cidr.prefixlen}", "dev", bridge)
    if any(dev != bridge and net.overlaps(cidr) for dev, net in _host_networks()):
        _ip("addr", "flush", "dev", bridge)
        return False
    return True


def create_plane_net(folder: Path) -> PlaneNet:
    """A bridge of ours and a /16 no interface or route of this machine uses; recorded in
    ``folder/network.json`` before anything is made, so ``down`` removes it even half made."""
    delete_plane_net(folder)  # a previous run's, if it was left
    bridge = BRIDGE_PREFIX + secrets.token_hex(4)
    (folder / NET_FILE).write_text(PlaneNet(bridge, ipaddress.IPv4Network("10.0.0.0/16")).to_json())
    _ip("link", "add", bridge, "type", "bridge")
    candidates = [ipaddress.IPv4Network(f"10.{b}.0.0/16") for b in SECOND_OCTETS]
    random.SystemRandom().shuffle(candidates)
    for cidr in candidates:
        if any(net.overlaps(cidr) for _, net in _host_networks()):
            continue
        if _claim(bridge, cidr):
            net = PlaneNet(bridge, cidr)
            (folder / NET_FILE).write_text(net.to_json())
            _ip("link", "set", bridge, "up")
            return net
    raise NetError(
        f"no free /16 in 10.{SECOND_OCTETS.start}-{SECOND_OCTETS.stop - 1}.0.0 for the pods' bridge"
    )


def delete_plane_net(folder: Path) -> str | None:
    """Remove the bridge ``folder/network.json`` records (only a name of ours); its name."""
    net = load_plane_net(folder)
    (folder / NET_FILE).unlink(missing_ok=True)
    if net is None or not net.bridge.startswith(BRIDGE_PREFIX):
        return None
    if _link_exists(net.bridge):
        _ip("link", "del", net.bridge)
        return net.bridge
    return None


@dataclass(frozen=True)
class PodNet:
    """One pod's network, as its record line holds it."""

    pid: int
    started: str
    inode: int
    veth: str
    ip: str
    uid: str

    def line(self) -> str:
        return f"{self.pid} {self.started} {self.inode} {self.veth} {self.ip} {self.uid}\n"


def read_record(pod_folder: Path) -> PodNet | None:
    try:
        pid, started, inode, veth, ip, uid = (pod_folder / RECORD).read_text().split()
        return PodNet(int(pid), started, int(inode), veth, ip, uid)
    except (OSError, ValueError):
        return None


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), None when gone: how a
    recorded pid is told from a reused one (the holders here, plane.py's processes)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def holder_alive(rec: PodNet) -> bool:
    """The recorded holder still runs (same pid and start time) in the recorded namespace."""
    return start_time(rec.pid) == rec.started and _netns_inode(rec.pid) == rec.inode


def start_holder() -> tuple[int, str, int]:
    """A process alone in a new network namespace, with ``lo`` up: (pid, start time, inode).
    A session of its own, so that a signal to the controller's group leaves the pods'
    networks; they go when the pod goes (:func:`release`) or with the tier (``down``)."""
    unshare = shutil.which("unshare") or "unshare"
    proc = subprocess.Popen(
        [unshare, *HOLDER[1:]],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    ours = _netns_inode(os.getpid())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            raise NetError(f"unshare --net: exit {proc.returncode}: {err}")
        inode, started = _netns_inode(proc.pid), start_time(proc.pid)
        # unshare has made the namespace once the pid's namespace is no longer ours
        if inode is not None and inode != ours and started is not None:
            if proc.stderr is not None:
                proc.stderr.close()
            _in_netns(proc.pid, "link", "set", "lo", "up")
            return proc.pid, started, inode
        time.sleep(0.01)
    _kill(proc.pid)
    raise NetError("unshare --net: no new network namespace after 10 s")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    try:
        os.waitpid(pid, 0)  # ours to reap when this process started it
    except ChildProcessError:
        pass


def used_addresses(pods: Path) -> set[str]:
    """The addresses recorded by the pods under ``pods`` (the tier's ``pods/``)."""
    return {
        rec.ip for f in pods.glob(f"*/*/{RECORD}") if (rec := read_record(f.parent)) is not None
    }


def allocate(net: PlaneNet, pods: Path) -> str:
    """The lowest address of the plane's range not held by a pod (the gateway excluded)."""
    used = used_addresses(pods) | {str(net.gateway)}
    for host in net.cidr.hosts():
        if str(host) not in used:
            return str(host)
    raise NetError(f"no free pod address left in {net.cidr}")


def attach(pod_folder: Path, net: PlaneNet, uid: str) -> PodNet:
    """The pod's network: holder, veth pair, address and route, and its record. A record
    for this pod (same uid) whose holder still runs is kept; any other is released first."""
    rec = read_record(pod_folder)
    if rec is not None and rec.uid == uid and holder_alive(rec):
        return rec
    release(pod_folder)
    ip = allocate(net, pod_folder.parent.parent)
    pid, started, inode = start_holder()
    veth = VETH_PREFIX + secrets.token_hex(4)
    # recorded first: a failure below is released like a pod's network
    rec = PodNet(pid, started, inode, veth, ip, uid)
    (pod_folder / RECORD).write_text(rec.line())
    try:
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(pid))
        _ip("link", "set", veth, "master", net.bridge, "up")
        _in_netns(pid, "addr", "add", f"{ip}/{net.cidr.prefixlen}", "dev", "eth0")
        _in_netns(pid, "link", "set", "eth0", "up")
        _in_netns(pid, "route", "add", "default", "via", str(net.gateway), "dev", "eth0")
    except BaseException:
        release(pod_folder)
        raise
    return rec


def release(pod_folder: Path) -> PodNet | None:
    """Kill the pod's holder (only when it is still the recorded process) and delete its
    veth (only a name of ours); the record goes. The record, or None when there was none."""
    rec = read_record(pod_folder)
    if rec is None:
        return None
    if start_time(rec.pid) == rec.started:
        _kill(rec.pid)
    if rec.veth.startswith(VETH_PREFIX) and _link_exists(rec.veth):
        subprocess.run(
            ["ip", "link", "del", rec.veth], capture_output=True, check=False, timeout=30
        )
    (pod_folder / RECORD).unlink(missing_ok=True)
    return rec


def release_all(pods: Path) -> list[PodNet]:
    """Every pod network recorded under ``pods`` (the tier's ``pods/``), released."""
    out = []
    for f in sorted(pods.glob(f"*/*/{RECORD}")):
        rec = release(f.parent)
        if rec is not None:
            out.append(rec)
    return out
