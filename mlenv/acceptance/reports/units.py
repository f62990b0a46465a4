"""Small formatting helpers the reports share: byte sizes as people read them, host lists."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: float) -> str:
    """``1 KiB``, ``256 MiB``, ``1.5 GiB``, ``8 B``: powers of 1024, at most three significant digits."""
    x = float(n)
    unit = _UNITS[0]
    for u in _UNITS[1:]:
        if abs(x) < 1024:
            break
        x /= 1024
        unit = u
    text = f"{x:.0f}" if x == int(x) else f"{x:.3g}"
    return f"{text} {unit}"


def hosts_text(hosts: Iterable[str], limit: int = 8) -> str:
    """``vm ×2`` for one host with two ranks; ``a ×8, b ×8, … (+62 more hosts)`` at scale.

    Hosts keep their first-seen order (rank order); a host with one rank has no count.
    """
    counts = Counter(str(h) for h in hosts)
    if not counts:
        return "none"
    shown = [f"{h} ×{c}" if c > 1 else h for h, c in list(counts.items())[:limit]]
    more = len(counts) - limit
    return ", ".join(shown) + (f", … (+{more} more hosts)" if more > 0 else "")
