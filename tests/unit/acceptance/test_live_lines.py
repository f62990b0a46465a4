"""the live console line carries the status and reason the verdict will use, written once."""

from __future__ import annotations

import io
from pathlib import Path

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging.verdict import judge, reason_line
from mlenv.acceptance.reports import RunMeta, finalize
from mlenv.acceptance.reports.console import LiveJudge

BASELINE = """\
model: Shared GPU
rules:
  - {check: compute.matmul, metric: tflops_bf16, op: ">=", value: 700, source: "test bar", scope: rank}
  - {check: memory.copy, metric: copy_gbps, op: ">=", value: 2500, source: "test bar"}
"""


def _meta(baseline: Path) -> RunMeta:
    return RunMeta(
        run_id="r",
        started="2026-01-01T00:00:00+00:00",
        profile="quick",
        checks=["environment", "compute.matmul", "memory.copy"],
        baseline_spec=str(baseline),
        world={"nodes": 1, "ranks": 1, "backend": "nccl", "device": "cuda", "hosts": ["vm"]},
    )


def _measured() -> list[list[CheckResult]]:
    """What the checks report on a GPU shared with another job: PASS by their own measure."""
    env = CheckResult(
        name="environment",
        status=Status.PASS,
        scope="rank",
        node="vm",
        rank=0,
        details={"gpu_models": ["NVIDIA H100 80GB HBM3"]},
    )
    mm = CheckResult(
        name="compute.matmul",
        status=Status.PASS,
        scope="rank",
        node="vm",
        rank=0,
        metrics={"tflops_bf16": 340.6},
        duration_s=2.0,
    )
    cp = CheckResult(
        name="memory.copy",
        status=Status.PASS,
        scope="rank",
        node="vm",
        rank=0,
        metrics={"copy_gbps": 1759.0},
        duration_s=1.0,
    )
    return [[env], [mm], [cp]]


def _joined(lines: list[str], name: str) -> str:
    """A check's head line with the reason lines that continue it, as one line."""
    i = next(i for i, ln in enumerate(lines) if f" {name} " in ln)
    more = []
    for ln in lines[i + 1 :]:
        body = ln.removeprefix("[acceptance] ")
        if not body.startswith(" " * 8):  # the next check's line
            break
        more.append(body.strip())
    return " ".join([lines[i], *more])


def test_live_line_says_fail_with_the_reason_the_verdict_prints(tmp_path: Path) -> None:
    b = tmp_path / "shared.yaml"
    b.write_text(BASELINE, encoding="utf-8")
    out = io.StringIO()
    live = LiveJudge(_meta(b), baseline_spec=str(b), out=out)
    batches = _measured()
    for batch in batches:
        live.show(batch)
    lines = out.getvalue().splitlines()
    doc = finalize(
        tmp_path / "r",
        _meta(b),
        [r for bt in batches for r in bt],
        baseline=live.baseline,
        plots=False,
    )
    assert doc["verdict"] == "FAIL"
    mm, cp = (_joined(lines, name) for name in ("compute.matmul", "memory.copy"))
    assert mm.split()[1] == "FAIL" and cp.split()[1] == "FAIL", (
        lines
    )  # never PASS before a FAIL verdict
    assert next(ln for ln in lines if "environment" in ln).split()[1] == "PASS"
    # the line's reason is the verdict's, word for word
    for line, check in ((mm, "compute.matmul"), (cp, "memory.copy")):
        reason = next(x for x in doc["reasons"] if x.startswith(f"FAIL: {check} rank 0 (vm): "))
        assert line.endswith("— " + reason.split(": ", 2)[2]), (line, reason)
    assert "tflops_bf16 = 340.6, expected >= 700" in mm


