"""Outliers relative to peers: direction-aware, per rank and per node, with thresholds."""

from __future__ import annotations

from mlenv.acceptance.core import metrics
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import outliers


def _r(rank: int, node: str, **m: float) -> CheckResult:
    return CheckResult(
        name="training.step_time", status=Status.PASS, scope="rank", node=node, rank=rank, metrics=m
    )


def test_two_ranks_slow_one_named_lower_is_better() -> None:
    f = outliers.find([_r(0, "a", p50_ms=100.0), _r(1, "a", p50_ms=400.0)])
    assert len(f) == 1 and f[0].rank == 1 and f[0].severity == Status.FAIL
    assert f[0].frac == 3.0 and "300% above" in f[0].reason()


def test_only_the_worse_side_is_flagged() -> None:
    f = outliers.find([_r(0, "a", p50_ms=100.0), _r(1, "a", p50_ms=25.0)])
    assert [x.rank for x in f] == [0]  # rank 1 is faster: never an outlier


def test_warn_between_thresholds_and_config() -> None:
    rs = [_r(i, "a", p50_ms=100.0) for i in range(4)] + [_r(4, "a", p50_ms=130.0)]
    f = outliers.find(rs, {"warn_frac": 0.2, "fail_frac": 0.5, "min_z": 0.0})
    assert [(x.rank, x.severity) for x in f] == [(4, Status.WARN)]
    assert outliers.find(rs, {"warn_frac": 0.4}) == []


def test_noise_within_spread_not_flagged() -> None:
    rs = [_r(i, "a", p50_ms=v) for i, v in enumerate((100.0, 60.0, 140.0, 90.0, 130.0))]
    assert outliers.find(rs) == []


def test_bad_node_named_from_node_medians() -> None:
    rs = [_r(i, f"n{i // 2}", p50_ms=100.0) for i in range(6)]
    rs[4].metrics["p50_ms"] = rs[5].metrics["p50_ms"] = 300.0
    f = [x for x in outliers.find(rs) if x.level == "node"]
    assert [(x.node, x.severity) for x in f] == [("n2", Status.FAIL)]
    assert f[0].reason().startswith("training.step_time: node n2 is an outlier")


def test_only_metrics_declared_for_peers_are_compared() -> None:
    table = {"training.step_time": {"p50_ms": metrics.info("ms")}}
    rs = [_r(0, "a", p50_ms=100.0), _r(1, "a", p50_ms=400.0)]
    assert outliers.find(rs, table=table) == []
    table = {"training.step_time": {"p50_ms": metrics.higher("ms")}}  # declared the other way
    assert [x.rank for x in outliers.find(rs, table=table)] == [0]


def _link(scope: str, group: str, bw: float, name: str = "collectives.all_reduce") -> CheckResult:
    return CheckResult(
        name=name,
        status=Status.PASS,
        scope=scope,
        node=None,
        rank=None,
        metrics={"busbw_gbps_large": bw, "busbw_gbps_max": bw, "wrong_elements": 0.0},
        details={"group": group},
    )


def test_slow_intra_node_fabric_named_by_its_node_and_judged() -> None:
    from mlenv.acceptance.judging.verdict import judge

    rs = [
        _link("world", "world", 40.0),
        *[_link("intra", f"node {i} (h{i})", 400.0 + i) for i in range(3)],
        _link("intra", "node 3 (h3)", 150.0),
        _link("inter", "local rank 0 across nodes", 45.0),
        _link("inter", "local rank 1 across nodes", 44.0),
    ]
    f = outliers.find(rs)
    # one finding: the bad node's group, on the largest-size figure only (not peak again)
    assert [(x.level, x.node, x.metric, x.severity) for x in f] == [
        ("intra", "node 3 (h3)", "busbw_gbps_large", Status.FAIL)
    ]
    assert (
        "intra-node group node 3 (h3) is an outlier: busbw_gbps_large = 150, 63% below"
        in f[0].reason()
    )
    j = judge(rs)
    bad = [r for r in j.results if r.details.get("group") == "node 3 (h3)"]
    assert bad[0].status == Status.FAIL and j.verdict.value == "FAIL"
    assert all(r.status == Status.PASS for r in j.results if r is not bad[0])


def test_a_bad_rail_is_named_among_inter_node_groups() -> None:
    rs = [_link("inter", f"local rank {i} across nodes", 48.0) for i in range(3)]
    rs.append(_link("inter", "local rank 3 across nodes", 30.0))
    f = outliers.find(rs, {"warn_frac": 0.1, "fail_frac": 0.2, "min_z": 3.5})
    assert [(x.level, x.node, x.severity) for x in f] == [
        ("inter", "local rank 3 across nodes", Status.FAIL)
    ]
    # a skipped or errored group is not a peer, and the world is never compared with groups
    rs[-1].status = Status.ERROR
    assert outliers.find(rs + [_link("world", "world", 1.0)]) == []
