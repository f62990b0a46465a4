"""The shipped baselines' busbw bars per fabric, as the verdict applies them."""

from __future__ import annotations

from typing import Any

import pytest

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.judging.verdict import judge


def _coll(op: str, scope: str, busbw: float, **details: Any) -> CheckResult:
    return CheckResult(
        name=f"collectives.{op}",
        status=Status.PASS,
        scope=scope,
        metrics={"busbw_gbps_large": busbw, "wrong_elements": 0.0},
        details={"group": "g", **details},
    )


def _base(model: str) -> baselines.Baseline:
    b = baselines.find_for_device([model])
    assert b is not None, model
    return b


def _status(b: baselines.Baseline, r: CheckResult) -> tuple[str, list[str]]:
    j = judge([r], b)
    return j.results[0].status.value, j.results[0].reasons


@pytest.mark.parametrize("model", ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB"])
def test_every_gpu_baseline_bars_nvlink_rdma_and_socket_with_sources(model: str) -> None:
    b = _base(model)
    for fabric, scope in (
        ("nvlink", "world"),
        ("nvlink", "intra"),
        ("rdma", "inter"),
        ("socket", "inter"),
    ):
        r = _coll("all_reduce", scope, 0.0, fabric=fabric, large_messages=True)
        bar = baselines.bar_for(b, r, "busbw_gbps_large")
        assert bar is not None and bar.op == ">=" and bar.value > 0, (model, fabric, scope)
        assert len(bar.source) > 40  # the number says where it comes from
    nv = baselines.bar_for(
        b, _coll("all_reduce", "intra", 0, fabric="nvlink", large_messages=True), "busbw_gbps_large"
    )
    ib = baselines.bar_for(
        b, _coll("all_reduce", "inter", 0, fabric="rdma", large_messages=True), "busbw_gbps_large"
    )
    tcp = baselines.bar_for(
        b, _coll("all_reduce", "inter", 0, fabric="socket", large_messages=True), "busbw_gbps_large"
    )
    assert nv is not None and ib is not None and tcp is not None
    assert nv.value > ib.value > 12.5 > tcp.value  # an RDMA bar no TCP socket on 100 GbE reaches


def test_tcp_fallback_fails_where_the_config_says_rdma() -> None:
    """fabric 'rdma' comes from the pod's config, so sockets' few GB/s meet the RDMA bar."""
    b = _base("NVIDIA H100 80GB HBM3")
    status, reasons = _status(
        b, _coll("all_reduce", "inter", 3.1, fabric="rdma", large_messages=True)
    )
    assert status == "FAIL"
    assert reasons[0].startswith("busbw_gbps_large = 3.1, expected >= 16 (81% below the bar;")
    assert (
        _status(b, _coll("all_reduce", "inter", 23.0, fabric="rdma", large_messages=True))[0]
        == "PASS"
    )
    # the same 3.1 GB/s on a cluster configured for TCP is above its (broken-path) bar
    assert (
        _status(b, _coll("all_reduce", "inter", 3.1, fabric="socket", large_messages=True))[0]
        == "PASS"
    )


def test_bars_hold_only_for_large_messages_and_their_own_fabric() -> None:
    b = _base("NVIDIA H100 80GB HBM3")
    assert (
        _status(b, _coll("all_reduce", "inter", 3.1, fabric="rdma", large_messages=False))[0]
        == "PASS"
    )
    assert (
        _status(b, _coll("all_reduce", "inter", 3.1, fabric="unknown", large_messages=True))[0]
        == "PASS"
    )
    assert (
        _status(b, _coll("all_reduce", "intra", 90.0, fabric="nvlink", large_messages=True))[0]
        == "FAIL"
    )
    # all_to_all and broadcast are reported, not barred (their busbw is not a link's bandwidth)
    assert (
        _status(b, _coll("all_to_all", "intra", 90.0, fabric="nvlink", large_messages=True))[0]
        == "PASS"
    )
    # an old result without details.fabric is judged as before
    assert _status(b, _coll("all_reduce", "inter", 3.1))[0] == "PASS"


def test_cpu_baseline_floors_gloo_at_the_default_sweep_only() -> None:
    b = _base("cpu")
    low = _coll("reduce_scatter", "world", 0.002, fabric="gloo", large_messages=True)
    status, reasons = _status(b, low)
    assert (
        status == "FAIL"
        and "expected >= 0.01" in reasons[0]
        and "measured on the 2-core" in reasons[0]
    )
    assert (
        _status(b, _coll("reduce_scatter", "world", 0.09, fabric="gloo", large_messages=True))[0]
        == "PASS"
    )
    assert (
        _status(b, _coll("reduce_scatter", "world", 0.002, fabric="gloo", large_messages=False))[0]
        == "PASS"
    )


def test_bar_for_takes_the_highest_floor_that_applies() -> None:
    b = baselines.Baseline(
        model="t",
        path="t",
        rules=(
            baselines.Rule("collectives.*", "busbw_gbps_large", ">=", 1.0, "low"),
            baselines.Rule("collectives.all_reduce", "busbw_gbps_large", ">=", 5.0, "high"),
            baselines.Rule(
                "collectives.all_reduce", "busbw_gbps_large", "<=", 50.0, "a ceiling is no bar"
            ),
            baselines.Rule(
                "collectives.all_reduce",
                "busbw_gbps_large",
                ">=",
                9.0,
                "other fabric",
                when=(("fabric", "rdma"),),
            ),
        ),
    )
    bar = baselines.bar_for(b, _coll("all_reduce", "world", 0, fabric="nvlink"), "busbw_gbps_large")
    assert bar is not None and (bar.value, bar.source) == (5.0, "high")
    low = baselines.bar_for(b, _coll("all_gather", "world", 0), "busbw_gbps_large")
    assert low is not None and low.value == 1.0
    assert baselines.bar_for(b, _coll("all_gather", "world", 0), "busbw_gbps_max") is None
    assert baselines.bar_for(None, _coll("all_gather", "world", 0), "busbw_gbps_large") is None
