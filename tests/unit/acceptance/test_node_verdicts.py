"""Node verdicts: a status, severity and action per node, GPU and link."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging import nodeverdicts
from mlenv.acceptance.judging.verdict import judge
from mlenv.acceptance.reports.junit import to_junit
from mlenv.acceptance.reports.markdown import to_markdown

CPU = {"device": "cpu", "hosts": ["h0", "h1", "h2", "h3"]}


def _r(
    name: str, rank: int, host: str, status: Status = Status.PASS, **metrics: float
) -> CheckResult:
    return CheckResult(
        name=name, status=status, scope="rank", node=host, rank=rank, metrics=dict(metrics)
    )


def _by_node(section: dict) -> dict[str, dict]:
    return {n["node"]: n for n in section["nodes"]}


def test_a_slow_rank_makes_its_node_fail_with_drain_and_the_others_pass() -> None:
    rs = [_r("compute.matmul", i, f"h{i}", tflops_fp32=1.0) for i in range(4)]
    rs[2].metrics["tflops_fp32"] = 0.2  # 80% below its peers
    j = judge(rs)
    nv = _by_node(nodeverdicts.build(j.results, j.findings, CPU))
    assert nv["h2"]["status"] == "FAIL" and nv["h2"]["severity"] == "critical"
    assert nv["h2"]["action"]["id"] == "drain" and nv["h2"]["action"]["quarantine"] is True
    assert "drain h2" in nv["h2"]["action"]["text"]
    f = nv["h2"]["findings"][0]
    assert f["check"] == "compute.matmul" and f["rank"] == 2 and "tflops_fp32 = 0.2" in f["figure"]
    for h in ("h0", "h1", "h3"):
        assert (
            nv[h]["status"] == "PASS"
            and nv[h]["action"]["id"] == "none"
            and nv[h]["checks"] == ["compute.matmul"]
        )


def test_a_node_nothing_measured_is_unknown_never_pass() -> None:
    rs = [
        _r("compute.matmul", 0, "h0", tflops_fp32=1.0),
        _r("environment", 1, "h1"),  # records versions: not a measurement
        CheckResult(name="compute.matmul", status=Status.SKIP, scope="world", reasons=["not run"]),
    ]
    nv = _by_node(nodeverdicts.build(rs, [], {"device": "cpu", "hosts": ["h0", "h1", "h2"]}))
    assert nv["h0"]["status"] == "PASS"
    assert nv["h1"]["status"] == "UNKNOWN" and nv["h1"]["action"]["id"] == "recheck"
    assert nv["h2"]["status"] == "UNKNOWN" and nv["h2"]["severity"] == "unknown"
    assert nodeverdicts.worst(nodeverdicts.build(rs, [], {"hosts": ["h0", "h1"]})) == "UNKNOWN"


def test_error_beside_a_measurement_is_warn_and_alone_unknown() -> None:
    err = CheckResult(
        name="memory.copy",
        status=Status.ERROR,
        scope="rank",
        node="h1",
        rank=1,
        reasons=["rank 1 (h1) died during memory.copy"],
    )
    rs = [
        _r("compute.matmul", 0, "h0", tflops_fp32=1.0),
        _r("compute.matmul", 1, "h1", tflops_fp32=1.0),
        err,
        CheckResult(
            name="memory.copy",
            status=Status.ERROR,
            scope="rank",
            node="h2",
            rank=2,
            reasons=["hung"],
        ),
    ]
    nv = _by_node(nodeverdicts.build(rs, [], {"device": "cpu", "hosts": ["h0", "h1", "h2"]}))
    assert nv["h1"]["status"] == "WARN" and nv["h1"]["action"]["id"] == "recheck"
    assert nv["h2"]["status"] == "UNKNOWN"


def test_one_gpu_of_eight_failing_is_reset_gpu_all_of_them_drain() -> None:
    hosts = ["n0"] * 8 + ["n1"] * 8
    world = {"device": "cuda", "hosts": hosts}
    rs = [_r("compute.matmul", i, hosts[i], tflops_bf16=700.0) for i in range(16)]
    rs[11].status = Status.FAIL
    rs[11].reasons = ["tflops_bf16 = 340.6, expected >= 700 (51% below the bar; …)"]
    nv = _by_node(nodeverdicts.build(rs, [], world))
    n1 = nv["n1"]
    assert n1["status"] == "FAIL" and n1["action"]["id"] == "reset-gpu"
    assert "reset GPU 3 on n1" in n1["action"]["text"]  # rank 11 is n1's fourth rank
    assert [g["status"] for g in n1["gpus"]] == ["PASS", "PASS", "PASS", "FAIL"] + ["PASS"] * 4
    assert nv["n0"]["status"] == "PASS" and len(nv["n0"]["gpus"]) == 8
    for r in rs[8:]:
        r.status = Status.FAIL
    assert _by_node(nodeverdicts.build(rs, [], world))["n1"]["action"]["id"] == "drain"


def test_kubernetes_node_is_named_beside_its_pods() -> None:
    env = [
        CheckResult(
            name="environment",
            status=Status.PASS,
            scope="rank",
            node=f"ml-dev-env-{i}",
            rank=i,
            details={"node_name": f"worker-{7 + i}"},
        )
        for i in range(2)
    ]
    rs = [
        *env,
        _r("memory.copy", 0, "ml-dev-env-0", copy_gbps=5.0),
        _r("memory.copy", 1, "ml-dev-env-1", Status.FAIL, copy_gbps=0.1),
    ]
    rs[-1].reasons = ["copy_gbps = 0.1, expected >= 1"]
    sec = nodeverdicts.build(rs, [], {"device": "cpu", "hosts": ["ml-dev-env-0", "ml-dev-env-1"]})
    nv = _by_node(sec)
    assert set(nv) == {"worker-7", "worker-8"}
    assert (
        nv["worker-8"]["hosts"] == ["ml-dev-env-1"] and nv["worker-8"]["node_from"] == "kubernetes"
    )
    assert nv["worker-8"]["status"] == "FAIL"
    root = ET.fromstring(to_junit(rs, "FAIL", [], nodes=sec))
    cases = {c.get("name"): c for c in root.iter("testcase") if c.get("classname") == "node"}
    assert set(cases) == {"worker-7 (ml-dev-env-0)", "worker-8 (ml-dev-env-1)"}
    assert cases["worker-8 (ml-dev-env-1)"].find("failure") is not None
    assert cases["worker-7 (ml-dev-env-0)"].find("failure") is None


def test_transport_busy_gpu_localize_node_and_link_actions() -> None:
    rs = [
        CheckResult(
            name="fabric.transport",
            status=Status.FAIL,
            scope="rank",
            node="h0",
            rank=0,
            reasons=["rdma mode but NCCL used NET/Socket"],
        ),
        CheckResult(
            name="environment",
            status=Status.ERROR,
            scope="rank",
            node="h1",
            rank=1,
            reasons=["GPU 0: 76.5 GiB held by pid 558"],
            details={"gpu_busy": {"why": "x"}},
        ),
        CheckResult(
            name="fabric.localize",
            status=Status.FAIL,
            scope="node",
            node="h2",
            reasons=["slow node: every pair with it is below 0.5 GB/s"],
        ),
        CheckResult(
            name="fabric.localize",
            status=Status.FAIL,
            scope="link",
            details={"group": "h0 <-> h3"},
            reasons=["slow link: 0.1 GB/s between h0 and h3"],
        ),
        _r("compute.matmul", 3, "h3", tflops_fp32=1.0),
    ]
    sec = nodeverdicts.build(rs, [], CPU)
    nv = _by_node(sec)
    assert nv["h0"]["action"]["id"] == "check-nccl-net" and nv["h0"]["status"] == "FAIL"
    assert nv["h1"]["action"]["id"] == "free-gpu" and nv["h1"]["status"] == "UNKNOWN"
    assert nv["h2"]["action"]["id"] == "check-nic" and nv["h2"]["severity"] == "critical"
    assert nv["h3"]["status"] == "PASS"  # a slow link is the link's, not a node's
    (link,) = sec["links"]
    assert link["nodes"] == ["h0", "h3"] and link["action"]["id"] == "replace-cable"
    assert "between h0 and h3" in link["action"]["text"]


def test_summary_shows_nodes_as_its_first_table_worst_first() -> None:
    rs = [_r("compute.matmul", i, f"h{i}", tflops_fp32=1.0) for i in range(4)]
    rs[3].metrics["tflops_fp32"] = 0.1
    j = judge(rs)
    doc = {
        "verdict": j.verdict.value,
        "reasons": j.reasons,
        "node_verdicts": nodeverdicts.build(j.results, j.findings, CPU),
    }
    md = to_markdown(doc, j.results, [])
    first_table = next(i for i, ln in enumerate(md.splitlines()) if ln.startswith("|"))
    lines = md.splitlines()
    assert lines[first_table - 2] == "## Nodes"
    assert lines[first_table + 2].startswith("| h3 | h3 | FAIL | critical | `drain`")


def test_every_action_has_a_known_severity_and_fills_its_names() -> None:
    for a in nodeverdicts.ACTIONS.values():
        assert a.severity in nodeverdicts.SEVERITIES
        text = nodeverdicts.action_text(
            a.id, node="n", gpu=1, a="x", b="y", check="c", rack="r", racks="r and s"
        )
        assert "{" not in text and "?" not in text


def _quorum(hosts: list[str], bad: list[int]) -> CheckResult:
    """compute.quorum's world result as the check writes it (ranks ``bad`` disagreeing)."""
    return CheckResult(
        name="compute.quorum",
        status=Status.FAIL if bad else Status.PASS,
        scope="world",
        metrics={"disagreeing_ranks": float(len(bad))},
        reasons=[f"rank {r} ({hosts[r]}): matmul checksum differs" for r in bad],
        details={
            "disagreeing": bad,
            "blame": [
                {"rank": r, "action": "drain", "figure": f"rank {r}: silent data corruption"}
                for r in bad
            ],
        },
    )


