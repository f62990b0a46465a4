"""fabric.localize with racks, against a simulated fabric (SimulatedFabric is a
fake; the real links are tests/integration/test_localize.py's). A slow leaf switch or uplink
must come out as one rack finding, not as N slow links or as slow nodes."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from mlenv.acceptance.evidence import localize as L
from mlenv.acceptance.evidence import topology as T
from mlenv.acceptance.evidence.localize import SimulatedFabric, localize

R6 = ["a", "a", "b", "b", "c", "c"]
R8 = ["a", "a", "b", "b", "c", "c", "d", "d"]


def _run(racks: Sequence[str | None], **fault: object) -> L.Localization:
    fab = SimulatedFabric(racks=racks, noise=0.05, **fault)  # type: ignore[arg-type]
    loc = localize(len(racks), fab, racks=racks)
    for r in loc.rounds:
        nodes = [x for p in r.pairs for x in p]
        assert len(nodes) == len(set(nodes)), r.pairs
    return loc


def _kinds(loc: L.Localization) -> list[tuple[str, tuple[str, ...]]]:
    return [(f.kind, f.racks) for f in loc.rack_findings]


def test_topology_rounds_pair_inside_racks_first_then_every_pair_of_racks() -> None:
    rounds = T.topology_rounds(R6, max_cross_rounds=4)
    assert rounds[0] == [(0, 1), (2, 3), (4, 5)]  # inside each rack
    groups = T.groups_of(R6)
    cross = [p for r in rounds[1:] for p in r]
    assert all(groups[a] != groups[b] for a, b in cross)
    met = {tuple(sorted((groups[a], groups[b]))) for a, b in cross}
    assert met == {("a", "b"), ("a", "c"), ("b", "c")}
    # twice per pair of racks, through different nodes: a rack is judged through two of its nodes
    for r in "abc":
        assert len({x for p in cross for x in p if groups[x] == r}) == 2
    assert len(set(cross)) == len(cross)


def test_slow_uplink_is_one_rack_finding_not_n_links() -> None:
    loc = _run(R6, slow_uplinks={"a": 0.05})
    assert loc.outcome == L.FOUND and _kinds(loc) == [(T.UPLINK, ("a",))]
    assert loc.slow_links == [] and loc.slow_nodes == [] and loc.suspects == []
    groups = T.groups_of(R6)
    (f,) = loc.rack_findings
    assert f.pairs and all((groups[a] == "a") != (groups[b] == "a") for a, b in f.pairs)
    # the same fabric without the topology: slow links (what §5 replaces)
    plain = localize(6, SimulatedFabric(racks=R6, noise=0.05, slow_uplinks={"a": 0.05}))
    assert plain.slow_links and not plain.rack_findings


def test_uplink_of_a_bigger_rack_among_four() -> None:
    racks = ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d"] * 4
    loc = _run(racks, slow_uplinks={"b": 0.05})
    assert _kinds(loc) == [(T.UPLINK, ("b",))] and loc.slow_links == [] and loc.slow_nodes == []
    assert len(loc.rounds) <= 1 + L.default_max_rounds(16)


def test_racks_of_one_node_beside_the_bad_rack_are_not_named_slow() -> None:
    # Without pairing b with c (both alone in their rack), b and c would read as two slow nodes.
    loc = _run(["a", "a", "b", "c"], slow_uplinks={"a": 0.05})
    assert _kinds(loc) == [(T.UPLINK, ("a",))] and loc.slow_nodes == [] and loc.slow_links == []


def test_two_racks_cannot_tell_which_uplink_and_say_so() -> None:
    loc = _run(["a", "a", "b", "b"], slow_uplinks={"a": 0.05})
    assert _kinds(loc) == [(T.SPINE, ("a", "b"))] and loc.slow_links == [] and loc.slow_nodes == []


def test_path_between_two_racks_only() -> None:
    loc = _run(R8, slow_between={("a", "b"): 0.05})
    assert _kinds(loc) == [(T.BETWEEN, ("a", "b"))] and loc.slow_links == []


def test_two_bad_uplinks_are_two_findings() -> None:
    loc = _run(R8, slow_uplinks={"a": 0.05, "b": 0.05})
    assert _kinds(loc) == [(T.UPLINK, ("a",)), (T.UPLINK, ("b",))] and loc.slow_nodes == []


@pytest.mark.parametrize(
    "fault,nodes,links",
    [
        ({"slow_nodes": {3: 0.05}}, [3], []),
        ({"slow_links": {(0, 1): 0.05}}, [], [(0, 1)]),  # inside rack a
        ({"slow_links": {(0, 2): 0.05}}, [], [(0, 2)]),  # across racks, one cable
    ],
)
def test_a_node_or_a_link_stays_a_node_or_a_link(
    fault: dict[str, object], nodes: list[int], links: list[tuple[int, int]]
) -> None:
    loc = _run(R6, **fault)
    assert loc.rack_findings == [] and loc.slow_nodes == nodes and loc.slow_links == links


def test_a_slow_node_beside_a_bad_uplink_elsewhere_is_both() -> None:
    loc = _run(R8, slow_nodes={0: 0.05}, slow_uplinks={"c": 0.05})
    assert _kinds(loc) == [(T.UPLINK, ("c",))] and loc.slow_nodes == [0]


def test_nodes_outside_the_topology_are_never_named_as_racks() -> None:
    loc = _run(["a", "a", None, None, "b", "b"], slow_uplinks={"a": 0.05})
    assert _kinds(loc) == [(T.UPLINK, ("a",))] and loc.slow_nodes == []


def test_healthy_fabric_with_racks_names_nobody() -> None:
    loc = _run(R6)
    assert loc.outcome == L.NOBODY and loc.rack_findings == []
    d = loc.to_dict([f"n{i}" for i in range(6)])
    assert d["racks"] == {f"n{i}": r for i, r in enumerate(R6)} and d["rack_findings"] == []


def test_rack_findings_need_a_fast_pair_inside_the_rack() -> None:
    # Every pair slow (the bar itself, or the whole fabric): nothing to blame a rack for.
    figs = {(0, 1): 1.0, (2, 3): 1.0, (0, 2): 1.0, (1, 3): 1.0}
    assert T.rack_findings(["a", "a", "b", "b"], figs, bar=5.0) == []
    assert T.rack_findings(["a", "a", "b", "b"], figs, bar=None) == []


def test_racks_of_another_length_are_refused() -> None:
    with pytest.raises(ValueError, match="racks names 3 node"):
        localize(4, SimulatedFabric(), racks=["a", "a", "b"])


@pytest.mark.parametrize(
    "text,needle",
    [
        ("{", "not JSON"),
        ("[]", "JSON object"),
        ('{"Rack_A": ["n1"]}', "not a DNS label"),
        ('{"a": "n1"}', "must list node names"),
        ('{"a": ["n1"], "b": ["n1"]}', "in two racks"),
    ],
)
def test_parse_refuses_bad_topology_in_one_line(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle) as e:
        T.parse(text)
    assert "\n" not in str(e.value)


def test_rack_of_nodes_matches_any_name_a_node_goes_by() -> None:
    topo = T.parse('{"rack-a": ["worker-1", "gpu02"], "rack-b": ["worker-2"]}')
    got = T.rack_of_nodes(
        topo, [["worker-1", "pod-0"], ["pod-1", "gpu02.example.com", "gpu02"], ["pod-9"]]
    )
    assert got == ["rack-a", "rack-a", None]


# -- the check's side: MLENV_TOPOLOGY to racks, rack findings to results and node verdicts --

LAYOUT = [
    (0, 0, "pod-0", "worker-a1"),
    (0, 1, "pod-0", "worker-a1"),
    (1, 0, "pod-1", "worker-a2"),
    (2, 0, "gpu03.example.com", ""),
    (3, 0, "pod-3", "worker-x"),
]


def test_racks_of_reads_the_topology_by_node_host_or_short_host() -> None:
    from mlenv.acceptance.checks import localize as LC

    env = {T.ENV: '{"rack-a": ["worker-a1", "worker-a2"], "rack-b": ["gpu03"]}'}
    racks, note = LC.racks_of(LAYOUT, env)
    assert racks == ["rack-a", "rack-a", "rack-b", None]
    assert note == f"not in {T.ENV}: worker-x"
    assert LC.racks_of(LAYOUT, {}) == (None, "")
    bad, why = LC.racks_of(LAYOUT, {T.ENV: '{"Rack A": ["x"]}'})
    assert bad is None and why.startswith("topology not used:") and "not a DNS label" in why


def test_a_rack_finding_is_one_fail_of_scope_rack_and_a_rack_verdict() -> None:
    from mlenv.acceptance.checks import localize as LC
    from mlenv.acceptance.judging import nodeverdicts
    from mlenv.acceptance.judging.verdict import judge
    from mlenv.acceptance.reports.markdown import nodes_section

    names = [f"h{i}" for i in range(6)]
    loc = _run(R6, slow_uplinks={"a": 0.05})
    rs = LC.results_of(loc, names, ["requested (--localize)"], {"bytes": 1}, 1.0)
    assert [(r.status.value, r.scope, r.group) for r in rs] == [("FAIL", "rack", "a")]
    (r,) = rs
    assert r.reasons[0].startswith("every pair crossing rack a is slow (4 pair(s) with b, c")
    assert "check rack a's leaf switch and its uplinks" in r.reasons[0]
    assert r.details["rack_nodes"] == {"a": ["h0", "h1"]} and r.details["rack_kind"] == T.UPLINK
    j = judge(rs)
    sec = nodeverdicts.build(j.results, j.findings, {"device": "cpu", "hosts": names})
    (rack,) = sec["racks"]
    assert rack["rack"] == "a" and rack["nodes"] == ["h0", "h1"] and rack["status"] == "FAIL"
    assert rack["action"]["id"] == "check-rack-uplink" and "rack a" in rack["action"]["text"]
    assert sec["links"] == [] and all(
        n["status"] != "FAIL" for n in sec["nodes"]
    )  # no node quarantined for it
    assert any(line.startswith("| a | FAIL | `check-rack-uplink`") for line in nodes_section(sec))


def test_two_racks_give_one_spine_verdict_naming_both() -> None:
    from mlenv.acceptance.checks import localize as LC
    from mlenv.acceptance.judging import nodeverdicts
    from mlenv.acceptance.judging.verdict import judge

    names = ["h0", "h1", "h2", "h3"]
    rs = LC.results_of(_run(["a", "a", "b", "b"], slow_uplinks={"b": 0.05}), names, [], {}, 1.0)
    assert [(r.scope, r.group) for r in rs] == [("rack", "a <-> b")]
    assert "every pair across racks is slow (2 pair(s) between a, b" in rs[0].reasons[0]
    j = judge(rs)
    (rack,) = nodeverdicts.build(j.results, j.findings, {"device": "cpu", "hosts": names})["racks"]
    assert rack["action"]["id"] == "check-spine" and "racks a and b" in rack["action"]["text"]
