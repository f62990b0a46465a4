"""fabric.transport judgement on real NCCL captures and labelled hand-made IB logs (tests/data/nccl/).

The expectation is read from the environment the pod gets (render/env.py), so the tests
build it from the same variables a rendered StatefulSet carries.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlenv.acceptance.checks import fabric
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import nccllog

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl"
RDMA_ENV = {
    "MLENV_NETWORK_MODE": "rdma",
    "MLENV_RDMA_DEVICES": "mlx5_0,mlx5_1",
    "NCCL_IB_DISABLE": "0",
    "NCCL_IB_HCA": "mlx5_0,mlx5_1",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_NET_GDR_LEVEL": "5",
    "NCCL_SOCKET_IFNAME": "^lo,docker0",
}
TCP_ENV = {
    "MLENV_NETWORK_MODE": "tcp",
    "NCCL_IB_DISABLE": "1",
    "NCCL_SOCKET_IFNAME": "^lo,docker0",
    "NCCL_P2P_LEVEL": "NVL",
}


def _result(
    name: str, env: dict[str, str], host: str = "ml-dev-env-1", nnodes: int = 2
) -> CheckResult:
    log = nccllog.parse((DATA / name).read_text())
    return fabric.result_for(log, fabric.expectation(env), host, nnodes, str(DATA / name))


def test_rdma_mode_but_sockets_fails_naming_the_node_with_evidence() -> None:
    r = _result("h100-1rank-no-ib-socket-fallback.log", RDMA_ENV)  # REAL capture
    assert r.status == Status.FAIL and r.node == "ml-dev-env-1" and r.scope == "rank"
    (reason,) = r.reasons
    assert "NCCL used NET/Socket on eth0 192.0.2.2<0>" in reason
    assert (
        "NET/IB : No device found" in reason
        and "device plugin" in reason
        and "ml-dev-env-1" in reason
    )
    assert "vm:414:414 [0] NCCL INFO Using network Socket" in r.details["evidence"]
    assert r.details["used"]["networks"] == ["Socket"] and r.details["expected"]["mode"] == "rdma"


def test_rdma_mode_with_ib_disabled_names_the_variable() -> None:
    r = _result("h100-1rank-ib-disabled-socket.log", RDMA_ENV)  # REAL capture
    assert r.status == Status.FAIL and "NCCL_IB_DISABLE=1 reached NCCL" in r.reasons[0]


def test_rdma_forced_without_device_fails() -> None:
    r = _result("h100-1rank-net-ib-forced-no-device.log", RDMA_ENV)  # REAL capture
    assert r.status == Status.FAIL and "no usable InfiniBand/RoCE device" in r.reasons[0]


def test_rdma_on_listed_hcas_with_gdr_passes_and_says_what_was_used() -> None:
    r = _result("handmade-ib-roce-gdr.log", RDMA_ENV)  # hand-made (no RDMA machine here)
    assert r.status == Status.PASS
    assert r.reasons == [
        "NET/IB on mlx5_0:1/RoCE, mlx5_1:1/RoCE; GPUDirect RDMA on 4/4 network channel connections"
    ]
    assert r.metrics == {"net_channels": 4.0, "gdr_channels": 4.0, "ib_hcas": 2.0}
    assert any("via NET/IB/1(1)/GDRDMA" in e for e in r.details["evidence"])


def test_hca_outside_the_configured_list_fails() -> None:
    r = _result("handmade-ib-unlisted-hca.log", RDMA_ENV)
    assert r.status == Status.FAIL
    assert (
        "NCCL used HCA mlx5_bond_0:1/RoCE, outside the configured list mlx5_0,mlx5_1 (network.rdma.devices "
        "(MLENV_RDMA_DEVICES): names starting with mlx5_0, mlx5_1)"
    ) in r.reasons[0]
    assert "ml-dev-env-1" in r.reasons[0]


def test_devices_auto_uses_the_pods_nccl_ib_hca() -> None:
    env = {**RDMA_ENV, "MLENV_RDMA_DEVICES": "auto", "NCCL_IB_HCA": "=mlx5_0,mlx5_1"}
    exp = fabric.expectation(env)
    assert exp.hcas_from == "NCCL_IB_HCA" and exp.hcas is not None and exp.hcas.exact
    assert _result("handmade-ib-unlisted-hca.log", env).status == Status.FAIL
    assert _result("handmade-ib-roce-gdr.log", env).status == Status.PASS


def test_gdr_configured_but_not_used_fails() -> None:
    r = _result("handmade-ib-roce-no-gdr.log", RDMA_ENV)
    assert r.status == Status.FAIL
    assert "4 of 4 NET/IB channel connections on this rank ran without it" in r.reasons[0]
    assert "nvidia-peermem" in r.reasons[0]


def test_gdr_at_a_narrow_level_warns_and_off_is_not_expected() -> None:
    assert (
        _result("handmade-ib-roce-no-gdr.log", {**RDMA_ENV, "NCCL_NET_GDR_LEVEL": "PHB"}).status
        == Status.WARN
    )
    r = _result("handmade-ib-roce-no-gdr.log", {**RDMA_ENV, "NCCL_NET_GDR_LEVEL": "LOC"})
    assert r.status == Status.PASS and "GPUDirect RDMA on 0/4" in r.reasons[0]


def test_gdr_judged_from_hca_support_when_this_rank_has_no_network_channel() -> None:
    text = "\n".join(
        ln
        for ln in (DATA / "handmade-ib-roce-no-gdr.log").read_text().splitlines()
        if "Channel" not in ln
    )
    log = nccllog.parse(text)
    j = fabric.judge(log, fabric.expectation(RDMA_ENV), "ml-dev-env-1", 2)
    assert j.status == Status.FAIL and "Disabled for every HCA (mlx5_0, mlx5_1)" in j.reasons[0]
    ok = nccllog.parse(
        "\n".join(
            ln
            for ln in (DATA / "handmade-ib-roce-gdr.log").read_text().splitlines()
            if "Channel" not in ln
        )
    )
    j = fabric.judge(ok, fabric.expectation(RDMA_ENV), "h", 2)
    assert j.status == Status.PASS and "no network channel on this rank" in j.reasons[0]


def test_tcp_mode_reports_the_interface() -> None:
    r = _result("h100-1rank-ib-disabled-socket.log", TCP_ENV)  # REAL capture
    assert r.status == Status.PASS
    assert r.reasons == ["NET/Socket on eth0 192.0.2.2<0> (NCCL_SOCKET_IFNAME=^lo,docker0)"]


def test_tcp_on_an_excluded_interface_fails() -> None:
    r = _result("handmade-socket-docker0.log", TCP_ENV)
    assert r.status == Status.FAIL
    assert "docker0 (172.17.0.2<0>), which NCCL_SOCKET_IFNAME=^lo,docker0 excludes" in r.reasons[0]


def test_tcp_on_loopback_across_nodes_fails_even_without_a_list() -> None:
    log = nccllog.parse(
        "h:1:1 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
        "h:1:1 [0] NCCL INFO Using network Socket\n"
    )
    assert (
        fabric.judge(log, fabric.expectation({"NCCL_IB_DISABLE": "1"}), "h", 2).status
        == Status.FAIL
    )
    assert (
        fabric.judge(log, fabric.expectation({"NCCL_IB_DISABLE": "1"}), "h", 1).status
        == Status.PASS
    )


def test_tcp_mode_but_ib_used_warns() -> None:
    r = _result("handmade-ib-roce-gdr.log", TCP_ENV)
    assert r.status == Status.WARN and "NCCL_IB_DISABLE=1 did not reach NCCL" in r.reasons[0]


def test_no_mode_configured_reports_without_judging() -> None:
    r = _result("h100-1rank-no-ib-socket-fallback.log", {})
    assert r.status == Status.PASS and "reported, not judged" in r.reasons[0]


def test_missing_log_is_error() -> None:
    r = fabric.result_for(
        fabric.read_log(Path("/nonexistent/nccl.log")),
        fabric.expectation(RDMA_ENV),
        "h",
        2,
        "/nonexistent/nccl.log",
    )
    assert r.status == Status.ERROR and "no NCCL log lines" in r.reasons[0]
    assert r.details["log"] == "/nonexistent/nccl.log"


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ({"MLENV_NETWORK_MODE": "rdma"}, "rdma"),
        ({"NCCL_IB_DISABLE": "1"}, "tcp"),
        ({"NCCL_IB_HCA": "mlx5"}, "rdma"),
        ({"MLENV_NETWORK_MODE": "bogus"}, "unknown"),
    ],
)
def test_mode_from_the_environment(env: dict[str, str], mode: str) -> None:
    assert fabric.expectation(env).mode == mode


def test_skips_gloo_and_single_node_with_the_reason() -> None:
    gloo = fabric.skip_reason("gloo", 2)
    assert gloo is not None and gloo.startswith("backend gloo (CPU): NCCL is not in use")
    one = fabric.skip_reason("nccl", 1)
    assert one is not None and one.startswith("single node")
    assert fabric.skip_reason("nccl", 2) is None


def test_skip_result_from_rank_0_only() -> None:
    from mlenv.acceptance.core.base import RunContext

    ctx = RunContext(
        rank=0,
        world_size=2,
        local_rank=0,
        local_world_size=2,
        node_rank=0,
        nnodes=1,
        host="h",
        backend="gloo",
        device="cpu",
    )
    (r,) = fabric.FabricTransport().run(ctx)
    assert r.status == Status.SKIP and r.scope == "world" and "backend gloo" in r.reasons[0]
    ctx.rank = 1
    assert fabric.FabricTransport().run(ctx) == []


def test_evidence_reaches_summary_and_junit() -> None:
    import xml.etree.ElementTree as ET

    from mlenv.acceptance.reports.junit import to_junit
    from mlenv.acceptance.reports.markdown import to_markdown

    bad = _result("h100-1rank-no-ib-socket-fallback.log", RDMA_ENV)
    bad.rank = 2
    good = _result("handmade-ib-roce-gdr.log", RDMA_ENV, host="ml-dev-env-0")
    good.rank = 0
    md = to_markdown({"verdict": "FAIL", "reasons": []}, [good, bad], [])
    ev = md.split("## Evidence", 1)[1]
    assert ev.index("rank 2 @ ml-dev-env-1: FAIL") < ev.index(
        "rank 0 @ ml-dev-env-0: PASS"
    )  # worst first
    assert "vm:414:414 [0] NCCL INFO NET/IB : No device found." in ev
    root = ET.fromstring(to_junit([good, bad], "FAIL", []))
    outs = {tc.get("name"): tc.findtext("system-out") or "" for tc in root.iter("testcase")}
    assert outs["rank 0 @ ml-dev-env-0"].startswith(
        "NET/IB on mlx5_0:1/RoCE"
    )  # a PASS says what it used
    assert "NCCL INFO Using network Socket" in outs["rank 2 @ ml-dev-env-1"]


def test_docs_state_the_capture_settings_the_code_uses() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "acceptance.md").read_text(
        encoding="utf-8"
    )
    assert f"NCCL_DEBUG_SUBSYS={nccllog.DEFAULT_SUBSYS}" in doc
    assert f"{fabric.PROBE_BYTES // 2**20} MiB all_reduce" in doc
    assert "rank<R>.<host>.%p.log" in doc and "## fabric.transport" in doc


def test_rdma_sharp_plugin_network_counts_as_ib() -> None:
    # The nccl-rdma-sharp plugin names its network "IBext_v8" (channel lines "via NET/IBext_v8/0",
    # format seen in NVIDIA/nccl#1814); it is verbs on IB/RoCE, so rdma mode accepts it.
    text = (
        "h:1:1 [0] NCCL INFO Using network IBext_v8\n"
        "h:1:1 [0] NCCL INFO Channel 00/0 : 18[2] -> 34[2] [receive] via NET/IBext_v8/0/GDRDMA\n"
    )
    j = fabric.judge(nccllog.parse(text), fabric.expectation(RDMA_ENV), "h", 2)
    assert j.status == Status.PASS and j.reasons[0].startswith("NET/IBext_v8 on HCAs not printed")
    no_gdr = text.replace("/GDRDMA", "")
    assert (
        fabric.judge(nccllog.parse(no_gdr), fabric.expectation(RDMA_ENV), "h", 2).status
        == Status.FAIL
    )