def test_a_world_result_naming_a_rank_fails_that_node_with_drain_and_passes_the_others() -> None:
    hosts = ["n0"] * 2 + ["n1"] * 2
    world = {"device": "cuda", "hosts": hosts}
    nv = _by_node(nodeverdicts.build([_quorum(hosts, [3])], [], world))
    assert nv["n1"]["status"] == "FAIL" and nv["n1"]["action"]["id"] == "drain"
    assert nv["n1"]["action"]["quarantine"] is True
    (f,) = nv["n1"]["findings"]
    assert f["check"] == "compute.quorum" and f["rank"] == 3 and f["gpu"] == 1
    assert "silent data corruption" in f["figure"]
    # The other node took part and agreed: measured, PASS (not UNKNOWN/recheck).
    assert nv["n0"]["status"] == "PASS" and nv["n0"]["checks"] == ["compute.quorum"]
    # One GPU of two corrupting is still a drain: SDC is never a reset.
    assert [g["status"] for g in nv["n1"]["gpus"]] == ["PASS", "FAIL"]


def test_a_passing_world_result_measures_every_node_a_failing_one_naming_nobody_does_not() -> None:
    world = {"device": "cpu", "hosts": ["h0", "h1"]}
    nv = _by_node(nodeverdicts.build([_quorum(["h0", "h1"], [])], [], world))
    assert {n["status"] for n in nv.values()} == {"PASS"}
    anon = CheckResult(
        name="training.deepspeed", status=Status.FAIL, scope="world", reasons=["loss flat"]
    )
    nv = _by_node(nodeverdicts.build([anon], [], world))
    assert {n["status"] for n in nv.values()} == {"UNKNOWN"}


