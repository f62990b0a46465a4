"""Verdict rules: baseline rules, missing metrics, ERROR over FAIL, outliers by peers."""

from __future__ import annotations

from mlenv.acceptance.core.result import CheckResult, Status, Verdict
from mlenv.acceptance.judging.baselines import Baseline, Rule
from mlenv.acceptance.judging.verdict import judge


def _rank(name: str, rank: int, **metrics: float) -> CheckResult:
    return CheckResult(
        name=name,
        status=Status.PASS,
        scope="rank",
        node=f"host{rank // 2}",
        rank=rank,
        metrics=dict(metrics),
    )


def _baseline(*rules: Rule) -> Baseline:
    return Baseline(model="Test GPU", path="test.yaml", rules=rules)


def test_rule_below_bar_fails_and_names_rank_and_amount() -> None:
    rs = [
        _rank("compute.matmul", 0, tflops_bf16=800.0),
        _rank("compute.matmul", 1, tflops_bf16=600.0),
    ]
    b = _baseline(Rule("compute.matmul", "tflops_bf16", ">=", 700.0, "85% of 795", "rank"))
    j = judge(rs, b, outlier_config={"warn_frac": 0.9, "fail_frac": 0.95})
    assert j.verdict == Verdict.FAIL
    assert j.results[0].status == Status.PASS
    assert j.results[1].status == Status.FAIL
    # the result's reason says what is wrong; the verdict line says which check and where, once
    assert j.results[1].reasons == [
        "tflops_bf16 = 600, expected >= 700 (14% below the bar; 85% of 795)"
    ]
    assert j.reasons == [
        "FAIL: compute.matmul rank 1 (host0): tflops_bf16 = 600, expected >= 700 "
        "(14% below the bar; 85% of 795)"
    ]


def test_missing_metric_is_fail() -> None:
    rs = [_rank("memory.copy", 0, other=1.0)]
    j = judge(rs, _baseline(Rule("memory.copy", "copy_gbps", ">=", 1.0, "floor")))
    assert j.verdict == Verdict.FAIL
    assert "metric copy_gbps is missing" in j.results[0].reasons[0]


def test_error_wins_over_fail_and_is_never_pass() -> None:
    rs = [
        _rank("compute.matmul", 0, tflops_fp32=0.0),
        CheckResult(
            name="collectives.all_reduce",
            status=Status.ERROR,
            scope="world",
            reasons=["collective failed: timed out"],
        ),
    ]
    j = judge(rs, _baseline(Rule("compute.matmul", "tflops_fp32", ">", 0.0, "positive")))
    assert j.verdict == Verdict.ERROR
    assert j.reasons[0].startswith("ERROR: collectives.all_reduce world")
    assert any(r.startswith("FAIL: compute.matmul rank 0") for r in j.reasons)


def test_error_and_skip_results_are_not_judged_by_rules() -> None:
    rs = [CheckResult(name="memory.copy", status=Status.SKIP, scope="world", reasons=["not run"])]
    j = judge(rs, _baseline(Rule("memory.copy", "copy_gbps", ">=", 1.0, "floor")))
    assert j.results[0].status == Status.SKIP
    assert j.verdict == Verdict.SKIPPED  # nothing measured: not a PASS


def test_run_notes_make_error_and_empty_run_is_error() -> None:
    assert judge([_rank("x", 0)], notes=["rank 0 died"]).verdict == Verdict.ERROR
    j = judge([])
    assert j.verdict == Verdict.ERROR and "no check produced a result" in j.reasons[-1]


def test_wildcard_rule_and_all_ops() -> None:
    rs = [
        CheckResult(
            name=f"collectives.{op}",
            status=Status.PASS,
            scope="world",
            metrics={"wrong_elements": w},
        )
        for op, w in (("all_reduce", 0.0), ("broadcast", 3.0))
    ]
    j = judge(rs, _baseline(Rule("collectives.*", "wrong_elements", "==", 0.0, "exact data")))
    assert [r.status for r in j.results] == [Status.PASS, Status.FAIL]
    cases = (
        (">", 3.0, True),
        (">", 2.0, False),
        ("<", 1.0, True),
        ("<", 2.0, False),
        ("<=", 2.0, True),
        (">=", 1.0, False),
        ("==", 2.0, True),
        ("==", 2.5, False),
    )
    assert [Rule("c", "m", op, 2.0, "s").holds(x) for op, x, _ in cases] == [
        ok for _, _, ok in cases
    ]


def test_outlier_rank_named_without_baseline() -> None:
    rs = [
        _rank("compute.matmul", r, tflops_fp32=v)
        for r, v in enumerate((1.0, 1.02, 0.98, 1.01, 0.2))
    ]
    j = judge(rs)
    assert j.verdict == Verdict.FAIL
    bad = [r for r in j.results if r.status == Status.FAIL]
    assert [r.rank for r in bad] == [4]
    assert "is an outlier" in bad[0].reasons[0] and "80% below" in bad[0].reasons[0]
    assert any(
        x.startswith("FAIL: compute.matmul rank 4 (host2): is an outlier") for x in j.reasons
    ), j.reasons


def test_expected_table_uses_median() -> None:
    from mlenv.acceptance.judging.baselines import Expected

    b = Baseline(
        model="M",
        path="p",
        expected=(Expected("memory.copy", "copy_gbps", 10.0, "spec"),),
        rules=(),
    )
    j = judge([_rank("memory.copy", r, copy_gbps=v) for r, v in enumerate((8.0, 9.0, 10.0))], b)
    assert j.expected == [
        {
            "check": "memory.copy",
            "metric": "copy_gbps",
            "expected": 10.0,
            "source": "spec",
            "scope": None,
            "when": {},
            "measured": 9.0,
        }
    ]
