"""Racks from Slurm's ``topology/tree`` plugin: ``scontrol show topology``'s
leaf switches as the rack → nodes map ``MLENV_TOPOLOGY`` carries (pure logic).

``scontrol show topology`` prints one line per switch (Slurm 22.05, captured on the
harness; later releases add fields, which are ignored)::

    SwitchName=leaf01 Level=0 LinkSpeed=1 Nodes=hgx[01-02]
    SwitchName=spine Level=1 LinkSpeed=1 Nodes=hgx[01-04] Switches=leaf[01-02]

A level-0 switch is a leaf: the nodes it lists are one rack. Without the plugin it prints
nothing on stdout and ``scontrol: error: No topology information available`` on stderr,
still exiting 0; both read as "no racks". Only the job's nodes are kept, so a report
names the racks the run used, not the cluster's hundreds.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from mlenv.config import hostlist
from mlenv.contract import rack_name


@dataclass(frozen=True)
class Switch:
    """One line of ``scontrol show topology``."""

    name: str
    level: int
    nodes: tuple[str, ...]


def split_hostlist(text: str) -> list[str]:
    """``a[1-2],b,c[3,5]`` → ``["a[1-2]", "b", "c[3,5]"]``: commas outside brackets separate."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [x.strip() for x in out if x.strip() and x.strip() != "(null)"]


def parse(text: str) -> tuple[list[Switch], list[str]]:
    """(the switches, a note per line that could not be read). Lines without ``SwitchName=``
    (scontrol's own error lines, blanks) are skipped silently."""
    switches: list[Switch] = []
    notes: list[str] = []
    for line in text.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        name = fields.get("SwitchName", "")
        if not name:
            continue
        try:
            level = int(fields.get("Level", "0"))
            nodes = tuple(hostlist.expand_all(split_hostlist(fields.get("Nodes", ""))))
        except (ValueError, hostlist.HostlistError) as e:
            notes.append(f"switch {name}: {e}")
            continue
        switches.append(Switch(name, level, nodes))
    return switches, notes


def leaf_racks(
    text: str, job_nodes: Collection[str] | None = None
) -> tuple[dict[str, list[str]], list[str]]:
    """(rack → nodes, notes) from ``scontrol show topology``'s output: one rack per level-0
    switch, named after it as a DNS label (``IB_Leaf.1`` → ``ib-leaf-1``), with only the
    ``job_nodes`` it lists (all with None); a rack none of them is in is left out. A
    node under two leaves stays in the first; a switch name that is no rack name is
    left out; each said in a note."""
    switches, notes = parse(text)
    racks: dict[str, list[str]] = {}
    where: dict[str, str] = {}  # node → its leaf switch
    owner: dict[str, str] = {}  # rack name → the switch it came from
    for sw in (s for s in switches if s.level == 0):
        rack = rack_name(sw.name)
        mine = [n for n in sw.nodes if job_nodes is None or n in job_nodes]
        if not mine:
            continue
        if rack is None or owner.setdefault(rack, sw.name) != sw.name:
            notes.append(
                f"leaf switch {sw.name!r}: not usable as a rack name"
                + (f" (reads as {owner[rack]!r}'s)" if rack else "")
                + "; its nodes are in no rack"
            )
            continue
        for n in mine:
            if n in where:
                notes.append(
                    f"node {n} is under leaf switches {where[n]} and {sw.name}: kept in {where[n]}"
                )
                continue
            where[n] = sw.name
            racks.setdefault(rack, []).append(n)
    return racks, notes
