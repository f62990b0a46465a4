"""NCCL log parser on real captures (tests/data/nccl/h100-*.log) and labelled hand-made IB lines,
NCCL's list matching (NCCL_IB_HCA / NCCL_SOCKET_IFNAME) and the capture plan."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mlenv.acceptance.evidence import ncclcapture, nccllog
from mlenv.acceptance.evidence.nccllog import IbDevice, SocketIf

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl"


def _log(name: str) -> nccllog.NcclLog:
    return nccllog.parse((DATA / name).read_text())


def test_real_socket_fallback_when_no_ib_device() -> None:
    log = _log("h100-1rank-no-ib-socket-fallback.log")
    assert log.version == "2.28.9+cuda13.0"
    assert log.network == "Socket" and log.networks == ["Socket"]
    assert log.ib_no_device and log.failed_plugins == ["IB"] and log.ib_devices == []
    assert log.ib_oob == "eth0:192.0.2.2<0>"
    assert log.socket_ifs == [SocketIf(0, "eth0", "192.0.2.2<0>")]
    assert [(g.net, g.name, g.enabled) for g in log.gdr_support] == [("Socket", "eth0", False)]
    assert log.hosts == ["vm"] and not log.no_net_plugin
    # the evidence is NCCL's own lines, verbatim, and only the ones that say what was used
    assert "vm:414:414 [0] NCCL INFO NET/IB : No device found." in log.evidence
    assert "vm:414:414 [0] NCCL INFO Using network Socket" in log.evidence
    assert not any("Ring 00" in e or "Tree" in e for e in log.evidence)


def test_real_ib_disabled_by_environment() -> None:
    log = _log("h100-1rank-ib-disabled-socket.log")
    assert log.network == "Socket" and not log.ib_no_device
    assert log.env["NCCL_IB_DISABLE"] == "1" and log.env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert [s.name for s in log.socket_ifs] == ["eth0"]


def test_real_ib_forced_without_device_names_no_network() -> None:
    log = _log("h100-1rank-net-ib-forced-no-device.log")
    assert log.network is None and log.no_net_plugin and log.ib_no_device
    assert log.env["NCCL_IB_HCA"] == "mlx5_0"
    assert log.warnings == ["Failed to initialize any NET plugin"]  # the timestamped WARN line
    assert any("NCCL WARN Failed to initialize any NET plugin" in e for e in log.evidence)


def test_handmade_ib_roce_with_gdr_and_pxn() -> None:
    log = _log("handmade-ib-roce-gdr.log")
    assert log.network == "IB"
    assert log.ib_devices == [IbDevice(0, "mlx5_0", 1, "RoCE"), IbDevice(1, "mlx5_1", 1, "RoCE")]
    assert log.ib_oob == "net1:10.10.0.2<0>"
    chans = log.net_channels("IB")
    assert len(chans) == 4 and all(c.gdr for c in chans)  # the P2P line is not a network channel
    assert [c.proxy for c in chans] == [None, None, None, 1]
    assert {(c.direction, c.dev) for c in chans} == {
        ("receive", 0),
        ("receive", 1),
        ("send", 0),
        ("send", 1),
    }
    assert log.to_summary()["net_channels"] == {"NET/IB/0/GDRDMA": 2, "NET/IB/1/GDRDMA": 2}


def test_handmade_without_gdr() -> None:
    log = _log("handmade-ib-roce-no-gdr.log")
    assert log.network == "IB" and not any(c.gdr for c in log.channels)
    assert [g.enabled for g in log.gdr_support] == [False, False]


def test_older_channel_format_with_bus_ids_and_sharp_devices() -> None:
    # NCCL 2.12-2.18 printed busIds in the brackets (transport/net.cc "%d[%lx] -> %d[%lx]")
    # and SHARP builds append "/SHARP" to a device (net_ib "[%d]%s:%d/%s%s").
    text = (
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[7000] -> 8[7000] [send] via NET/IB/0/GDRDMA/Shared\n"
        "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_3:1/IB ; OOB ib0:10.0.0.1<0>\n"
    )
    text += "a-b:9:9 [1] NCCL INFO Channel 01 : 3[c7000] -> 1[87000] [receive] via NET/IB/5/GDRDMA\n"  # 2.12: no /conn
    log = nccllog.parse(text)
    assert log.channels[0].gdr and log.channels[0].shared and log.channels[0].dst == 8
    assert (
        log.channels[1].channel,
        log.channels[1].src,
        log.channels[1].dev,
        log.channels[1].gdr,
    ) == (1, 3, 5, True)
    assert [d.label() for d in log.ib_devices] == ["mlx5_0:1/IB", "mlx5_3:1/IB"] and log.ib_devices[
        0
    ].sharp


def test_non_nccl_lines_ignored_and_evidence_bounded() -> None:
    many = "\n".join(
        f"h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth{i}:10.0.0.{i}<0>" for i in range(60)
    )
    log = nccllog.parse("Traceback (most recent call last):\nsum ok 1.0\n" + many)
    assert log.lines == 60 and len(log.socket_ifs) == 60
    assert len(log.evidence) == nccllog.EVIDENCE_LIMIT and log.evidence_dropped == 20


@pytest.mark.parametrize(
    ("value", "name", "port", "selected"),
    [
        ("mlx5_0,mlx5_1", "mlx5_0", 1, True),
        ("mlx5_0,mlx5_1", "mlx5_10", 1, True),  # prefix: NCCL's matchIf without "="
        ("=mlx5_0,mlx5_1", "mlx5_10", 1, False),  # "=" exact
        ("mlx5_0:1", "mlx5_0", 2, False),  # the port limits
        ("mlx5_0:1", "mlx5_0", 1, True),
        ("^mlx5_bond", "mlx5_bond_0", 1, False),
        ("^mlx5_bond", "mlx5_2", 1, True),
        ("^=mlx5_1", "mlx5_10", 1, True),
        ("^lo,docker0", "lo", -1, False),
        ("^lo,docker0", "docker0", -1, False),
        ("^lo,docker0", "eth0", -1, True),
        ("^lo,docker0", "localnet", -1, False),  # prefix: "lo" excludes any lo* name, as NCCL does
        ("", "anything", -1, True),  # no list: NCCL takes every device
        ("eth", "eth1", -1, True),
        ("=eth", "eth1", -1, False),
    ],
)
def test_if_list_matches_like_nccl(value: str, name: str, port: int, selected: bool) -> None:
    assert nccllog.parse_if_list(value).matches(name, port) is selected


def test_if_spec_describe() -> None:
    assert (
        nccllog.parse_if_list("^lo,docker0").describe()
        == "any name except those starting with lo, docker0"
    )
    assert nccllog.parse_if_list("=mlx5_0:1").describe() == "exactly mlx5_0:1"
    assert nccllog.parse_if_list("mlx5_0,mlx5_1").describe() == "names starting with mlx5_0, mlx5_1"


def test_capture_plan_default_config_keeps_warn_on_the_console() -> None:
    # The pods get NCCL_DEBUG=WARN from nccl.debug (render/env.py): INFO goes to the file,
    # WARN lines are copied back to the console.
    plan = nccllog.capture_plan({"NCCL_DEBUG": "WARN"}, "/r/nccl", 3, "pod-1")
    assert plan.set_env == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
        "NCCL_DEBUG_FILE": "/r/nccl/rank3.pod-1.%p.log",
    }
    assert plan.echo == "warn" and not plan.user_file and plan.user_level == "WARN"


@pytest.mark.parametrize(
    ("env", "level", "echo"),
    [
        ({}, "INFO", "none"),  # unset: NCCL printed nothing, still nothing
        ({"NCCL_DEBUG": "VERSION"}, "INFO", "version"),
        ({"NCCL_DEBUG": "info"}, None, "all"),  # already INFO: kept, every line echoed
        ({"NCCL_DEBUG": "TRACE"}, None, "all"),
    ],
)
def test_capture_plan_levels(env: dict[str, str], level: str | None, echo: str) -> None:
    plan = nccllog.capture_plan(env, "/r", 0, "h")
    assert plan.set_env.get("NCCL_DEBUG") == level and plan.echo == echo


def test_capture_plan_respects_user_file_and_subsys() -> None:
    plan = nccllog.capture_plan(
        {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/tmp/n.%h.%p", "NCCL_DEBUG_SUBSYS": "COLL"},
        "/r",
        0,
        "h",
    )
    assert (
        plan.user_file
        and plan.file_pattern == "/tmp/n.%h.%p"
        and "NCCL_DEBUG_FILE" not in plan.set_env
    )
    assert plan.set_env == {"NCCL_DEBUG_SUBSYS": "COLL,INIT,NET"}
    assert (
        nccllog.capture_plan({"NCCL_DEBUG_SUBSYS": "^INIT,GRAPH"}, "/r", 0, "h").set_env[
            "NCCL_DEBUG_SUBSYS"
        ]
        == "^GRAPH"
    )
    assert (
        "NCCL_DEBUG_SUBSYS"
        not in nccllog.capture_plan({"NCCL_DEBUG_SUBSYS": "ALL"}, "/r", 0, "h").set_env
    )


def test_capture_path_is_escaped_and_host_sanitised() -> None:
    plan = nccllog.capture_plan({}, "/r/50%done", 1, "a b;$(x)")
    assert plan.set_env["NCCL_DEBUG_FILE"] == "/r/50%%done/rank1.a_b___x_.%p.log"
    assert (
        nccllog.expand_pattern(plan.file_pattern, "node.example.com", 42)
        == "/r/50%done/rank1.a_b___x_.42.log"
    )
    assert nccllog.expand_pattern("/x/%h-%p-%q-%%", "node.example.com", 7) == "/x/node-7-%q-%"


def test_echo_copies_only_what_the_users_level_printed(tmp_path: Path) -> None:
    f = tmp_path / "n.log"
    f.write_text(
        "h:1:1 [0] NCCL INFO Using network IB\n\nh:1:1 [0] misc.cc:1 NCCL WARN oops\nh:1:1 [0] NCCL INFO par"
    )
    out = io.StringIO()
    echo = ncclcapture.Echo(f, "warn", out, 0.01)
    echo.poll()
    assert out.getvalue() == "h:1:1 [0] misc.cc:1 NCCL WARN oops\n"
    with f.open("a") as fh:
        fh.write("tial\nh:1:1 [0] x.cc:2 NCCL WARN again\n")
    echo.poll()
    assert out.getvalue().endswith("NCCL WARN again\n") and "partial" not in out.getvalue()


def test_start_sets_the_environment_and_makes_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ncclcapture, "_ACTIVE", None)
    (tmp_path / "nccl").mkdir()
    stale = tmp_path / "nccl" / "rank2.pod-0.999999.log"  # this rank, an earlier run
    other = tmp_path / "nccl" / "rank1.pod-0.999999.log"  # another rank's: not ours to remove
    stale.write_text("old")
    other.write_text("old")
    env = {"NCCL_DEBUG": "WARN"}
    err = io.StringIO()
    cap = ncclcapture.start(env, tmp_path / "nccl", 2, "pod-0", echo_to=err, poll_s=60)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"].endswith(
        "/nccl/rank2.pod-0.%p.log"
    )
    assert cap.path.parent.is_dir() and cap.path.name.startswith("rank2.pod-0.")
    assert ncclcapture.active() is cap and cap.path.is_absolute()
    assert not stale.exists() and other.exists()
