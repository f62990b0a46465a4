"""What NCCL says it used, read from its own log (``NCCL_DEBUG=INFO``); pure, stdlib only.

The lines are matched on NCCL's format strings (NVIDIA/nccl, quoted next to each
pattern), never on prose around them, so a new NCCL version that adds lines changes
nothing here. A line looks like ``host:pid:tid [cudaDev] NCCL INFO <message>``; a WARN
line is ``host:pid:tid [cudaDev] file.cc:NNN NCCL WARN <message>`` (sometimes preceded
by a timestamp in brackets).

Also here, because the judgement needs them and they are pure: NCCL's own list
matching for ``NCCL_IB_HCA`` / ``NCCL_SOCKET_IFNAME`` (``^`` excludes, ``=`` matches
exactly, otherwise each entry is a *prefix*, ``name:port`` limits the port), and the
plan of ``NCCL_DEBUG*`` variables the acceptance ranks run with (:func:`capture_plan`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# ``host:pid:tid [dev] NCCL INFO msg`` / ``[ts] host:pid:tid [dev] file:line NCCL WARN msg``
_LINE = re.compile(
    r"^(?:\[[^\]]*\]\s*)?(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>-?\d+)\]"
    r"(?: [^\s]+:\d+)? NCCL (?P<level>INFO|WARN|TRACE) ?(?P<msg>.*)$"
)
# init.cc: "NCCL version %s"
_VERSION = re.compile(r"^NCCL version (\S+)")
# init.cc: "Using network %s" (the plugin a communicator was given: IB, Socket, or a plugin's name)
_USING_NETWORK = re.compile(r"^Using network (.+?)\s*$")
# transport/net_ib (init.cc in 2.2x, net_ib.cc before): "NET/IB : Using%s %s; OOB %s:%s" where
# %s is " [%d]%s:%d/%s" per device (index, device, port, "IB"|"RoCE"), "/SHARP" on SHARP builds
_IB_USING = re.compile(r"^NET/IB ?: Using(?P<devs>.*?)(?P<ro> \[RO\])? ?; OOB (?P<oob>\S+)")
_IB_DEV = re.compile(
    r"\[(?P<i>\d+)\](?P<name>[^:\s\[\]]+):(?P<port>\d+)/(?P<link>IB|RoCE)(?P<sharp>/SHARP)?"
)
# "NET/IB : No device found."
_IB_NO_DEVICE = re.compile(r"^NET/IB ?: No device found")
# transport/net_socket.cc: "NET/Socket : Using%s" with " [%d]%s:%s" per interface (name, address)
_SOCKET_USING = re.compile(r"^NET/Socket ?: Using(?P<ifs>.*)$")
_SOCKET_IF = re.compile(r"\[(?P<i>\d+)\](?P<name>[^:\s\[\]]+):(?P<addr>\S+)")
# graph/topo.cc: "NET/%s : GPU Direct RDMA %s for HCA %d '%s'"
_GDR = re.compile(
    r"^NET/(?P<net>\S+) ?: GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<i>\d+) '(?P<name>[^']*)'"
)
# transport/net.cc sendSetup/recvSetup:
# "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s" (+ "(%d)" proxy rank after the
# device on PXN), suffixes "/GDRDMA", "(PCI)", "/Shared"; older NCCL printed busIds in the [].
_CHANNEL = re.compile(
    r"^Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[[0-9a-fA-Fx]+\] -> "
    r"(?P<dst>\d+)\[[0-9a-fA-Fx]+\] \[(?P<dir>send|receive)\] via "
    r"NET/(?P<net>[^/\s]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<rest>\S*)"
)
# plugin/net.cc: "Failed to initialize NET plugin %s" / WARN "Failed to initialize any NET plugin"
_PLUGIN_FAILED = re.compile(r"^Failed to initialize NET plugin (\S+)")
_NO_PLUGIN = re.compile(r"^Failed to initialize any NET plugin")
# misc/param.cc: "%s set by environment to %s" (trailing "." on some); net_ib: "NCCL_IB_HCA set to %s"
_ENV_SET = re.compile(r"^(?P<key>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<val>.*?)\.?\s*$")

EVIDENCE_LIMIT = 40


@dataclass(frozen=True)
class IbDevice:
    """One HCA port NCCL's IB transport opened (``[0]mlx5_0:1/RoCE``)."""

    index: int
    name: str
    port: int
    link: str  # "IB" | "RoCE"
    sharp: bool = False

    def label(self) -> str:
        """``mlx5_0:1/RoCE`` as NCCL prints it."""
        return f"{self.name}:{self.port}/{self.link}"


@dataclass(frozen=True)
class SocketIf:
    """One interface NCCL's socket transport uses (``[0]eth0:10.0.0.1<0>``)."""

    index: int
    name: str
    address: str