def test_a_straggler_is_its_gpus_reset_and_keeps_its_own_grade_in_a_failed_run() -> None:
    hosts = ["n0"] * 2 + ["n1"] * 2
    r = CheckResult(
        name="training.deepspeed",
        status=Status.FAIL,  # failed for the stack ratio, not for the straggler
        scope="world",
        reasons=["the DeepSpeed stack reached 40%"],
        details={
            "blame": [
                {"rank": 2, "action": "reset-gpu", "status": "WARN", "figure": "straggler: rank 2"}
            ]
        },
    )
    nv = _by_node(nodeverdicts.build([r], [], {"device": "cuda", "hosts": hosts}))
    assert nv["n1"]["status"] == "WARN" and nv["n1"]["action"]["id"] == "reset-gpu"
    assert "reset GPU 0 on n1" in nv["n1"]["action"]["text"]
    assert nv["n0"]["status"] == "PASS"


def test_node_names_come_from_the_platform_whatever_checks_ran() -> None:
    """No environment check: the names every rank reported at start-up (world.node_names)."""
    pods = ["ml-dev-env-0", "ml-dev-env-1"]
    world = {
        "device": "cpu",
        "hosts": pods,
        "node_names": ["worker-7", "worker-8"],
        "node_sources": ["kubernetes", "kubernetes"],
    }
    nv = _by_node(nodeverdicts.build([_quorum(pods, [1])], [], world))
    assert set(nv) == {"worker-7", "worker-8"}
    assert nv["worker-8"]["hosts"] == ["ml-dev-env-1"]
    assert nv["worker-8"]["node_from"] == "kubernetes" and nv["worker-8"]["status"] == "FAIL"
    slurm = {
        "device": "cpu",
        "hosts": ["c1.cluster", "c2.cluster"],
        "node_names": ["c1", "c2"],
        "node_sources": ["slurm", "slurm"],
    }
    nv = _by_node(nodeverdicts.build([_quorum(["c1", "c2"], [0])], [], slurm))
    assert nv["c1"]["node_from"] == "slurm" and nv["c1"]["status"] == "FAIL"
    plain = {"device": "cpu", "hosts": ["a", "b"], "node_names": ["", ""], "node_sources": ["", ""]}
    nv = _by_node(nodeverdicts.build([_quorum(["a", "b"], [])], [], plain))
    assert set(nv) == {"a", "b"} and nv["a"]["node_from"] == "host"


