"""InfiniBand/RoCE ports from ``/sys/class/infiniband``: state, rate and error counters.

Read without privilege, the way node health checks and node_exporter's infiniband
collector do: ``<hca>/ports/<n>/{state,phys_state,rate,link_layer}`` and
``<hca>/ports/<n>/counters/*``. ``rate`` reads ``400 Gb/sec (4X NDR)``; ``state``
``4: ACTIVE``; ``phys_state`` ``5: LinkUp``. The error counters of the IB spec's
PortCounters that say a link is bad (symbol errors, link downed, receive errors, …) are
compared before and after load, so a link that flaps or errors under traffic is named.
Tested on the sysfs tree of prometheus/procfs's fixtures (tests/data/infiniband/README.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SYSFS = Path("/sys/class/infiniband")
# A link that went down, or retrained, during the run: the link flapped.
FLAP_COUNTERS = ("link_downed", "link_error_recovery")
# Errors on the wire or at the receiver: a dirty cable or connector, a bad transceiver.
ERROR_COUNTERS = (
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_discards",
)


@dataclass(frozen=True)
class Port:
    """One port of one HCA."""

    hca: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED (the word after "N: ")
    phys_state: str  # LinkUp, Polling, Disabled, …
    rate_gbps: float | None  # None: unreadable
    rate_text: str
    link_layer: str  # InfiniBand | Ethernet (RoCE)
    counters: Mapping[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``mlx5_0:1``, as ``ibstat`` and Azure's ``check_hw_ib`` name a port."""
        return f"{self.hca}:{self.port}"


def _read(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _word(s: str) -> str:
    """``4: ACTIVE`` → ``ACTIVE``."""
    return s.split(":", 1)[1].strip() if ":" in s else s.strip()


def parse_rate(text: str) -> float | None:
    """``400 Gb/sec (4X NDR)`` → 400.0; ``2.5 Gb/sec (1X SDR)`` → 2.5; else None."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec", text)
    return float(m.group(1)) if m else None


def read_ports(root: Path = SYSFS) -> list[Port]:
    """Every port under ``root`` (``/sys/class/infiniband``), sorted by HCA and port;
    empty when the directory is absent (no RDMA device on this node)."""
    out: list[Port] = []
    if not root.is_dir():
        return out
    for hca in sorted(p for p in root.iterdir() if p.is_dir()):
        ports = hca / "ports"
        if not ports.is_dir():
            continue
        for pd in sorted(
            (p for p in ports.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
        ):
            counters: dict[str, int] = {}
            cdir = pd / "counters"
            if cdir.is_dir():
                for c in sorted(cdir.iterdir()):
                    v = _read(c)
                    if v.isdigit():
                        counters[c.name] = int(v)
            rate = _read(pd / "rate")
            out.append(
                Port(
                    hca=hca.name,
                    port=int(pd.name),
                    state=_word(_read(pd / "state")),
                    phys_state=_word(_read(pd / "phys_state")),
                    rate_gbps=parse_rate(rate),
                    rate_text=rate,
                    link_layer=_read(pd / "link_layer") or "InfiniBand",
                    counters=counters,
                )
            )
    return out


def deltas(before: Port, after: Port) -> dict[str, int]:
    """How much each flap and error counter grew from ``before`` to ``after`` (counters
    missing on either side are left out; a counter that went down, reset by someone,
    counts from zero)."""
    out: dict[str, int] = {}
    for c in (*FLAP_COUNTERS, *ERROR_COUNTERS):
        if c in before.counters and c in after.counters:
            a, b = before.counters[c], after.counters[c]
            out[c] = b - a if b >= a else b
    return out
