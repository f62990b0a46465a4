"""The collectives' printed output (nccl-tests layout and footer), variants, fabric and options."""

from __future__ import annotations

import pytest

from mlenv.acceptance.checks.collectives import (
    VARIANTS,
    CollectiveOptions,
    fabric_of,
    intra_link,
)
from mlenv.acceptance.evidence.busbw import (
    IN_PLACE,
    LARGE_BYTES,
    OUT_OF_PLACE,
    Measured,
    Row,
    avg_busbw,
    footer,
    format_nccl_tests,
    format_table,
    large_messages,
    summarize,
)


def _ag_rows() -> list[Row]:
    """all_gather-like rows: both variants measured, one in-place wrong element at 4 KiB."""
    return [
        Row.of(
            1024,
            256,
            "float",
            "none",
            -1,
            Measured(12.5, 0.08, 0.04, 0),
            Measured(11.0, 0.09, 0.05, 0),
        ),
        Row.of(
            4096,
            1024,
            "float",
            "none",
            -1,
            Measured(20.0, 0.2, 0.1, 0),
            Measured(19.0, 0.22, 0.11, 1),
        ),
    ]


def _ar_rows() -> list[Row]:
    """all_reduce-like rows: in place only (torch has no out-of-place all_reduce)."""
    return [
        Row.of(1024, 256, "float", "sum", -1, None, Measured(10.0, 0.1, 0.1, 0)),
        Row.of(4096, 1024, "float", "sum", -1, None, Measured(20.0, 0.2, 0.3, 0)),
    ]


def test_headline_is_out_of_place_where_measured_else_in_place() -> None:
    ag, ar = _ag_rows()[1], _ar_rows()[1]
    assert (ag.variant, ag.time_us, ag.busbw_gbps, ag.wrong, ag.total_wrong) == (
        OUT_OF_PLACE,
        20.0,
        0.1,
        0,
        1,
    )
    assert (ar.variant, ar.time_us, ar.busbw_gbps) == (IN_PLACE, 20.0, 0.3)
    assert ar.variants() == (None, Measured(20.0, 0.2, 0.3, 0))
    with pytest.raises(ValueError, match="at least one"):
        Row.of(8, 2, "float", "sum", -1, None, None)
    # a row built the old way stands for its headline variant only
    assert Row(8, 2, "float", "sum", -1, 1.0, 0.0, 0.0, 0).variants() == (
        Measured(1.0, 0.0, 0.0, 0),
        None,
    )


def test_torch_variants_per_op() -> None:
    assert VARIANTS == {
        "all_reduce": (True,),
        "broadcast": (True,),
        "all_to_all": (False,),
        "all_gather": (False, True),
        "reduce_scatter": (False, True),
    }


def test_printed_table_has_out_of_place_and_in_place_columns_and_the_footer() -> None:
    text = format_nccl_tests(_ag_rows(), "collectives.all_gather world")
    lines = text.splitlines()
    assert lines[0] == "# collectives.all_gather world"
    assert lines[1].split()[1:] == ["out-of-place", "in-place"]
    assert lines[2].split()[1:] == [
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong",
    ]
    assert lines[3].split()[1:] == [
        "(B)",
        "(elements)",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "(us)",
        "(GB/s)",
        "(GB/s)",
    ]
    assert lines[5].split() == [
        "4096",
        "1024",
        "float",
        "none",
        "-1",
        "20.00",
        "0.20",
        "0.10",
        "0",
        "19.00",
        "0.22",
        "0.11",
        "1",
    ]
    # right-aligned: every data line ends where the column names end; the banners sit over their columns
    assert {len(ln) for ln in lines[4:6]} == {len(lines[2])}
    assert lines[2].index("root") < lines[1].index("out-of-place") < lines[2].index("#wrong")
    assert lines[2].index("#wrong") < lines[1].index("in-place") < lines[2].rindex("busbw")
    assert lines[6] == "# Out of bounds values : 1 FAILED"
    assert lines[7].startswith("# Avg bus bandwidth    : ")
    assert float(lines[7].split(":")[1]) == pytest.approx((0.04 + 0.05 + 0.1 + 0.11) / 4)
    assert len(lines) == 8


def test_missing_variant_prints_na_and_the_average_counts_only_measured_ones() -> None:
    lines = format_nccl_tests(_ar_rows()).splitlines()
    assert lines[3].split()[5:] == ["N/A"] * 4 + ["10.00", "0.10", "0.10", "0"]
    assert len(lines[3]) == len(lines[1])
    assert avg_busbw(_ar_rows()) == pytest.approx(0.2)
    assert footer(_ar_rows()).splitlines() == [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 0.2",
    ]
    with pytest.raises(ValueError, match="no sizes"):
        avg_busbw([])


def test_compact_table_keeps_the_headline_columns() -> None:
    lines = format_table(_ag_rows(), "t").splitlines()
    assert len(lines) == 3 + 2
    assert lines[4].split() == ["4096", "1024", "float", "none", "-1", "20.00", "0.20", "0.10", "0"]


def test_summary_reports_in_place_wrong_elements_apart() -> None:
    m = summarize(_ag_rows())
    assert m["wrong_elements"] == 0.0 and m["wrong_elements_in_place"] == 1.0
    assert m["busbw_gbps_large"] == 0.1 and m["busbw_gbps_avg"] == pytest.approx(0.075)
    assert "wrong_elements_in_place" not in summarize(_ar_rows())


