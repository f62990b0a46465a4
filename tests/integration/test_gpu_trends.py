"""The per-GPU trend PNG: one line per GPU UUID across a cluster's runs (matplotlib, seconds)."""

from __future__ import annotations

from pathlib import Path

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.records import history, trend

A = "GPU-513536b6-7d19-9063-b049-1e69664bb298"
B = "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"


def _record(
    tmp_path: Path, run_id: str, day: int, order: tuple[str, str], gbps: tuple[float, float]
) -> dict:
    rs = [
        CheckResult(
            name="memory.h2d",
            status=Status.PASS,
            scope="rank",
            node="n1",
            rank=rank,
            metrics={"h2d_gbps": v},
            details={"gpu_uuid": u},
        )
        for rank, (u, v) in enumerate(zip(order, gbps, strict=True))
    ]
    doc = {"run_id": run_id, "started": f"2026-11-0{day}T00:00:00", "verdict": "PASS", "world": {}}
    return history.make_record(doc, rs, "prod", tmp_path)


def test_a_per_gpu_trend_is_drawn_from_the_second_run(tmp_path: Path) -> None:
    r1 = _record(tmp_path, "r1", 1, (A, B), (53.0, 52.0))
    assert "trend-gpus-memory.h2d-h2d_gbps.png" not in trend.plot_trends([r1], r1, tmp_path, "prod")
    r2 = _record(tmp_path, "r2", 2, (B, A), (20.0, 53.0))
    made = trend.plot_trends([r1, r2], r2, tmp_path, "prod")
    assert "trend-gpus-memory.h2d-h2d_gbps.png" in made
    png = tmp_path / "trend-gpus-memory.h2d-h2d_gbps.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