def test_a_result_naming_its_action_and_gpu_uuid_is_named_by_both() -> None:
    r = CheckResult(
        name="gpu.dcgm",
        status=Status.FAIL,
        scope="node",
        node="n0",
        reasons=["GPU 1: DCGM level 2 memory Fail"],
        details={"gpu": 1, "uuid": "GPU-5c1a", "action": "reset-gpu"},
    )
    ok = CheckResult(
        name="gpu.dcgm",
        status=Status.PASS,
        scope="node",
        node="n0",
        details={"gpu": 0, "uuid": "GPU-0b0b"},
    )
    nv = _by_node(nodeverdicts.build([ok, r], [], {"device": "cuda", "hosts": ["n0", "n0"]}))
    n0 = nv["n0"]
    assert n0["action"]["id"] == "reset-gpu" and "GPU-5c1a" in n0["action"]["text"]
    assert [(g["gpu"], g.get("uuid")) for g in n0["gpus"]] == [(0, "GPU-0b0b"), (1, "GPU-5c1a")]
    assert n0["findings"][0]["uuid"] == "GPU-5c1a"


def test_each_platform_names_its_node_kubernetes_first_then_slurm_else_none() -> None:
    from mlenv.acceptance.run.world import platform_node

    assert platform_node({"MLENV_NODE_NAME": " worker-3 ", "SLURMD_NODENAME": "x"}) == (
        "worker-3",
        "kubernetes",
    )
    assert platform_node({"SLURMD_NODENAME": "c7"}) == ("c7", "slurm")
    assert platform_node({"MLENV_NODE_NAME": "", "HOSTNAME": "h"}) == ("", "")


def test_rank_zero_reads_every_ranks_node_from_the_rendezvous_store() -> None:
    import json

    from mlenv.acceptance.run.world import LaunchEnv, node_names

    class Store:
        def __init__(self, d: dict[str, bytes]) -> None:
            self.d = d

        def check(self, keys: list[str]) -> bool:
            return all(k in self.d for k in keys)

        def get(self, key: str) -> bytes:
            return self.d[key]

    env = LaunchEnv(0, 3, 0, 1, "127.0.0.1", 1, None, None, 0)
    store = Store(
        {
            "mlenv/0/hello/node/0": json.dumps(["worker-a", "kubernetes"]).encode(),
            "mlenv/0/hello/node/1": b"not json",
        }
    )
    assert node_names(store, env) == [("worker-a", "kubernetes"), ("", ""), ("", "")]
