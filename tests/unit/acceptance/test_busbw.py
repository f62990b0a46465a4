"""nccl-tests formulas, size sweep, table layout and summary of the collectives check."""

from __future__ import annotations

import pytest

from mlenv.acceptance.evidence.busbw import (
    OPS,
    Row,
    bandwidth,
    bus_factor,
    format_table,
    redop_of,
    size_sweep,
    summarize,
)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 64])
def test_bus_factors_follow_nccl_tests(n: int) -> None:
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(op, n) == pytest.approx((n - 1) / n)
    assert bus_factor("broadcast", n) == 1.0


def test_bus_factor_rejects_unknown_op_and_empty_world() -> None:
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        bus_factor("allreduce", 2)
    with pytest.raises(ValueError, match="nranks"):
        bus_factor("all_reduce", 0)


def test_bandwidth_is_bytes_over_time_times_factor() -> None:
    size, sec, n = 3 * 2**20, 0.0021, 8
    bw = bandwidth("all_reduce", size, sec, n)
    assert bw.algbw_gbps == pytest.approx(size / sec / 1e9)
    assert bw.busbw_gbps == pytest.approx(bw.algbw_gbps * 2 * (n - 1) / n)
    with pytest.raises(ValueError, match="positive"):
        bandwidth("broadcast", size, 0.0, n)


def test_size_sweep_multiplies_and_stops_at_max() -> None:
    assert size_sweep(1024, 16384, 2, elem_size=4, nranks=4, op="all_reduce") == [
        1024,
        2048,
        4096,
        8192,
        16384,
    ]
    assert size_sweep(1000, 5000, 4, elem_size=4, nranks=1, op="broadcast") == [1000, 4000]


def test_size_sweep_aligns_chunked_ops_to_whole_elements_per_rank() -> None:
    sizes = size_sweep(8, 1024, 2, elem_size=4, nranks=3, op="all_gather")
    # at least one element per rank, always a multiple of 3 elements
    assert sizes[0] == 3 * 4
    assert all(s % (3 * 4) == 0 for s in sizes)
    assert sizes == sorted(set(sizes))
    assert size_sweep(8, 1024, 2, elem_size=4, nranks=3, op="all_reduce")[0] == 8


@pytest.mark.parametrize(
    "args, match",
    [((0, 10, 2), ">= 1"), ((20, 10, 2), "larger than"), ((1, 10, 1), "factor")],
)
def test_size_sweep_rejects_bad_bounds(args: tuple[int, int, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        size_sweep(*args, elem_size=4, nranks=2, op="all_reduce")


def _rows() -> list[Row]:
    return [
        Row(1024, 256, "float", "sum", -1, 12.5, 0.08, 0.08, 0),
        Row(4096, 1024, "float", "sum", -1, 20.0, 0.2, 0.31, 3),
        Row(16384, 4096, "float", "sum", -1, 40.0, 0.41, 0.29, 0),
    ]


def test_table_has_nccl_tests_columns_and_one_line_per_size() -> None:
    text = format_table(_rows(), "collectives.all_reduce world")
    lines = text.splitlines()
    assert lines[0] == "# collectives.all_reduce world"
    assert lines[1].split()[1:] == [
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
    ]
    assert lines[2].split()[1:] == ["(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)"]
    body = [ln.split() for ln in lines[3:]]
    assert [b[0] for b in body] == ["1024", "4096", "16384"]
    assert body[1] == ["4096", "1024", "float", "sum", "-1", "20.00", "0.20", "0.31", "3"]
    # right-aligned columns: every data line ends where the header ends
    assert {len(ln) for ln in lines[3:]} == {len(lines[1])}


def test_summary_takes_max_large_and_sums_wrong() -> None:
    m = summarize(_rows())
    assert m == {
        "busbw_gbps_max": 0.31,
        "algbw_gbps_max": 0.41,
        "busbw_gbps_large": 0.29,
        "busbw_gbps_avg": pytest.approx((0.08 + 0.31 + 0.29) / 3),
        "wrong_elements": 3.0,
    }
    with pytest.raises(ValueError, match="no sizes"):
        summarize([])


def test_redop_column() -> None:
    assert [redop_of(op) for op in OPS] == ["sum", "none", "sum", "none", "none"]