def test_size_options_say_which_nccl_tests_flag_they_are() -> None:
    helps = {s.name: s.help for s in CollectiveOptions.specs()}
    for key, flag in (
        ("min_bytes", "-b"),
        ("max_bytes", "-e"),
        ("factor", "-f"),
        ("iters", "-n"),
        ("warmup", "-w"),
    ):
        assert f"nccl-tests {flag})" in helps[key]


# ----------------------------------------------------------------------------- fabric


@pytest.mark.parametrize(
    ("backend", "nodes", "env", "observed", "fabric"),
    [
        ("gloo", 4, {"MLENV_NETWORK_MODE": "rdma"}, None, "gloo"),
        ("nccl", 1, {"MLENV_NETWORK_MODE": "rdma"}, "IB", "nvlink"),
        ("nccl", 2, {"MLENV_NETWORK_MODE": "rdma"}, "IB", "rdma"),
        ("nccl", 2, {"MLENV_NETWORK_MODE": "rdma"}, None, "rdma"),
        ("nccl", 2, {"NCCL_IB_HCA": "mlx5_0,mlx5_1"}, None, "rdma"),
        ("nccl", 2, {"NCCL_IB_DISABLE": "1"}, None, "socket"),
        ("nccl", 2, {"MLENV_NETWORK_MODE": "tcp", "NCCL_IB_HCA": "mlx5"}, "Socket", "socket"),
        ("nccl", 2, {}, "IBext_v8", "rdma"),
        ("nccl", 2, {}, "Socket", "socket"),
        ("nccl", 2, {}, None, "unknown"),
    ],
)
def test_fabric_comes_from_the_pods_config_then_nccls_log(
    backend: str, nodes: int, env: dict[str, str], observed: str | None, fabric: str
) -> None:
    f = fabric_of(backend, nodes, env, observed, NVLINK_TOPO)
    assert f.fabric == fabric and f.fallback is None and f.why


# Hand-written in the layout nvidia-smi topo -m prints (tab-separated, header row indented,
# legend after a blank line): 4 SXM GPUs on NVSwitch, and 2 PCIe GPUs on one host bridge.
NVLINK_TOPO = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tNV18\tNV18\tPXB\t0-55\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tNV18\tSYS\t0-55\t0\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tNV18\tSYS\t56-111\t1\t\tN/A\n"
    "GPU3\tNV18\tNV18\tNV18\t X \tSYS\t56-111\t1\t\tN/A\n"
    "NIC0\tPXB\tSYS\tSYS\tSYS\t X \n\nLegend:\n\n  X    = Self\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
)
PCIE_TOPO = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tPHB\t0-31\t0\nGPU1\tPHB\t X \t0-31\t0\n\nLegend:\n\n  X    = Self\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
)


def test_inside_a_node_nvlink_is_read_from_the_topology_not_assumed() -> None:
    assert intra_link(NVLINK_TOPO) == "nvlink"
    assert intra_link(PCIE_TOPO) == "pcie"  # the legend's "NV#" line is no GPU link
    assert intra_link(None) == intra_link("") == intra_link("\tGPU0\nGPU0\t X \n") == "unknown"
    assert (
        fabric_of("nccl", 1, {}, None, PCIE_TOPO).fabric == "pcie"
    )  # no NVLink bar for a PCIe box
    unknown = fabric_of("nccl", 1, {}, None, None)
    assert unknown.fabric == "unknown" and "nvidia-smi topo -m unavailable" in unknown.why


def test_rdma_config_with_nccl_on_sockets_is_a_fallback() -> None:
    f = fabric_of("nccl", 2, {"MLENV_NETWORK_MODE": "rdma"}, "Socket")
    assert f.fabric == "rdma"  # still held to the RDMA bar
    assert (
        f.fallback is not None and "NET/Socket" in f.fallback and "fell back to TCP" in f.fallback
    )
    assert "MLENV_NETWORK_MODE=rdma" in f.fallback


def test_default_sweeps_reach_large_messages_and_small_ones_do_not() -> None:
    assert large_messages("nccl", CollectiveOptions.defaults(cuda=True)["max_bytes"])
    assert large_messages("gloo", CollectiveOptions.defaults(cuda=False)["max_bytes"])
    assert not large_messages("nccl", LARGE_BYTES - 4) and large_messages("nccl", LARGE_BYTES)
    assert not large_messages("gloo", 262144)  # the harness's short sweeps are reported, not barred


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("n", [2, 3])
def test_in_place_buffers_alias_the_ranks_own_chunk_and_expect_the_same_data(
    op: str, n: int
) -> None:
    torch = pytest.importorskip("torch")
    from mlenv.acceptance.checks.collectives import _buffers

    count = n * 23
    for g in range(n):
        inp, out, expected = _buffers(op, count, g, n, "cpu", in_place=True)
        oop_inp, _, oop_expected = _buffers(op, count, g, n, "cpu")
        assert torch.equal(expected, oop_expected) and torch.equal(inp, oop_inp)
        big, small = (out, inp) if op == "all_gather" else (inp, out)
        assert small.data_ptr() == big.data_ptr() + g * (count // n) * big.element_size()
