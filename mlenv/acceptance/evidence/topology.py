"""Racks for fabric.localize: pair within and across racks first, and name a
rack's leaf switch or uplinks as one finding instead of N slow links (pure logic).

A topology maps each node to its rack (``nodes.topology`` in the config, handed to the
ranks as ``MLENV_TOPOLOGY``; docs/acceptance.md "Topology"). :mod:`.localize` plans its
survey with :func:`topology_rounds` when it has one and judges with :func:`rack_findings`
after every round: pairs a rack finding explains no longer make their nodes suspects.

Rounds (:func:`topology_rounds`): first the pairs inside each rack (neighbours, as the
plain survey does), so every node is compared with nodes behind the same leaf switch;
then pairs across racks: every pair of racks at least once, twice with other nodes when
both racks have two (one slow pair between two racks is a link; two, through different
nodes, are the path between the racks), each node used as rarely as possible.

Conclusions (:func:`rack_findings`), from the figures and the bar ("slow" = below it):

- ``spine``: every cross-rack pair measured (two or more) is slow while some pair inside
  a rack is fast: the racks cannot reach each other at speed (with two racks: the path
  between them; either leaf's uplinks or the spine; the figures cannot tell which).
- ``uplink``: rack R (two nodes or more) is slow with every other rack, through two or
  more of its nodes, while a pair inside R is fast and some pair between two other racks
  is fast: R's leaf switch or its uplinks.
- ``between``: every pair measured between racks R and S (two or more, through two
  nodes on each side) is slow while each of R and S is fast with some other rack: the
  path between those two leaves.

Anything else stays with the node and link judgement of :mod:`.localize`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mlenv import contract

Pair = tuple[int, int]

UPLINK, BETWEEN, SPINE = "uplink", "between", "spine"
# A rack name: a DNS-1123 label, as the Kubernetes label values and Slurm switch names
# people use for racks mostly are (rack-a, r12, leaf03).
RACK_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
ENV = contract.TOPOLOGY_ENV


@dataclass(frozen=True)
class RackFinding:
    """One conclusion about racks: which ``kind``, the racks it names, the slow pairs it explains."""

    kind: str  # UPLINK | BETWEEN | SPINE
    racks: tuple[str, ...]
    pairs: tuple[Pair, ...]


def _norm(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


def groups_of(racks: Sequence[str | None]) -> list[str]:
    """A group key per node: its rack, or a key of its own for a node outside the topology
    (``"\\0<index>"``: never a rack name, so it is never named in a finding)."""
    return [r if r else f"\0{i}" for i, r in enumerate(racks)]


def named(group: str) -> bool:
    """Whether a group key is a rack of the topology (not a node outside it)."""
    return not group.startswith("\0")


def _members(groups: Sequence[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        out.setdefault(g, []).append(i)
    return out


def topology_rounds(racks: Sequence[str | None], max_cross_rounds: int) -> list[list[Pair]]:
    """The topology survey: one round of pairs inside racks, then up to ``max_cross_rounds``
    rounds across racks (each round disjoint; no pair twice)."""
    groups = groups_of(racks)
    members = _members(groups)
    inside = sorted(
        _norm(m[i], m[i + 1]) for m in members.values() for i in range(0, len(m) - 1, 2)
    )
    rounds = [inside] if inside else []
    keys = list(members)
    demands: list[tuple[str, str]] = []
    for rep in range(2):
        for i, r in enumerate(keys):
            for s in keys[i + 1 :]:
                if rep == 0 or (len(members[r]) >= 2 and len(members[s]) >= 2):
                    demands.append((r, s))
    planned = set(inside)
    used_across: dict[int, int] = {}
    first = len(rounds)
    while demands and len(rounds) < first + max_cross_rounds:
        busy: set[int] = set()
        now: list[Pair] = []
        later: list[tuple[str, str]] = []
        for r, s in demands:
            pair = _pick(members[r], members[s], busy, planned, used_across)
            if pair is None:
                later.append((r, s))
                continue
            now.append(pair)
            planned.add(pair)
            busy.update(pair)
            for x in pair:
                used_across[x] = used_across.get(x, 0) + 1
        if not now:  # nothing left that can be placed (every such pair measured already)
            break
        rounds.append(sorted(now))
        demands = later
    return rounds


def _pick(
    rs: list[int], ss: list[int], busy: set[int], planned: set[Pair], used: dict[int, int]
) -> Pair | None:
    """A pair between two racks, free this round and not planned yet, through the nodes used least."""
    best: tuple[tuple[int, int, int], Pair] | None = None
    for a in rs:
        for b in ss:
            p = _norm(a, b)
            if a in busy or b in busy or p in planned:
                continue
            key = (used.get(a, 0) + used.get(b, 0), max(used.get(a, 0), used.get(b, 0)), a + b)
            if best is None or key < best[0]:
                best = (key, p)
    return None if best is None else best[1]


def rack_findings(
    racks: Sequence[str | None], figures: Mapping[Pair, float], bar: float | None
) -> list[RackFinding]:
    """What the racks explain, from every figure so far and the slow bar (None: nothing yet)."""
    if bar is None:
        return []
    groups = groups_of(racks)
    slow = {p for p, v in figures.items() if v < bar}
    cross = [p for p in figures if groups[p[0]] != groups[p[1]]]
    fast_inside = any(p not in slow for p in figures if groups[p[0]] == groups[p[1]])
    if not cross or not fast_inside:
        return []
    if len(cross) >= 2 and all(p in slow for p in cross):
        names = tuple(sorted({groups[x] for p in cross for x in p if named(groups[x])}))
        return [RackFinding(SPINE, names, tuple(sorted(cross)))] if len(names) >= 2 else []
    out: list[RackFinding] = []
    cut: set[str] = set()
    for r, nodes in _members(groups).items():
        mine = [p for p in cross if groups[p[0]] == r or groups[p[1]] == r]
        through = {x for p in mine for x in p if groups[x] == r}
        inside_fast = any(p not in slow for p in figures if groups[p[0]] == groups[p[1]] == r)
        others_fast = any(p not in slow for p in cross if r not in (groups[p[0]], groups[p[1]]))
        if (
            named(r)
            and len(nodes) >= 2
            and len(mine) >= 2
            and len(through) >= 2
            and inside_fast
            and others_fast
            and all(p in slow for p in mine)
        ):
            cut.add(r)
            out.append(RackFinding(UPLINK, (r,), tuple(sorted(mine))))
    out += _between(groups, cross, slow, cut)
    return out


def _between(
    groups: Sequence[str], cross: list[Pair], slow: set[Pair], cut: set[str]
) -> list[RackFinding]:
    """Pairs of racks (neither cut off) whose every pair, through two nodes a side, is slow."""
    by: dict[tuple[str, str], list[Pair]] = {}
    for p in cross:
        ga, gb = groups[p[0]], groups[p[1]]
        by.setdefault((min(ga, gb), max(ga, gb)), []).append(p)
    out: list[RackFinding] = []
    for (r, s), ps in sorted(by.items()):
        if r in cut or s in cut or not (named(r) and named(s)) or not all(p in slow for p in ps):
            continue
        sides = [{x for p in ps for x in p if groups[x] == g} for g in (r, s)]
        if len(ps) < 2 or min(len(x) for x in sides) < 2:
            continue
        elsewhere = [
            any(q not in slow for q in cross if g in (groups[q[0]], groups[q[1]]) and q not in ps)
            for g in (r, s)
        ]
        if all(elsewhere):
            out.append(RackFinding(BETWEEN, (r, s), tuple(sorted(ps))))
    return out


def explained(findings: Sequence[RackFinding]) -> set[Pair]:
    """Every slow pair a rack finding accounts for."""
    return {p for f in findings for p in f.pairs}


def parse(text: str) -> dict[str, list[str]]:
    """``MLENV_TOPOLOGY`` (JSON ``{"rack": ["node", ...]}``, or ``rack=node,node;…`` as
    ``.deepspeed_env`` carries it: :func:`mlenv.contract.topology_decode`) → rack → nodes.

    Raises ValueError with one line on anything else: not JSON, a rack name that is not a
    DNS label, a node that is not a non-empty string, a node in two racks.
    """
    doc = contract.topology_decode(text)
    if not isinstance(doc, dict):
        raise ValueError(
            f"{ENV} must be a JSON object of rack → list of nodes, got {type(doc).__name__}"
        )
    seen: dict[str, str] = {}
    out: dict[str, list[str]] = {}
    for rack, nodes in doc.items():
        if not RACK_NAME.match(rack):
            raise ValueError(
                f"{ENV}: rack {rack!r} is not a DNS label (lowercase letters, digits, '-')"
            )
        if not isinstance(nodes, list) or not all(isinstance(n, str) and n.strip() for n in nodes):
            raise ValueError(f"{ENV}: rack {rack!r} must list node names (non-empty strings)")
        for n in nodes:
            if n in seen and seen[n] != rack:
                raise ValueError(f"{ENV}: node {n!r} is in two racks ({seen[n]} and {rack})")
            seen[n] = rack
        out[rack] = list(nodes)
    return out


def rack_of_nodes(
    topology: Mapping[str, Sequence[str]], names: Sequence[Sequence[str]]
) -> list[str | None]:
    """Each node's rack: ``names[i]`` are the names node ``i`` may be listed under (the
    Kubernetes Node, the host, its short form), the first one listed wins; None when none is."""
    where = {n: rack for rack, nodes in topology.items() for n in nodes}
    return [next((where[x] for x in cands if x in where), None) for cands in names]