@dataclass(frozen=True)
class GdrSupport:
    """``NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'``: what NCCL can do on one NIC."""

    net: str
    index: int
    name: str
    enabled: bool


@dataclass(frozen=True)
class NetChannel:
    """One network connection of one channel (``Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA``)."""

    channel: int
    direction: str  # "send" | "receive"
    src: int
    dst: int
    net: str  # "IB" | "Socket" | a plugin's name
    dev: int  # NCCL's net device index (the [i] of the "Using" list)
    proxy: int | None  # the proxy rank with PXN
    gdr: bool
    shared: bool


@dataclass
class NcclLog:
    """Everything the transport judgement needs from one process's NCCL log."""

    lines: int = 0  # NCCL lines seen
    hosts: list[str] = field(
        default_factory=list
    )  # as NCCL names them (hostname up to the first dot)
    version: str | None = None
    networks: list[str] = field(
        default_factory=list
    )  # "Using network X", in order, one per communicator
    ib_devices: list[IbDevice] = field(default_factory=list)
    ib_oob: str | None = None
    ib_no_device: bool = False
    socket_ifs: list[SocketIf] = field(default_factory=list)
    gdr_support: list[GdrSupport] = field(default_factory=list)
    channels: list[NetChannel] = field(default_factory=list)
    failed_plugins: list[str] = field(default_factory=list)
    no_net_plugin: bool = False
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* NCCL says it read
    warnings: list[str] = field(default_factory=list)
    evidence: list[str] = field(
        default_factory=list
    )  # the lines that say what was used, as printed
    evidence_dropped: int = 0

    @property
    def network(self) -> str | None:
        """The network NCCL used: the last ``Using network`` (every communicator gets one)."""
        return self.networks[-1] if self.networks else None

    def net_channels(self, net: str | None = None) -> list[NetChannel]:
        """Channel connections over the network (of ``net`` only, when given)."""
        return [c for c in self.channels if net is None or c.net == net]

    def to_summary(self) -> dict[str, object]:
        """A JSON-ready digest for ``details`` (the lines themselves go in ``evidence``)."""
        per_path: dict[str, int] = {}
        for c in self.channels:
            key = f"NET/{c.net}/{c.dev}{'/GDRDMA' if c.gdr else ''}"
            per_path[key] = per_path.get(key, 0) + 1
        return {
            "nccl_version": self.version,
            "networks": sorted(set(self.networks)),
            "ib_devices": [d.label() for d in self.ib_devices],
            "ib_no_device": self.ib_no_device,
            "socket_interfaces": [f"{s.name}:{s.address}" for s in self.socket_ifs],
            "gdr_support": {f"{g.net}:{g.name}": g.enabled for g in self.gdr_support},
            "net_channels": per_path,
            "failed_plugins": list(self.failed_plugins),
            "warnings": self.warnings[:10],
            "lines": self.lines,
        }


def _add_evidence(log: NcclLog, line: str, seen: set[str]) -> None:
    if line in seen:
        return
    seen.add(line)
    if len(log.evidence) < EVIDENCE_LIMIT:
        log.evidence.append(line)
    else:
        log.evidence_dropped += 1