def test_live_baseline_is_the_one_the_verdict_picks_by_device(tmp_path: Path) -> None:
    out = io.StringIO()
    meta = _meta(tmp_path / "unused.yaml")
    meta.baseline_spec = None
    live = LiveJudge(meta, out=out)
    for batch in _measured():
        live.show(batch)
    assert (
        live.baseline is not None and "H100" in live.baseline.model
    )  # picked from the environment's GPU name
    doc = finalize(tmp_path / "r", meta, [r for bt in _measured() for r in bt], plots=False)
    assert doc["baseline"] == f"{live.baseline.model} ({live.baseline.path})"
    live_fail = {ln.split()[2] for ln in out.getvalue().splitlines() if ln.split()[1] == "FAIL"}
    assert (
        live_fail
        == {c["name"] for c in doc["checks"] if c["status"] == "FAIL"}
        == {"compute.matmul", "memory.copy"}
    )


def test_live_line_shows_peer_outliers_as_the_verdict_does() -> None:
    rs = [
        CheckResult(
            name="compute.matmul",
            status=Status.PASS,
            scope="rank",
            node=f"h{r}",
            rank=r,
            metrics={"tflops_fp32": v},
        )
        for r, v in enumerate((1.0, 1.02, 0.98, 1.01, 0.2))
    ]
    out = io.StringIO()
    meta = RunMeta(
        run_id="r",
        started="x",
        profile="quick",
        checks=["compute.matmul"],
        world={"device": "cpu", "hosts": []},
    )
    judged = LiveJudge(meta, baseline_spec=None, out=out).show(rs)
    verdict = judge(rs)
    assert [r.status for r in judged] == [r.status for r in verdict.results]
    assert [r.reasons for r in judged] == [r.reasons for r in verdict.results]
    assert out.getvalue().splitlines()[4].split()[1] == "FAIL"


def test_reasons_are_written_once_with_their_prefix() -> None:
    prefix = "compute.matmul rank 0 (vm): "
    rule_fail = CheckResult(
        name="compute.matmul",
        status=Status.PASS,
        scope="rank",
        node="vm",
        rank=0,
        metrics={"tflops_bf16": 340.6},
    )
    from mlenv.acceptance.judging.baselines import Baseline, Rule

    b = Baseline(
        model="M", path="p", rules=(Rule("compute.matmul", "tflops_bf16", ">=", 700.0, "bar"),)
    )
    j = judge([rule_fail], b)
    assert (
        len(j.reasons) == 1
        and j.reasons[0].count(prefix) == 1
        and j.reasons[0].startswith("FAIL: " + prefix)
    )
    assert j.results[0].reasons[0].count("compute.matmul") == 0
    # a result that carries the prefix itself (older results.jsonl) is not prefixed twice
    old = CheckResult(
        name="compute.matmul",
        status=Status.FAIL,
        scope="rank",
        node="vm",
        rank=0,
        reasons=[prefix + "tflops_bf16 = 340.6, expected >= 700"],
    )
    assert reason_line(old) == "FAIL: " + prefix + "tflops_bf16 = 340.6, expected >= 700"
    # a reason that already names its check gets only the status
    died = CheckResult(
        name="compute.matmul",
        status=Status.ERROR,
        scope="rank",
        node="vm",
        rank=1,
        reasons=["rank 1 (vm) died during compute.matmul: no result and no heartbeat for 15 s"],
    )
    line = reason_line(died)
    assert (
        line == "ERROR: rank 1 (vm) died during compute.matmul: no result and no heartbeat for 15 s"
    )
    assert line.count("compute.matmul") == 1 and line.count("rank 1 (vm)") == 1


def test_a_live_judging_error_never_costs_the_run(tmp_path: Path) -> None:
    out = io.StringIO()
    meta = _meta(tmp_path / "missing.yaml")
    live = LiveJudge(
        meta, baseline_spec=str(tmp_path / "missing.yaml"), out=out
    )  # unreadable baseline
    shown = live.show(_measured()[1])
    assert [r.status for r in shown] == [Status.PASS]
    assert "not judged live (InputError" in out.getvalue()
