"""gpu.health, fabric.ports and memory.h2d: their readers on recorded real outputs
(tests/data/nvidia-smi, tests/data/infiniband: READMEs there name the sources), their
judgements, and one SKIP line each on a CPU run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mlenv.acceptance.checks import gpuhealth, hostcopy, ports
from mlenv.acceptance.core.base import RunContext
from mlenv.acceptance.core.result import Status
from mlenv.acceptance.evidence import ibports, nvsmi

DATA = Path(__file__).resolve().parents[2] / "data"
SMI = DATA / "nvidia-smi"
IB = DATA / "infiniband" / "procfs"


def _xml(name: str) -> str:
    return (SMI / f"{name}.xml").read_text(encoding="utf-8")


# -- nvidia-smi -q -x -------------------------------------------------------------------


def test_a100_capture_reads_uuid_link_ecc_and_event_reasons() -> None:
    log = nvsmi.parse(_xml("a100-sxm4-v12"))
    assert log.driver_version == "535.54.03"
    (g,) = log.gpus
    assert g.name == "NVIDIA A100-SXM4-80GB"
    assert g.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (
        4,
        4,
        16,
        16,
    )
    assert g.ecc_enabled is True
    assert (g.ecc_volatile_uncorrectable, g.ecc_aggregate_uncorrectable) == (0, 0)
    assert g.remap_pending is None and g.remap_failure is None  # MIG: remapped_rows N/A
    assert g.clock_events_active == ()
    r = gpuhealth.judge_gpu(g, host="n1", rank=0)
    assert r.status == Status.PASS and r.details["gpu_uuid"] == g.uuid
    assert r.metrics["pcie_gen_max"] == 4


def test_old_schema_throttle_reasons_and_a_narrow_link_fail() -> None:
    """The A10G capture (driver 515, clocks_throttle_reasons): idle at Gen1 of Gen4 and x8
    of x16. Idle excuses the generation (the link drops it to save power), not the width."""
    (g,) = nvsmi.parse(_xml("a10g")).gpus
    assert g.clock_events_active == ("gpu_idle",)
    assert g.remap_pending is False and g.remap_failure is False
    r = gpuhealth.judge_gpu(g, host="n1", rank=0)
    assert r.status == Status.FAIL
    (why,) = r.reasons
    assert "PCIe link x8 of x16" in why and "Gen1" not in why
    assert r.details["read_idle"] is True


def test_a_link_below_its_generation_under_load_fails() -> None:
    text = _xml("a10g").replace(
        "<clocks_throttle_reason_gpu_idle>Active</clocks_throttle_reason_gpu_idle>",
        "<clocks_throttle_reason_gpu_idle>Not Active</clocks_throttle_reason_gpu_idle>",
    )
    (g,) = nvsmi.parse(text).gpus
    r = gpuhealth.judge_gpu(g, host="n1", rank=0)
    assert "PCIe link Gen1 of Gen4 under load" in r.reasons[0]


def test_ecc_disabled_reads_as_unknown_not_zero() -> None:
    (g,) = nvsmi.parse(_xml("rtx-4000-sff-ada-v13")).gpus
    assert g.ecc_enabled is False
    assert g.ecc_volatile_uncorrectable is None
    assert "ecc_volatile_uncorrectable" not in gpuhealth.judge_gpu(g, host="n", rank=0).metrics


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        (
            "<remapped_row_pending>No</remapped_row_pending>",
            "<remapped_row_pending>Yes</remapped_row_pending>",
            "row remap is pending",
        ),
        (
            "<remapped_row_failure>No</remapped_row_failure>",
            "<remapped_row_failure>Yes</remapped_row_failure>",
            "row remapping failed",
        ),
        (
            "<clocks_throttle_reason_hw_slowdown>Not Active</clocks_throttle_reason_hw_slowdown>",
            "<clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>",
            "clocks held down by hw_slowdown",
        ),
    ],
)
def test_remaps_and_hardware_slowdown_fail(old: str, new: str, says: str) -> None:
    # From the A10G capture, its link made healthy so only the changed element is judged.
    text = (
        _xml("a10g")
        .replace(
            "<current_link_width>8x</current_link_width>",
            "<current_link_width>16x</current_link_width>",
        )
        .replace(old, new)
    )
    assert new in text
    (g,) = nvsmi.parse(text).gpus
    r = gpuhealth.judge_gpu(g, host="n1", rank=3)
    assert r.status == Status.FAIL and says in r.reasons[0]


def test_volatile_uncorrectable_ecc_fails_and_aggregate_has_its_bar() -> None:
    healthy = _xml("a100-sxm4-v12")
    # The A100 capture's first <dram_uncorrectable> is the volatile one.
    vol = healthy.replace(
        "<dram_uncorrectable>0</dram_uncorrectable>",
        "<dram_uncorrectable>2</dram_uncorrectable>",
        1,
    )
    (g,) = nvsmi.parse(vol).gpus
    assert (g.ecc_volatile_uncorrectable, g.ecc_aggregate_uncorrectable) == (2, 0)
    assert (
        "2 uncorrectable ECC error(s) since the driver loaded"
        in gpuhealth.judge_gpu(g, host="n", rank=0).reasons[0]
    )
    parts = healthy.split("<dram_uncorrectable>0</dram_uncorrectable>")
    agg = parts[0] + "<dram_uncorrectable>0</dram_uncorrectable>" + parts[1]
    agg += (
        "<dram_uncorrectable>3</dram_uncorrectable>"
        + "<dram_uncorrectable>0</dram_uncorrectable>".join(parts[2:])
    )
    (g2,) = nvsmi.parse(agg).gpus
    assert g2.ecc_aggregate_uncorrectable == 3
    assert gpuhealth.judge_gpu(g2, host="n", rank=0, aggregate_ecc_fail=5).status == Status.PASS
    assert gpuhealth.judge_gpu(g2, host="n", rank=0, aggregate_ecc_fail=3).status == Status.FAIL


def test_node_count_and_model() -> None:
    log = nvsmi.parse(_xml("a100-sxm4-v12"))
    assert gpuhealth.judge_node(log, host="n1", count=0, model="", ranks=1).status == Status.PASS
    few = gpuhealth.judge_node(log, host="n1", count=0, model="", ranks=2)
    assert few.status == Status.FAIL and "1 GPU(s) on n1 for 2 rank(s)" in few.reasons[0]
    assert "expected 8" in gpuhealth.judge_node(log, host="n1", count=8, model="").reasons[0]
    wrong = gpuhealth.judge_node(log, host="n1", count=0, model="H100")
    assert wrong.status == Status.FAIL and "'NVIDIA A100-SXM4-80GB'" in wrong.reasons[0]


def test_rank_picks_its_gpu_by_uuid_with_or_without_the_prefix() -> None:
    log = nvsmi.parse(_xml("tesla-t4"))
    assert gpuhealth.pick(log, "d37e67a5-91dd-3774-a5cb-99096249601a", 5) is log.gpus[0]
    assert gpuhealth.pick(log, "GPU-00000000-0000-0000-0000-000000000000", 0) is None
    assert gpuhealth.pick(log, "", 0) is log.gpus[0]


def test_not_nvidia_smi_output_is_refused() -> None:
    with pytest.raises(nvsmi.NvsmiParseError, match="not XML"):
        nvsmi.parse("NVIDIA-SMI has failed because it couldn't communicate with the driver")
    with pytest.raises(nvsmi.NvsmiParseError, match="no <uuid>"):
        nvsmi.parse(
            "<nvidia_smi_log><gpu id='0'><product_name>x</product_name></gpu></nvidia_smi_log>"
        )


def test_read_says_why_when_nvidia_smi_is_missing_or_broken() -> None:
    skip = gpuhealth.read("n1", 5.0, which=lambda _: None)
    assert not isinstance(skip, nvsmi.NvsmiLog) and skip.status == Status.SKIP

    def broken(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(
            argv, 9, "", "Failed to initialize NVML: Driver/library version mismatch\n"
        )

    err = gpuhealth.read("n1", 5.0, runner=broken, which=lambda _: "/usr/bin/nvidia-smi")
    assert not isinstance(err, nvsmi.NvsmiLog) and err.status == Status.ERROR
    assert "version mismatch" in err.reasons[0]
    ok = gpuhealth.read(
        "n1",
        5.0,
        runner=lambda a, t: subprocess.CompletedProcess(a, 0, _xml("tesla-t4"), ""),
        which=lambda _: "/usr/bin/nvidia-smi",
    )
    assert isinstance(ok, nvsmi.NvsmiLog) and ok.gpus[0].name == "Tesla T4"


# -- /sys/class/infiniband ------------------------------------------------------------


def test_procfs_tree_reads_every_port() -> None:
    got = {p.name: p for p in ibports.read_ports(IB)}
    assert sorted(got) == ["hfi1_0:1", "mlx4_0:1", "mlx4_0:2", "mlx5_0:1"]
    p = got["mlx4_0:1"]
    assert (p.state, p.phys_state, p.rate_gbps, p.link_layer) == (
        "ACTIVE",
        "LinkUp",
        40.0,
        "InfiniBand",
    )
    assert p.rate_text == "40 Gb/sec (4X QDR)"
    assert got["hfi1_0:1"].rate_gbps == 100.0
    assert {"symbol_error", "link_downed", "port_rcv_errors"} <= set(p.counters)
    assert ibports.read_ports(IB / "absent") == []


def test_rate_text() -> None:
    assert ibports.parse_rate("400 Gb/sec (4X NDR)") == 400.0
    assert ibports.parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert ibports.parse_rate("") is None


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "infiniband"
    shutil.copytree(IB, dst)
    return dst


def test_a_clean_port_passes_and_a_rate_below_the_bar_fails(tmp_path: Path) -> None:
    before = ibports.read_ports(IB)
    out = ports.judge_node(before, before, host="n1", hcas="mlx4_*")
    assert [r.details["port"] for r in out] == ["mlx4_0:1", "mlx4_0:2"]
    assert all(r.status == Status.PASS for r in out)
    slow = ports.judge_node(before, before, host="n1", hcas="mlx4_*", rate_gbps=400)
    assert all(r.status == Status.FAIL for r in slow)
    assert "rate 40 Gb/sec (4X QDR), expected >= 400 Gb/s" in slow[0].reasons[0]


def test_a_link_that_went_down_under_load_fails_and_errors_warn(tmp_path: Path) -> None:
    before = ibports.read_ports(IB)
    root = _copy(tmp_path)
    (root / "mlx4_0/ports/1/counters/link_downed").write_text("2\n")
    (root / "mlx4_0/ports/2/counters/symbol_error").write_text("17\n")
    after = ibports.read_ports(root)
    out = {r.details["port"]: r for r in ports.judge_node(before, after, host="n1")}
    assert out["mlx4_0:1"].status == Status.FAIL
    assert "the link flapped under load: link_downed +2" in out["mlx4_0:1"].reasons[0]
    assert out["mlx4_0:2"].status == Status.WARN
    assert "symbol_error +17" in out["mlx4_0:2"].reasons[0]
    assert out["mlx4_0:2"].metrics["delta_symbol_error"] == 17
    tolerant = ports.judge_node(before, after, host="n1", hcas="mlx4_*", error_warn_delta=20)
    assert tolerant[1].status == Status.PASS
    assert out["hfi1_0:1"].status == Status.PASS


def test_a_port_down_fails_and_no_port_skips(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "mlx5_0/ports/1/state").write_text("1: DOWN\n")
    after = ibports.read_ports(root)
    (r,) = ports.judge_node(after, after, host="n1", hcas="mlx5_*")
    assert r.status == Status.FAIL and "state DOWN" in r.reasons[0]
    (s,) = ports.judge_node([], [], host="n1")
    assert s.status == Status.SKIP and "no RDMA port" in s.reasons[0]


# -- CPU runs: one SKIP each -------------------------------------------------------------


@pytest.mark.parametrize("check", [hostcopy.H2dCheck, gpuhealth.HealthCheck, ports.PortsCheck])
def test_cpu_run_skips_once_with_a_reason(check: type) -> None:
    def ctx(rank: int) -> RunContext:
        return RunContext(
            rank=rank,
            world_size=2,
            local_rank=rank,
            local_world_size=2,
            node_rank=0,
            nnodes=1,
            host="vm",
            backend="gloo",
            device="cpu",
        )

    (r,) = check().run(ctx(0))
    assert r.status == Status.SKIP and r.scope == "world" and "no CUDA device" in r.reasons[0]
    assert check().run(ctx(1)) == []


def test_link_gbps_counts_the_bytes_once() -> None:
    assert hostcopy.link_gbps(128 * 10**9, 2.0) == 64.0
    with pytest.raises(ValueError):
        hostcopy.link_gbps(1, 0.0)


# -- node verdicts: what to do about each finding ----------------------------------------


def test_findings_become_node_actions(tmp_path: Path) -> None:
    """A flapping port: check the NIC; a GPU with a pending remap (one of two): reset that GPU."""
    from mlenv.acceptance.core.result import CheckResult
    from mlenv.acceptance.judging import nodeverdicts

    before = ibports.read_ports(IB)
    root = _copy(tmp_path)
    (root / "mlx4_0/ports/1/counters/link_downed").write_text("1\n")
    port_results = ports.judge_node(before, ibports.read_ports(root), host="h1", hcas="mlx4_*")
    (g,) = nvsmi.parse(
        _xml("a100-sxm4-v12").replace(
            "<remapped_rows>N/A</remapped_rows>",
            "<remapped_rows><remapped_row_pending>Yes</remapped_row_pending>"
            "<remapped_row_failure>No</remapped_row_failure></remapped_rows>",
        )
    ).gpus
    sick = gpuhealth.judge_gpu(g, host="h0", rank=0)
    well = CheckResult(name="gpu.health", status=Status.PASS, scope="rank", node="h0", rank=1)
    world = {"device": "cuda", "hosts": ["h0", "h0", "h1", "h1"]}
    sec = nodeverdicts.build([sick, well, *port_results], [], world)
    nv = {n["node"]: n for n in sec["nodes"]}
    assert nv["h0"]["status"] == "FAIL" and nv["h0"]["action"]["id"] == "reset-gpu"
    assert nv["h1"]["status"] == "FAIL" and nv["h1"]["action"]["id"] == "check-nic"