def parse(text: str | Iterable[str]) -> NcclLog:
    """Parse NCCL log text (a string or lines); lines that are not NCCL's are ignored.

    Channel lines are many (one per channel, direction and peer): the first line of
    each distinct path (``NET/IB/0/GDRDMA``) is kept as evidence, every one is counted.
    """
    log = NcclLog()
    seen: set[str] = set()
    paths: set[str] = set()
    lines = text.splitlines() if isinstance(text, str) else text
    for raw in lines:
        line = raw.rstrip("\n").strip()
        m = _LINE.match(line)
        if not m:
            continue
        log.lines += 1
        host, level, msg = m.group("host"), m.group("level"), m.group("msg").strip()
        if host not in log.hosts:
            log.hosts.append(host)
        if level == "WARN":
            log.warnings.append(msg)
            if _NO_PLUGIN.match(msg):
                log.no_net_plugin = True
            _add_evidence(log, line, seen)
            continue
        if (v := _VERSION.match(msg)) and log.version is None:
            log.version = v.group(1)
            _add_evidence(log, line, seen)
        elif u := _USING_NETWORK.match(msg):
            log.networks.append(u.group(1))
            _add_evidence(log, line, seen)
        elif ib := _IB_USING.match(msg):
            devs = [
                IbDevice(
                    int(d.group("i")),
                    d.group("name"),
                    int(d.group("port")),
                    d.group("link"),
                    bool(d.group("sharp")),
                )
                for d in _IB_DEV.finditer(ib.group("devs"))
            ]
            for d in devs:
                if d not in log.ib_devices:
                    log.ib_devices.append(d)
            log.ib_oob = ib.group("oob")
            _add_evidence(log, line, seen)
        elif _IB_NO_DEVICE.match(msg):
            log.ib_no_device = True
            _add_evidence(log, line, seen)
        elif so := _SOCKET_USING.match(msg):
            for s in _SOCKET_IF.finditer(so.group("ifs")):
                sif = SocketIf(int(s.group("i")), s.group("name"), s.group("addr"))
                if sif not in log.socket_ifs:
                    log.socket_ifs.append(sif)
            _add_evidence(log, line, seen)
        elif g := _GDR.match(msg):
            gs = GdrSupport(
                g.group("net"), int(g.group("i")), g.group("name"), g.group("state") == "Enabled"
            )
            if gs not in log.gdr_support:
                log.gdr_support.append(gs)
            _add_evidence(log, line, seen)
        elif c := _CHANNEL.match(msg):
            rest = c.group("rest")
            ch = NetChannel(
                channel=int(c.group("ch")),
                direction=c.group("dir"),
                src=int(c.group("src")),
                dst=int(c.group("dst")),
                net=c.group("net"),
                dev=int(c.group("dev")),
                proxy=int(c.group("proxy")) if c.group("proxy") else None,
                gdr="/GDRDMA" in rest,
                shared="/Shared" in rest,
            )
            log.channels.append(ch)
            path = f"{ch.direction} NET/{ch.net}/{ch.dev}{'/GDRDMA' if ch.gdr else ''}"
            if path not in paths:
                paths.add(path)
                _add_evidence(log, line, seen)
        elif pf := _PLUGIN_FAILED.match(msg):
            if pf.group(1) not in log.failed_plugins:
                log.failed_plugins.append(pf.group(1))
            _add_evidence(log, line, seen)
        elif _NO_PLUGIN.match(msg):
            log.no_net_plugin = True
            _add_evidence(log, line, seen)
        elif e := _ENV_SET.match(msg):
            log.env[e.group("key")] = e.group("val")
            if e.group("key") in (
                "NCCL_IB_HCA",
                "NCCL_IB_DISABLE",
                "NCCL_SOCKET_IFNAME",
                "NCCL_NET",
                "NCCL_NET_GDR_LEVEL",
                "NCCL_IB_GID_INDEX",
            ):
                _add_evidence(log, line, seen)
    return log


# -- NCCL's interface / HCA list matching (misc/utils.cc parseStringList, matchIfList) ------


@dataclass(frozen=True)
class IfSpec:
    """A parsed ``NCCL_IB_HCA`` / ``NCCL_SOCKET_IFNAME`` value."""

    raw: str
    exclude: bool  # leading "^": every entry is excluded
    exact: bool  # "=" (after any "^"): names must equal an entry, not start with it
    entries: tuple[tuple[str, int], ...]  # (prefix or name, port or -1)

    def matches(self, name: str, port: int = -1) -> bool:
        """Would NCCL select ``name`` (``port``) under this value? An empty list selects everything."""
        if not self.entries:
            return True  # NCCL: "Make an exception for the case where no user list is defined"
        hit = any(
            (name == ref if self.exact else name.startswith(ref))
            and (p == -1 or port == -1 or p == port)
            for ref, p in self.entries
        )
        return hit != self.exclude

    def describe(self) -> str:
        """``any name except those starting with lo, docker0`` for reasons."""
        names = ", ".join(f"{n}:{p}" if p >= 0 else n for n, p in self.entries) or "(none)"
        if self.exclude:
            return (
                f"any name except {names}"
                if self.exact
                else f"any name except those starting with {names}"
            )
        return f"exactly {names}" if self.exact else f"names starting with {names}"


def parse_if_list(value: str) -> IfSpec:
    """Parse a value the way NCCL does: ``^`` then ``=`` prefixes, comma list of ``name[:port]``."""
    s = value.strip()
    exclude = s.startswith("^")
    if exclude:
        s = s[1:]
    exact = s.startswith("=")
    if exact:
        s = s[1:]
    entries: list[tuple[str, int]] = []
    for item in s.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, port = item.partition(":")
        if not name:
            continue
        p = -1
        if port.strip():
            digits = re.match(r"\d+", port.strip())
            p = int(digits.group(0)) if digits else 0  # NCCL uses atoi(): "x" reads as 0
        entries.append((name, p))
    return IfSpec(raw=value, exclude=exclude, exact=exact, entries=tuple(entries))


# -- the NCCL_DEBUG* variables the acceptance ranks run with ------------------------------

_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
REQUIRED_SUBSYS = ("INIT", "NET")  # "Using network", the NET/IB and NET/Socket lines, channels
DEFAULT_SUBSYS = "INIT,NET,ENV"  # ENV: what NCCL read (NCCL_IB_HCA set to ...)


