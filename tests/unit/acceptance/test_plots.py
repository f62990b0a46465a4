"""What the plots show (inputs, labels, bars, aggregation at scale), decided before any pixel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.reports.plots import (
    BARS_UP_TO,
    GROUP_LINES_UP_TO,
    MAX_SIZE_TICKS,
    busbw_plot,
    plot_busbw,
    plot_tflops,
    run_title,
    size_ticks,
    tflops_plot,
)
from mlenv.acceptance.reports.units import human_bytes

SIZES = [2**k for k in range(10, 29, 2)]  # 1 KiB .. 256 MiB
META = {
    "cluster": "prod-a",
    "run_id": "20261124-000000-abcdef",
    "world": {"ranks": 512, "nodes": 64, "backend": "nccl", "device": "cuda"},
}


def _coll(op: str, scope: str, group: str, peak: float, **details: Any) -> CheckResult:
    rows = [{"size": s, "busbw_gbps": peak * s / (s + 2**20)} for s in SIZES]
    return CheckResult(
        name=f"collectives.{op}",
        status=Status.PASS,
        scope=scope,
        metrics={"busbw_gbps_large": rows[-1]["busbw_gbps"]},
        details={
            "group": group,
            "rows": rows,
            "large_messages": True,
            "backend": "nccl",
            **details,
        },
    )


def _scale_results() -> list[CheckResult]:
    """64 nodes x 8 GPUs: world, 64 intra groups (one slow), 8 rails, for two ops."""
    out = []
    for op in ("all_reduce", "all_gather"):
        out.append(_coll(op, "world", "world", 40.0, fabric="rdma"))
        out += [
            _coll(op, "intra", f"node {i} (h{i})", 100.0 if i == 7 else 400.0, fabric="nvlink")
            for i in range(64)
        ]
        out += [
            _coll(op, "inter", f"local rank {i} across nodes", 45.0, fabric="rdma")
            for i in range(8)
        ]
    return out


def test_human_sizes() -> None:
    assert [human_bytes(x) for x in (8, 1024, 1536, 4 * 2**20, 256 * 2**20, 8 * 2**30)] == [
        "8 B",
        "1 KiB",
        "1.5 KiB",
        "4 MiB",
        "256 MiB",
        "8 GiB",
    ]


def test_size_ticks_are_labelled_in_kib_mib_and_thinned() -> None:
    ticks, labels = size_ticks([float(s) for s in SIZES])
    assert labels[0] == "1 KiB" and labels[-1] == "256 MiB" and len(ticks) <= MAX_SIZE_TICKS
    ticks, labels = size_ticks([float(2**k) for k in range(3, 34)])  # 8 B .. 8 GiB, 31 sizes
    assert len(ticks) <= MAX_SIZE_TICKS and labels[0] == "8 B"
    assert all(b > a for a, b in zip(ticks, ticks[1:], strict=False))


def test_titles_name_cluster_run_and_world() -> None:
    t = run_title("Collectives", META)
    assert (
        t
        == "Collectives\ncluster prod-a, run 20261124-000000-abcdef, world: 512 ranks on 64 node(s) (nccl/cuda)"
    )
    assert run_title("Collectives", None) == "Collectives"


def test_512_ranks_aggregate_groups_into_median_and_band_with_the_bars_per_fabric() -> None:
    b = baselines.find_for_device(["NVIDIA H100 80GB HBM3"])
    spec = busbw_plot(_scale_results(), b, META)
    assert spec is not None
    assert [p.title for p in spec.panels] == [
        "all_gather",
        "all_reduce",
    ]  # small multiples, one per op
    assert spec.xticklabels[0] == "1 KiB" and spec.xticklabels[-1] == "256 MiB"
    assert "cluster prod-a" in spec.title and "512 ranks" in spec.title
    ar = spec.panels[1]
    labels = [ln.label for ln in ar.lines]
    assert labels == [
        "world",
        "intra: median of 64 groups (band: min–max)",
        "inter: median of 8 groups (band: min–max)",
    ]
    intra = ar.lines[1]
    assert intra.low is not None and intra.high is not None
    assert intra.low[-1] < intra.ys[-1] == intra.high[-1]  # the slow node shows as the band's floor
    assert intra.low[-1] == pytest.approx(100.0 * SIZES[-1] / (SIZES[-1] + 2**20))
    # the nvlink bar (intra) and the rdma rail bar (inter); the world across nodes has none
    assert sorted((bar.value, bar.label) for bar in ar.bars) == [
        (16.0, "bar >= 16 GB/s, large messages (rdma, inter)"),
        (250.0, "bar >= 250 GB/s, large messages (nvlink, intra)"),
    ]
    # drawn over the sizes it holds for: 64 MiB (NCCL's large messages) to the largest
    assert {(bar.x0, bar.x1) for bar in ar.bars} == {(64.0 * 2**20, 256.0 * 2**20)}


def test_few_groups_get_a_line_each_and_no_baseline_draws_no_bar() -> None:
    rs = [
        _coll("all_reduce", "world", "world", 2.0, fabric="gloo"),
        _coll("all_reduce", "intra", "node 0 (h0)", 3.0, fabric="gloo"),
        _coll("all_reduce", "intra", "node 1 (h1)", 3.0, fabric="gloo"),
    ]
    spec = busbw_plot(rs, None, None)
    assert spec is not None
    assert [ln.label for ln in spec.panels[0].lines] == [
        "world",
        "intra: node 0 (h0)",
        "intra: node 1 (h1)",
    ]
    assert spec.panels[0].bars == [] and all(ln.low is None for ln in spec.panels[0].lines)
    assert GROUP_LINES_UP_TO >= 2
    assert (
        busbw_plot([CheckResult(name="compute.matmul", status=Status.PASS, scope="rank", rank=0)])
        is None
    )


def _mm(rank: int, host: str, tf: float) -> CheckResult:
    return CheckResult(
        name="compute.matmul",
        status=Status.PASS,
        scope="rank",
        rank=rank,
        node=host,
        metrics={"tflops_bf16": tf},
    )


def test_tflops_at_512_ranks_are_points_with_sparse_host_ticks_and_the_bar() -> None:
    rs = [_mm(r, f"h{r // 8}", 780.0) for r in range(512)]
    spec = tflops_plot(rs, baselines.find_for_device(["NVIDIA H100 80GB HBM3"]), META)
    assert spec is not None and spec.as_points and len(spec.values["tflops_bf16"]) == 512
    assert (
        len(spec.xticks) <= 16
        and spec.xticklabels[0] == "r0\nh0"
        and spec.xticklabels[1].startswith("r32\n")
    )
    assert [(b.value, b.label) for b in spec.bars] == [(675.0, "bar tflops_bf16 >= 675")]
    small = tflops_plot([_mm(0, "vm", 0.1), _mm(1, "vm", 0.1)], None, None)
    assert small is not None and not small.as_points and small.xticklabels == ["r0\nvm", "r1\nvm"]
    assert BARS_UP_TO < 512


@pytest.fixture(scope="module")
def pyplot() -> Any:
    """matplotlib's import and first figure set-up, once for the module (about a second of
    CPU: what each figure test would otherwise pay again)."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    plt.figure()
    plt.close("all")
    return plt


def test_the_busbw_figure_is_written(tmp_path: Path, pyplot: Any) -> None:
    b = baselines.find_for_device(["NVIDIA H100 80GB HBM3"])
    assert plot_busbw(_scale_results(), tmp_path / "busbw.png", b, META) == tmp_path / "busbw.png"
    assert (tmp_path / "busbw.png").stat().st_size > 1000


def test_the_tflops_figure_is_written(tmp_path: Path, pyplot: Any) -> None:
    b = baselines.find_for_device(["NVIDIA H100 80GB HBM3"])
    assert plot_tflops(
        [_mm(r, f"h{r // 8}", 780.0) for r in range(64)], tmp_path / "t.png", b, META
    )
    assert (tmp_path / "t.png").stat().st_size > 1000
