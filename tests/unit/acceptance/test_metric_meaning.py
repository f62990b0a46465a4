"""Metrics declare their meaning where they are measured; documents without declarations
fall back to the name rule the older versions used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlenv.acceptance.core import metrics, registry
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import outliers
from mlenv.acceptance.judging.verdict import judge
from mlenv.acceptance.records import history
from mlenv.acceptance.records.compare import Run, compare
from mlenv.acceptance.reports.document import RunMeta, build_document

# Importing the shipped checks is a one-off cost of the process, paid at collection rather
# than by whichever test happens to run first.
registry.load_shipped()

# Every metric the shipped checks report, with the scope it is reported at.
SHIPPED_METRICS: list[tuple[str, str, str]] = [
    ("environment", "rank", "gpu_count"),
    ("gpu.dcgm", "node", "tests_run"),
    ("gpu.dcgm", "node", "tests_failed"),
    *[
        ("gpu.health", "rank", m)
        for m in (
            "pcie_gen_current",
            "pcie_gen_max",
            "pcie_width_current",
            "pcie_width_max",
            "ecc_volatile_uncorrectable",
            "ecc_aggregate_uncorrectable",
            "remap_pending",
            "remap_failure",
        )
    ],
    ("gpu.health", "node", "gpu_count"),
    ("compute.matmul", "rank", "tflops_fp32"),
    ("compute.matmul", "rank", "tflops_bf16"),
    ("compute.quorum", "world", "disagreeing_ranks"),
    ("memory.copy", "rank", "copy_gbps"),
    ("memory.h2d", "rank", "h2d_gbps"),
    ("memory.h2d", "rank", "d2h_gbps"),
    *[
        (f"collectives.{op}", scope, m)
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
        for scope in ("world", "intra", "inter")
        for m in (
            "busbw_gbps_max",
            "algbw_gbps_max",
            "busbw_gbps_large",
            "busbw_gbps_avg",
            "wrong_elements",
            "wrong_elements_in_place",
        )
    ],
    ("fabric.transport", "rank", "net_channels"),
    ("fabric.transport", "rank", "gdr_channels"),
    ("fabric.transport", "rank", "ib_hcas"),
    ("fabric.ports", "node", "rate_gbps"),
    ("fabric.ports", "node", "active"),
    ("fabric.ports", "node", "delta_link_downed"),
    ("fabric.localize", "rack", "pair_gbps_max"),
    ("fabric.localize", "rack", "reference_gbps"),
    ("fabric.localize", "node", "pair_gbps_min"),
    ("fabric.localize", "link", "pair_gbps"),
    ("fabric.localize", "world", "reference_gbps"),
    ("fabric.localize", "world", "pair_gbps_min"),
    *[
        ("training.deepspeed", "world", m)
        for m in (
            "samples_per_s",
            "samples_per_s_per_rank",
            "step_time_p50_ms",
            "loss_first",
            "loss_last",
            "loss_drop_frac",
            "plain_samples_per_s_per_rank",
            "stack_ratio",
            "stack_ratio_whole_step",
        )
    ],
    *[
        ("training.step_time", "rank", m)
        for m in (
            "p50_ms",
            "p90_ms",
            "p99_ms",
            "samples_per_s",
            "compute_p50_ms",
            "comm_p50_ms",
            "optimizer_p50_ms",
            "plain_p50_ms",
            "plain_samples_per_s",
            "stack_ratio",
        )
    ],
]


def _effect(m: metrics.Metric, scope: str, metric: str) -> tuple[int, bool, bool]:
    """What a meaning does to a figure reported at ``scope``: compare's direction, whether
    the outliers compare it (rank results; collective groups on the link figure only) and
    whether the history trends it (rank and world results)."""
    compared = scope == "rank" or (scope in outliers.LINK_SCOPES and metric == outliers.LINK_METRIC)
    return (m.direction, m.peers and compared, m.trend and scope in ("rank", "world"))


@pytest.fixture(scope="module")
def table() -> dict[str, metrics.Declared]:
    registry.load_shipped()
    return registry.metric_table()


@pytest.mark.parametrize("case", SHIPPED_METRICS, ids=lambda c: f"{c[0]}:{c[1]}:{c[2]}")
def test_declarations_judge_every_shipped_metric_as_the_name_rule_did(
    table: dict[str, metrics.Declared], case: tuple[str, str, str]
) -> None:
    check, scope, metric = case
    assert check in table, f"{check} declares no metrics"
    got = metrics.declared(table[check], metric)
    assert got is not None, f"{check} does not declare {metric}"
    assert _effect(got, scope, metric) == _effect(metrics.by_name(check, metric), scope, metric)


def test_every_shipped_check_declares_its_metrics_and_units(
    table: dict[str, metrics.Declared],
) -> None:
    for name in registry.registry():
        assert name in table, name
    assert all(m.unit for decl in table.values() for m in decl.values())
    assert metrics.declared(table["compute.matmul"], "tflops_fp8") == metrics.higher(
        "TFLOP/s", trend=True
    )


def test_name_rule_for_documents_without_declarations() -> None:
    by = metrics.direction_by_name
    assert (by("tflops_bf16"), by("copy_gbps"), by("samples_per_s_per_rank")) == (1, 1, 1)
    assert (by("p50_ms"), by("compute_p50_ms")) == (-1, -1)
    assert by("p99_ms") == 0  # tails of a short run are noise
    assert by("comm_p50_ms") == 0  # a fast rank waits for its slow peer
    assert by("gpu_count") == by("loss_first") == 0
    assert metrics.by_name("collectives.all_reduce", "busbw_gbps_max").trend is False
    assert metrics.by_name("plugin.x", "widget_gbps").trend is True
    assert metrics.by_name("plugin.x", "widget_gbps_max").trend is False


def test_a_check_that_declares_leaves_its_undeclared_metrics_unjudged() -> None:
    table = {"plugin.x": {"rate": metrics.higher("items/s")}}
    assert metrics.meaning(table, "plugin.x", "rate").direction == 1
    assert metrics.meaning(table, "plugin.x", "other_gbps").direction == 0
    assert metrics.meaning(table, "plugin.y", "other_gbps").direction == 1  # declares nothing


def test_a_metric_compared_or_trended_needs_a_direction() -> None:
    with pytest.raises(ValueError, match="needs a direction"):
        metrics.Metric("ms", peers=True)
    with pytest.raises(ValueError, match="direction must be"):
        metrics.Metric("ms", direction=2)


def test_declarations_round_trip_and_a_malformed_entry_is_dropped() -> None:
    table = {"plugin.x": {"rate": metrics.higher("items/s", trend=True)}}
    assert metrics.table_from_json(metrics.table_to_json(table)) == table
    raw = {"plugin.x": {"rate": {"direction": "up"}, "t": {"unit": "ms", "direction": -1}}}
    assert metrics.table_from_json(raw) == {"plugin.x": {"t": metrics.Metric("ms", -1)}}
    assert metrics.table_from_json(["not", "a", "mapping"]) == {}


def _doc(rs: list[CheckResult], meaning: dict[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"run_id": "r", "profile": "quick", "world": {}, "checks": []}
    doc["checks"] = [r.to_dict() for r in rs]
    if meaning is not None:
        doc["metric_meaning"] = meaning
    return doc


def _plugin(value: float) -> list[CheckResult]:
    return [CheckResult("plugin.x", Status.PASS, "world", metrics={"items": value})]


def test_compare_judges_a_declared_metric_and_an_old_document_by_name() -> None:
    a_rs, b_rs = _plugin(100.0), _plugin(50.0)
    declared = {"plugin.x": {"items": metrics.higher("items/s").to_dict()}}
    old = compare(Run("a", _doc(a_rs, None), a_rs), Run("b", _doc(b_rs, None), b_rs))
    assert [r.state for r in old.rows] == ["not judged"]  # the name says nothing
    new = compare(Run("a", _doc(a_rs, None), a_rs), Run("b", _doc(b_rs, declared), b_rs))
    assert [r.state for r in new.rows] == ["REGRESSION"]
    t_a = [CheckResult("compute.matmul", Status.PASS, "rank", "h", 0, {"tflops_fp32": 10.0})]
    t_b = [CheckResult("compute.matmul", Status.PASS, "rank", "h", 0, {"tflops_fp32": 5.0})]
    old = compare(Run("a", _doc(t_a, None), t_a), Run("b", _doc(t_b, None), t_b))
    assert [r.state for r in old.rows] == ["REGRESSION"]  # an old document, by its name


def test_the_history_trends_what_the_document_declares(tmp_path: Path) -> None:
    rs = _plugin(7.0)
    declared = {"plugin.x": {"items": metrics.higher("items/s", trend=True).to_dict()}}
    line = history.make_record(_doc(rs, declared), rs, "local", tmp_path)
    assert line["metrics"] == {"plugin.x": {"items": 7.0}}
    assert history.make_record(_doc(rs, None), rs, "local", tmp_path)["metrics"] == {}


def test_the_results_document_carries_the_declarations() -> None:
    rs = [CheckResult("compute.matmul", Status.PASS, "rank", "h", 0, {"tflops_fp32": 1.0})]
    meta = RunMeta("r", "2026-01-01T00:00:00Z", "quick", ["compute.matmul"], {})
    doc = build_document(meta, judge(rs, None), None)
    assert doc["metric_meaning"] == {
        "compute.matmul": {
            "tflops_*": {"unit": "TFLOP/s", "direction": 1, "peers": True, "trend": True}
        }
    }