@dataclass(frozen=True)
class CapturePlan:
    """How one rank's NCCL log is captured without changing what its console shows."""

    set_env: dict[str, str]  # variables to set before NCCL initialises
    file_pattern: str  # NCCL_DEBUG_FILE as NCCL will expand it (%h, %p, %%)
    user_file: bool  # the user set NCCL_DEBUG_FILE: theirs is read, nothing is echoed
    echo: str  # what the console keeps seeing: "none" | "version" | "warn" | "all"
    user_level: str | None  # NCCL_DEBUG as it was (None: unset)


def _subsys(user: str | None) -> str:
    if user is None or not user.strip():
        return DEFAULT_SUBSYS
    s = user.strip()
    if s.startswith("^"):  # "everything except": keep INIT and NET out of the exclusion
        kept = [
            x for x in s[1:].split(",") if x.strip() and x.strip().upper() not in REQUIRED_SUBSYS
        ]
        return "^" + ",".join(kept) if kept else "ALL"
    have = [x.strip() for x in s.split(",") if x.strip()]
    if any(x.upper() == "ALL" for x in have):
        return s
    return ",".join(have + [x for x in REQUIRED_SUBSYS if x not in {h.upper() for h in have}])


def escape_path(path: str) -> str:
    """``path`` with ``%`` doubled, so NCCL's ``%h``/``%p`` expansion leaves it as it is."""
    return path.replace("%", "%%")


def expand_pattern(pattern: str, host: str, pid: int) -> str:
    """The file name NCCL makes of an ``NCCL_DEBUG_FILE`` value (misc/debug.cc ncclDebugInit).

    ``%h`` is the host name up to its first dot, ``%p`` the pid, ``%%`` a ``%``; any
    other ``%x`` stays as written.
    """
    out: list[str] = []
    i = 0
    short = host.split(".", 1)[0]
    while i < len(pattern):
        ch = pattern[i]
        if ch != "%" or i + 1 >= len(pattern):
            out.append(ch)
            i += 1
            continue
        nxt = pattern[i + 1]
        out.append({"%": "%", "h": short, "p": str(pid)}.get(nxt, "%" + nxt))
        i += 2
    return "".join(out)


def capture_plan(env: Mapping[str, str], log_dir: str, rank: int, host: str) -> CapturePlan:
    """The NCCL_DEBUG* variables for one rank (pure: ``env`` is only read).

    - ``NCCL_DEBUG_FILE``: the user's value is kept (and read back); otherwise
      ``<log_dir>/rank<R>.<host>.%p.log``, so NCCL's lines leave the console.
    - ``NCCL_DEBUG``: INFO (what the parser needs) unless the user's value already
      includes INFO lines (INFO, ABORT, TRACE), which is kept.
    - ``NCCL_DEBUG_SUBSYS``: INIT,NET,ENV; a user's list keeps its own entries and
      gains INIT and NET (``^`` lists lose them from the exclusion).
    - ``echo``: what the console showed before (the user's NCCL_DEBUG), which the
      capture copies back to stderr: nothing when unset, WARN lines at WARN, every line
      at INFO and above.
    """
    raw_level = env.get("NCCL_DEBUG")
    level = raw_level.strip().upper() if raw_level and raw_level.strip() else None
    set_env: dict[str, str] = {}
    if level not in ("INFO", "ABORT", "TRACE"):
        set_env["NCCL_DEBUG"] = "INFO"
    subsys = _subsys(env.get("NCCL_DEBUG_SUBSYS"))
    if subsys != env.get("NCCL_DEBUG_SUBSYS"):
        set_env["NCCL_DEBUG_SUBSYS"] = subsys
    user_file = env.get("NCCL_DEBUG_FILE", "").strip()
    if user_file:
        return CapturePlan(set_env, user_file, True, "none", raw_level)
    safe_host = re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"
    pattern = f"{escape_path(log_dir.rstrip('/'))}/rank{rank}.{safe_host}.%p.log"
    set_env["NCCL_DEBUG_FILE"] = pattern
    if level is None:
        echo = "none"
    elif level == "VERSION":
        echo = "version"
    elif level == "WARN" or level not in _LEVELS:
        echo = "warn"
    else:
        echo = "all"
    return CapturePlan(set_env, pattern, False, echo, raw_level)


def echo_wanted(line: str, echo: str) -> bool:
    """Whether a captured line would have reached the console under the user's NCCL_DEBUG."""
    if echo == "all":
        return bool(line.strip())
    if echo == "warn":
        return " NCCL WARN " in line
    if echo == "version":
        return " NCCL INFO NCCL version " in line or line.startswith("NCCL version ")
    return False
