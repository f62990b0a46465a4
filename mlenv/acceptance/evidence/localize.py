"""Find the slow node or the slow link between two nodes in a few rounds (pure logic).

The measuring side (``mlenv/acceptance/checks/localize.py``) runs a round: every pair
of the round at once, each pair disjoint from the others, and returns one figure per
pair (GB/s between the two nodes). This module plans the rounds and judges them; it
never touches a network, so the plan for 64 or 512 nodes is computed with a fake
``measure`` by exactly the code that runs on a cluster.

Plan:

- Survey rounds follow a round-robin schedule (:func:`survey_schedule`: every pair once,
  each round disjoint); round 1 pairs every node with its neighbour, ``(0, 1), (2, 3), …``
  (with an odd count the last node waits). Two nodes give one pair and nothing to
  compare it with (*ambiguous*, said so).
- A pair is **slow** when its figure is below ``(1 - slow_frac)`` of the reference: the
  figure of a healthy pair, taken as the upper quartile of the survey rounds' figures
  (every node is in at most one pair of a round, so up to a quarter of them may be slow
  without moving it; targeted rounds pair suspects on purpose and are not used), or the
  ``expected_gbps`` the caller gives.
- A node is **good** once it was in one fast pair (the pair moved data at full speed,
  so neither end nor the link between them is slow). A node with no fast pair is **slow**
  once it was slow with two different good partners; a slow pair of two good nodes is a
  **slow link** (cable, port, switch path between exactly those two).
- Next round, when a node is in doubt (in a slow pair, or not yet measured): a targeted
  round pairs each with a good node it has not been measured with, one good node per
  doubtful node; when good nodes run short, doubtful nodes are paired with each other.
  So one slow node, or one slow link on the survey's first round, is found in two
  rounds for any even N (three for odd N when the waiting node is the slow one), not
  N - 1. When nothing is slow and nobody is in doubt, the survey goes on with pairs not
  measured yet (a link slow only between two nodes shows only when they are paired),
  until the round budget: a healthy run measures ``budget × N/2`` distinct pairs (all of
  them for four nodes) and names nobody. Once something is named and nobody is left in
  doubt, it stops.
- Racks: with a topology (``racks``, a rack per node), the survey is
  :func:`mlenv.acceptance.evidence.topology.topology_rounds` (pairs inside each rack, then
  across racks), run to its end before any targeted round, and every judgement first asks
  :func:`~mlenv.acceptance.evidence.topology.rack_findings` what the racks explain: a slow
  leaf switch or uplink is one finding (``rack_findings``), its pairs neither slow links
  nor evidence against their nodes. A targeted round pairs a doubtful node with a good
  node of its own rack first.
- Noise: one figure per pair cannot tell a healthy pair that read low from a slow one
  that read high when the fabric's figures spread as wide as the gap (at ±20 % a healthy
  pair reads 80-120 % of healthy, a node at 75 % reads 60-90 %). So a pair whose figure
  lands near the bar (within the spread the survey itself shows: the interquartile range
  of its figures over the reference, at most half of it) is measured again in a
  *confirmation* round, up to :data:`READINGS` readings, and judged on their mean (its
  spread falls with the square root of the readings). A quiet fabric shows no spread and
  measures nothing twice. Confirmation rounds sit outside the round budget (each pair is
  re-read at most ``READINGS - 1`` times, so they are bounded by it); the deadline bounds
  them as any round.
- Bounds: ``max_rounds`` (default ``max(4, ceil(log2 N))``) and ``deadline_s``: a round
  starts only when the time left is at least the longest round so far. Whatever is not
  resolved then is reported as suspects (*inconclusive*), never guessed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlenv.acceptance.evidence import topology as topo

Pair = tuple[int, int]
Measure = Callable[[Sequence[Pair]], Mapping[Pair, float]]

# Outcomes of a localization.
NOBODY = "nobody"  # every pair is fast: no node and no link is slow
FOUND = "found"  # one or more slow nodes and/or links named
AMBIGUOUS = "ambiguous"  # two nodes: one pair, nothing to tell node from link (or from normal)
INCONCLUSIVE = "inconclusive"  # suspects left when the rounds or the deadline ran out

DEFAULT_SLOW_FRAC = 0.2
REFERENCE_QUANTILE = 0.75
# The most readings of one pair near the bar (the first and its confirmations).
READINGS = 3
# The widest band around the bar that asks for a confirmation, as a fraction of the bar.
MAX_SPREAD = 0.5


def default_max_rounds(n: int) -> int:
    """The round budget for ``n`` nodes: 1 for two, else ``max(4, ceil(log2 n))`` (four: the
    ring's two rounds and the two at distance 2, so a link off the ring is surveyed too)."""
    if n <= 2:
        return 1
    return max(4, math.ceil(math.log2(n)))


def norm(a: int, b: int) -> Pair:
    """A pair with the lower node first."""
    return (a, b) if a < b else (b, a)


def reference(figures: Sequence[float]) -> float | None:
    """The figure of a healthy pair: the upper quartile of ``figures`` (None below two)."""
    if len(figures) < 2:
        return None
    xs = sorted(figures)
    return xs[int(REFERENCE_QUANTILE * (len(xs) - 1) + 0.5)]


def spread(figures: Sequence[float], ref: float | None, bar: float | None) -> float:
    """How widely healthy figures scatter, as a fraction of ``ref``: the interquartile range
    of the figures at or above ``bar`` over ``ref`` (slow pairs, a slow uplink's many,
    are not noise; 0 below four such figures; at most :data:`MAX_SPREAD`). Figures spread
    uniformly by ±x give about x."""
    if ref is None or ref <= 0 or bar is None:
        return 0.0
    xs = sorted(v for v in figures if v >= bar)
    if len(xs) < 4:
        return 0.0
    lo = xs[int((1.0 - REFERENCE_QUANTILE) * (len(xs) - 1) + 0.5)]
    hi = xs[int(REFERENCE_QUANTILE * (len(xs) - 1) + 0.5)]
    return min(MAX_SPREAD, max(0.0, (hi - lo) / ref))


@dataclass
class Round:
    """One round: what was measured, against what, and who is in doubt afterwards."""

    index: int
    pairs: list[Pair]
    figures: dict[Pair, float]
    reference_gbps: float | None
    slow_pairs: list[Pair]
    good: list[int]
    suspects: list[int]
    duration_s: float
    confirm: bool = False  # pairs read near the bar, measured again

    def to_dict(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """JSON-ready, with node names when given (``results.json`` details)."""

        def nm(i: int) -> str | int:
            return names[i] if names else i

        return {
            "round": self.index,
            **({"confirm": True} if self.confirm else {}),
            "pairs": [
                {
                    "nodes": [nm(a), nm(b)],
                    "gbps": self.figures[(a, b)],
                    "slow": (a, b) in self.slow_pairs,
                }
                for a, b in self.pairs
            ],
            "reference_gbps": self.reference_gbps,
            "good": [nm(i) for i in self.good],
            "suspects": [nm(i) for i in self.suspects],
            "duration_s": round(self.duration_s, 3),
        }


@dataclass
class Localization:
    """What the rounds found, with every round kept for the report."""

    n: int
    outcome: str
    slow_nodes: list[int] = field(default_factory=list)
    slow_links: list[Pair] = field(default_factory=list)
    suspects: list[int] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    reference_gbps: float | None = None
    bar_gbps: float | None = None
    figures: dict[Pair, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    racks: list[str | None] | None = None  # the rack of each node, when a topology was given
    rack_findings: list[topo.RackFinding] = field(default_factory=list)

    def to_dict(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """JSON-ready summary and rounds."""

        def nm(i: int) -> str | int:
            return names[i] if names else i

        return {
            "outcome": self.outcome,
            "nodes": self.n,
            "slow_nodes": [nm(i) for i in self.slow_nodes],
            "slow_links": [[nm(a), nm(b)] for a, b in self.slow_links],
            "suspects": [nm(i) for i in self.suspects],
            "reference_gbps": self.reference_gbps,
            "bar_gbps": self.bar_gbps,
            "rounds": [r.to_dict(names) for r in self.rounds],
            "notes": list(self.notes),
            **(
                {}
                if self.racks is None
                else {
                    "racks": {nm(i): r for i, r in enumerate(self.racks) if r},
                    "rack_findings": [
                        {
                            "kind": f.kind,
                            "racks": list(f.racks),
                            "pairs": [[nm(a), nm(b)] for a, b in f.pairs],
                        }
                        for f in self.rack_findings
                    ],
                }
            ),
        }


@dataclass
class _State:
    n: int
    figures: dict[Pair, float] = field(default_factory=dict)  # the mean of each pair's readings
    readings: dict[Pair, list[float]] = field(default_factory=dict)
    racks: Sequence[str | None] | None = None
    rack_findings: list[topo.RackFinding] = field(default_factory=list)
    band: float = 0.0  # the noise band around the bar (spread()), as a fraction of it

    def read(self, figs: Mapping[Pair, float]) -> None:
        for p, v in figs.items():
            self.readings.setdefault(p, []).append(v)
            self.figures[p] = sum(self.readings[p]) / len(self.readings[p])

    def unsure(self, bar: float | None, band: float) -> list[Pair]:
        """Pairs whose mean is within ``band`` (a fraction of the bar, shrinking with the
        square root of the readings) of the bar and that may be read again."""
        if bar is None or band <= 0:
            return []
        return sorted(
            p
            for p, v in self.figures.items()
            if len(self.readings[p]) < READINGS
            and abs(v - bar) < bar * band / math.sqrt(len(self.readings[p]))
        )

    def judge(
        self, ref: float | None, slow_frac: float
    ) -> tuple[set[Pair], set[int], set[int], set[Pair]]:
        """(slow pairs, good nodes, slow nodes, slow links) from every figure so far.

        With racks, what a rack finding explains first (kept in ``rack_findings``): those
        pairs count neither as slow links nor against their nodes.
        """
        if ref is None:
            return set(), set(), set(), set()
        bar = (1.0 - slow_frac) * ref
        if self.racks is not None:
            self.rack_findings = topo.rack_findings(self.racks, self.figures, bar)
        gone = topo.explained(self.rack_findings)
        figures = {p: v for p, v in self.figures.items() if p not in gone}
        slow = {p for p, v in figures.items() if v < bar}
        good = {x for p in figures if p not in slow for x in p}
        bad: set[int] = set()
        for x in range(self.n):
            if x in good:
                continue
            partners = {a if b == x else b for a, b in slow if x in (a, b)}
            if len(partners & good) >= 2:
                bad.add(x)
        # A link is named on its own figures only, nobody else's: one still within the
        # noise band after its last reading is left unnamed (at ±20 % noise a few healthy
        # pairs of thousands average under the bar).
        links = {
            p
            for p in slow
            if p[0] in good
            and p[1] in good
            and figures[p] < bar * (1.0 - self.band / math.sqrt(len(self.readings.get(p, [0.0]))))
        }
        return slow, good, bad, links


def first_round(n: int) -> list[Pair]:
    """Neighbours: ``(0, 1), (2, 3), …``; an odd last node waits."""
    return [(i, i + 1) for i in range(0, n - 1, 2)]


def survey_schedule(n: int) -> Iterator[list[Pair]]:
    """Every pair of ``n`` nodes once, in rounds of disjoint pairs (lazily: a run needs a few).

    Round 1 pairs neighbours, ``(0, 1), (2, 3), …``; round 2 the other neighbours,
    ``(1, 2), (3, 4), …, (n-1, 0)``: together the ring a ring all_reduce in node order
    uses. Then the pairs at distance 2, 4, 8, … (two rounds each, each disjoint). Then the
    rounds of a round-robin tournament (the circle method: node 0 fixed,
    the others rotating, a bye when ``n`` is odd) without the pairs already planned; a
    pair left out of its round that way is carried into the next round where both its
    nodes are free.
    """
    first = first_round(n)
    yield first
    second = sorted({norm(i, (i + 1) % n) for i in range(1, n, 2)} - set(first)) if n > 2 else []
    if second:
        yield second
    seen = set(first) | set(second)
    # Then the pairs at distance 2, 4, 8, … (recursive doubling and tree algorithms pair
    # nodes that far apart): a link the ring never crosses, say between p and p + 2, is
    # surveyed in the next rounds rather than left to a round robin's chance.
    d = 2
    while 2 * d <= n:
        ring = [norm(i, (i + d) % n) for i in range(n)]
        # the first half of each block of 2d first: those pairs are disjoint, then the rest
        ordered = [p for i, p in enumerate(ring) if (i // d) % 2 == 0] + [
            p for i, p in enumerate(ring) if (i // d) % 2 == 1
        ]
        fresh = list(dict.fromkeys(p for p in ordered if p not in seen))
        seen.update(fresh)
        while fresh:
            now, _, fresh = _pack([], fresh)
            yield now
        d *= 2
    m = n + n % 2
    rest = list(range(1, m))
    carry: list[Pair] = []
    for r in range(m - 1):
        arr = [0, *rest[r:], *rest[:r]]
        fresh = [
            p
            for p in (norm(arr[i], arr[m - 1 - i]) for i in range(m // 2))
            if p[1] < n and p not in seen
        ]
        seen.update(fresh)
        now, used, later = _pack(fresh, carry)
        carry = later
        if now:
            yield now
    while carry:
        now, _, carry = _pack([], carry)
        yield now


def _pack(fresh: list[Pair], carry: list[Pair]) -> tuple[list[Pair], set[int], list[Pair]]:
    """A round of ``fresh`` (disjoint already) plus whatever of ``carry`` fits: (round, nodes used, left over)."""
    used = {x for p in fresh for x in p}
    now = list(fresh)
    later: list[Pair] = []
    for p in carry:
        if p[0] in used or p[1] in used:
            later.append(p)
        else:
            used.update(p)
            now.append(p)
    return sorted(now), used, later


def next_round(
    n: int,
    measured: set[Pair],
    good: set[int],
    doubtful: Sequence[int],
    racks: Sequence[str | None] | None = None,
) -> list[Pair]:
    """Disjoint pairs for the doubtful nodes: a good partner each where one is left, else each other.

    With ``racks``, a good partner of the node's own rack first (no uplink between them).
    Never a pair measured before (its figure is known).
    """
    used: set[int] = set()
    out: list[Pair] = []
    for x in doubtful:
        if x in used:
            continue
        pool = sorted(
            good, key=lambda g: (racks is None or not racks[x] or racks[g] != racks[x], g)
        )
        partner = next((g for g in pool if g not in used and norm(x, g) not in measured), None)
        if partner is None:
            partner = next(
                (y for y in doubtful if y != x and y not in used and norm(x, y) not in measured),
                None,
            )
        if partner is None:
            continue
        used |= {x, partner}
        out.append(norm(x, partner))
    return out


def localize(
    n: int,
    measure: Measure,
    *,
    slow_frac: float = DEFAULT_SLOW_FRAC,
    expected_gbps: float | None = None,
    max_rounds: int | None = None,
    deadline_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    racks: Sequence[str | None] | None = None,
) -> Localization:
    """Run rounds of ``measure`` over ``n`` nodes until the slow nodes/links (and racks) are named.

    ``measure(pairs)`` measures every pair of one round at once and returns GB/s per
    pair (every pair it was given). ``racks``: each node's rack (None: outside the
    topology); the survey then pairs within and across racks first. Raises ValueError
    on ``n < 2``, a bad ``slow_frac``, ``racks`` of another length, or a ``measure``
    that leaves a pair out or returns a negative figure.
    """
    budget, schedule, by_rack = _plan(n, slow_frac, max_rounds, racks)
    st = _State(n, racks=racks)
    loc = Localization(n=n, outcome=NOBODY, racks=None if racks is None else list(racks))
    t0 = clock()
    longest = 0.0
    # The reference comes from survey rounds only (every node in at most one pair each):
    # targeted rounds pair suspects on purpose, and their figures would drag it down.
    survey: list[float] = []
    surveying = True
    confirming = False
    confirms = 0  # confirmation rounds so far (outside the budget)
    pairs = next(schedule)
    while pairs:
        if not confirming and len(loc.rounds) - confirms >= budget:
            if not surveying:  # nodes were still in doubt; a survey that used its rounds is done
                loc.notes.append(
                    f"stopped after {budget} round(s) (the round budget for {n} nodes)"
                )
            break
        if deadline_s is not None and loc.rounds and clock() - t0 + longest > deadline_s:
            loc.notes.append(
                f"stopped after {len(loc.rounds)} round(s): another round would not finish "
                f"within the {deadline_s:g} s deadline"
            )
            break
        ts = clock()
        got = dict(measure(list(pairs)))
        dur = clock() - ts
        longest = max(longest, dur)
        figs: dict[Pair, float] = {}
        for p in pairs:
            v = got.get(p)
            if v is None or not math.isfinite(v) or v < 0:
                raise ValueError(f"measure returned no usable figure for pair {p}: {v!r}")
            figs[p] = float(v)
        st.read(figs)
        if surveying and not confirming:
            survey += figs.values()
        ref = expected_gbps if expected_gbps is not None else reference(survey)
        if ref is not None:
            st.band = spread(survey, ref, (1.0 - slow_frac) * ref)
        slow, good, bad, links = st.judge(ref, slow_frac)
        explained = good | bad
        doubtful = [x for x in range(n) if x not in explained]
        slow |= topo.explained(
            st.rack_findings
        )  # a rack's slow pairs are still slow in the round's line
        loc.rounds.append(
            Round(
                len(loc.rounds) + 1,
                list(pairs),
                figs,
                ref,
                sorted(p for p in pairs if p in slow),
                sorted(good),
                [x for x in doubtful if any(x in p for p in st.figures)],
                dur,
                confirming,
            )
        )
        confirms += confirming
        loc.reference_gbps, loc.slow_nodes, loc.slow_links = ref, sorted(bad), sorted(links)
        loc.bar_gbps = None if ref is None else (1.0 - slow_frac) * ref
        unsure = st.unsure(loc.bar_gbps, st.band)
        if unsure:
            # read them again before the next planned round: what it pairs depends on them
            confirming = True
            pairs, _, _ = _pack([], unsure)
            continue
        confirming = False
        if len(loc.rounds) - confirms < len(
            by_rack
        ):  # the topology survey first, whatever it shows
            pairs = [p for p in next(schedule) if p not in st.figures]
        elif ref is None or not (doubtful or bad or links or st.rack_findings):
            # Nothing to judge yet, or nothing found: survey pairs not measured so far
            # (a slow link between two nodes shows only when they are paired).
            surveying = True
            pairs = []
            for planned in schedule:
                pairs = [p for p in planned if p not in st.figures]
                if pairs:
                    break
        elif doubtful:
            surveying = False
            pairs = next_round(n, set(st.figures), good, doubtful, racks)
        else:  # found, and nobody left in doubt
            pairs = []
    loc.figures = dict(st.figures)
    _conclude(loc, st, slow_frac)
    return loc


def _plan(
    n: int, slow_frac: float, max_rounds: int | None, racks: Sequence[str | None] | None
) -> tuple[int, Iterator[list[Pair]], list[list[Pair]]]:
    """Check the arguments; (round budget, survey schedule, the topology survey's rounds)."""
    if n < 2:
        raise ValueError(f"localization needs at least two nodes, got {n}")
    if not 0.0 < slow_frac < 1.0:
        raise ValueError(f"slow_frac must be between 0 and 1, got {slow_frac}")
    if racks is not None and len(racks) != n:
        raise ValueError(f"racks names {len(racks)} node(s) for {n} nodes")
    budget = max_rounds if max_rounds is not None else default_max_rounds(n)
    if racks is None:
        return budget, survey_schedule(n), []
    # The topology survey runs to its end (a rack is judged on every pair of racks); the
    # budget grows by it so that a targeted round still fits after it.
    by_rack = topo.topology_rounds(racks, max_cross_rounds=default_max_rounds(n))
    return max(budget, len(by_rack) + 1), _then(by_rack, survey_schedule(n)), by_rack


def _then(planned: list[list[Pair]], rest: Iterator[list[Pair]]) -> Iterator[list[Pair]]:
    """The topology survey's rounds, then the plain survey's (its pairs already measured are
    dropped by the caller)."""
    yield from planned
    yield from rest


def _conclude(loc: Localization, st: _State, slow_frac: float) -> None:
    n = loc.n
    ref = loc.reference_gbps
    slow, good, bad, _ = st.judge(ref, slow_frac)
    loc.rack_findings = list(st.rack_findings)
    loc.suspects = [x for x in range(n) if x not in good and x not in bad]
    if n == 2:
        ((p, v),) = st.figures.items()
        if ref is None:
            loc.outcome = AMBIGUOUS
            loc.notes.append(
                f"two nodes give one pair ({v:.4g} GB/s) and nothing to compare it with: "
                "a third node (or an expected figure) is needed to tell a slow node from a slow link"
            )
            loc.suspects = [0, 1]
            return
        if p in slow:
            loc.outcome = AMBIGUOUS
            loc.notes.append(
                f"the only pair is slow ({v:.4g} GB/s, bar {loc.bar_gbps:.4g}): node 0, node 1 or the "
                "link between them; a third node is needed to tell which"
            )
            loc.suspects = [0, 1]
            return
    if loc.slow_nodes or loc.slow_links or loc.rack_findings:
        loc.outcome = FOUND
        if loc.suspects:
            loc.notes.append(f"also unresolved: {len(loc.suspects)} node(s) still in doubt")
        return
    if loc.suspects:
        loc.outcome = INCONCLUSIVE
        if not good and st.figures and all(p in slow for p in st.figures):
            loc.notes.append(
                "every pair measured is below the bar: the fabric as a whole (or the bar), "
                "not one node or link"
            )
        return
    loc.outcome = NOBODY
    loc.notes.append(f"{len(st.figures)} of {n * (n - 1) // 2} node pairs measured, none slow")


@dataclass
class SimulatedFabric:
    """A fake fabric for planning (benchmarks, unit tests), not a measurement.

    Every pair moves ``healthy_gbps``; a slow node caps every pair it is in at its
    factor, a slow link only its own pair, a slow uplink every pair leaving its rack; ``noise`` (a fraction) varies each figure
    deterministically by pair and round. ``calls`` counts rounds measured.
    """

    healthy_gbps: float = 10.0
    slow_nodes: Mapping[int, float] = field(
        default_factory=dict
    )  # node -> factor (0.05 = 5 % of healthy)
    slow_links: Mapping[Pair, float] = field(default_factory=dict)  # normalised pair -> factor
    noise: float = 0.0
    calls: int = 0
    racks: Sequence[str | None] = ()  # node -> rack, for the two below
    slow_uplinks: Mapping[str, float] = field(
        default_factory=dict
    )  # rack -> factor of every pair leaving it
    slow_between: Mapping[tuple[str, str], float] = field(
        default_factory=dict
    )  # (rack, rack) sorted -> factor
    seed: int = 0  # another seed, another draw of the noise (repeated trials)

    def figure(self, p: Pair, salt: int = 0) -> float:
        """The figure pair ``p`` would measure (in round ``salt``)."""
        a, b = p
        f = min(self.slow_nodes.get(a, 1.0), self.slow_nodes.get(b, 1.0)) * self.slow_links.get(
            norm(a, b), 1.0
        )
        ra, rb = (self.racks[a], self.racks[b]) if self.racks else (None, None)
        if ra != rb:
            f *= min(self.slow_uplinks.get(ra or "", 1.0), self.slow_uplinks.get(rb or "", 1.0))
            f *= self.slow_between.get((min(ra or "", rb or ""), max(ra or "", rb or "")), 1.0)
        # A fixed pseudo-random wobble in [-noise, +noise]: reproducible without a RNG seed.
        wobble = ((a * 7919 + b * 104729 + (salt + 7 * self.seed) * 1299709) % 2001) / 1000.0 - 1.0
        return self.healthy_gbps * f * (1.0 + self.noise * wobble)

    def __call__(self, pairs: Sequence[Pair]) -> dict[Pair, float]:
        self.calls += 1
        return {p: self.figure(p, self.calls) for p in pairs}
