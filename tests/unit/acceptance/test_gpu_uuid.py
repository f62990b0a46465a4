"""One figure per GPU across runs: history lines and `mlenv compare` key GPUs by UUID, so a
GPU that moved to another index (or rank) between two runs is compared with itself."""

from __future__ import annotations

from pathlib import Path

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.records import compare, gpus, history

A = "GPU-513536b6-7d19-9063-b049-1e69664bb298"
B = "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"


def _results(order: tuple[str, str], h2d: tuple[float, float]) -> list[CheckResult]:
    """Two ranks on one node; ``order`` says which GPU each rank drove this time."""
    out = []
    for rank, (uuid, gbps) in enumerate(zip(order, h2d, strict=True)):
        out.append(
            CheckResult(
                name="memory.h2d",
                status=Status.PASS,
                scope="rank",
                node="n1",
                rank=rank,
                metrics={"h2d_gbps": gbps},
                details={"gpu_uuid": uuid},
            )
        )
        out.append(
            CheckResult(
                name="compute.matmul",
                status=Status.PASS,
                scope="rank",
                node="n1",
                rank=rank,
                metrics={"tflops_bf16": 700.0 + rank},
            )
        )
    return out


def _run(results: list[CheckResult], run_id: str) -> compare.Run:
    doc = {
        "run_id": run_id,
        "profile": "quick",
        "verdict": "PASS",
        "world": {"ranks": 2, "device": "cuda", "hosts": ["n1", "n1"]},
        "checks": [r.to_dict() for r in results],
    }
    return compare.Run(ref=run_id, doc=doc, results=results)


def test_history_line_holds_each_gpus_figures_under_its_uuid(tmp_path: Path) -> None:
    rs = _results((A, B), (53.0, 20.0))
    got = gpus.per_gpu(rs)
    assert set(got) == {A, B}
    assert got[A] == {
        "node": "n1",
        "rank": 0,
        "metrics": {"compute.matmul": {"tflops_bf16": 700.0}, "memory.h2d": {"h2d_gbps": 53.0}},
    }
    rec = history.make_record({"run_id": "r1", "world": {}}, rs, "prod", tmp_path)
    assert rec["gpus"][B]["metrics"]["memory.h2d"] == {"h2d_gbps": 20.0}
    bare = [CheckResult(name="memory.copy", status=Status.PASS, rank=0, metrics={"copy_gbps": 1.0})]
    assert "gpus" not in history.make_record({"run_id": "r2", "world": {}}, bare, "prod", tmp_path)


def test_compare_follows_a_gpu_that_changed_rank() -> None:
    """Run 1: rank 0 drove GPU A (53 GB/s), rank 1 GPU B (52). Run 2: the ranks swapped
    GPUs and GPU B fell to 20. By rank, rank 0 would look like a regression of 53 -> 20
    on the wrong GPU; by UUID the regression is GPU B's, and GPU A did not change."""
    a = _run(_results((A, B), (53.0, 52.0)), "r1")
    b = _run(_results((B, A), (20.0, 53.0)), "r2")
    c = compare.compare(a, b)
    rows = {(r.check, r.where, r.metric): r for r in c.rows}
    gb = rows[("memory.h2d", B, "h2d_gbps")]
    assert (gb.a, gb.b, gb.state) == (52.0, 20.0, "REGRESSION")
    ga = rows[("memory.h2d", A, "h2d_gbps")]
    assert (ga.a, ga.b) == (53.0, 53.0) and ga.state != "REGRESSION"
    # the rank's other results are keyed by its GPU too
    assert ("compute.matmul", A, "tflops_bf16") in rows
    assert not any(r.where.startswith("rank ") for r in c.rows if r.check == "memory.h2d")


def test_trend_series_follows_one_gpu_by_uuid(tmp_path: Path) -> None:
    """Per-GPU trend: GPU B's own figures across runs, whichever rank drove it (the PNG
    itself is drawn in tests/integration/test_gpu_trends.py: matplotlib takes seconds)."""
    from mlenv.acceptance.records import trend

    r1 = history.make_record(
        {"run_id": "r1", "started": "2026-11-01T00:00:00", "verdict": "PASS", "world": {}},
        _results((A, B), (53.0, 52.0)),
        "prod",
        tmp_path,
    )
    r2 = history.make_record(
        {"run_id": "r2", "started": "2026-11-02T00:00:00", "verdict": "PASS", "world": {}},
        _results((B, A), (20.0, 53.0)),
        "prod",
        tmp_path,
    )
    assert [p[2] for p in trend.series([r2, r1], "memory.h2d", "h2d_gbps", gpu=B)] == [52.0, 20.0]
    assert [p[2] for p in trend.series([r1, r2], "memory.h2d", "h2d_gbps", gpu=A)] == [53.0, 53.0]
    assert r2["gpus"][B]["rank"] == 0 and r1["gpus"][B]["rank"] == 1
