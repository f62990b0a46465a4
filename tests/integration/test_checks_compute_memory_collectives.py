"""compute, memory and collectives checks on real gloo worlds (spawned processes, TCP).

Each world is started once per module and inspected by several tests: two ranks for
the normal case and each fault, four ranks on two fake nodes for intra/inter groups.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from checks_harness import WorldSpec, run_world  # noqa: E402

from mlenv.acceptance.evidence.busbw import bus_factor  # noqa: E402

# module-scoped worlds: the whole module runs on one worker (tests/conftest.py)
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("checks")]

COLLECTIVES = [
    f"collectives.{op}"
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
]
SMALL = {
    "collectives": {
        "min_bytes": 1024,
        "max_bytes": 64 * 1024,
        "factor": 4,
        "iters": 3,
        "warmup": 1,
    },
    "compute": {"n": 128, "iters": 3, "warmup": 1},
    "memory": {"bytes": 4 * 2**20, "iters": 3},
}


def _by_name(records: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    out = {}
    for rank, rec in enumerate(records):
        assert rec["error"] is None, f"rank {rank}: {rec['error']}"
        for r in rec["results"]:
            out[(r["name"], r["scope"], rank)] = r
    return out


@pytest.fixture(scope="module")
def normal(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, int], dict[str, Any]]:
    spec = WorldSpec(
        2, ["compute.matmul", "compute.quorum", "memory.copy", *COLLECTIVES], options=SMALL
    )
    return _by_name(run_world(spec, tmp_path_factory.mktemp("normal")))


def test_matmul_and_copy_report_positive_throughput_per_rank(normal: dict[Any, Any]) -> None:
    for rank in (0, 1):
        mm = normal[("compute.matmul", "rank", rank)]
        assert mm["status"] == "PASS" and mm["rank"] == rank and mm["node"] == "node0"
        assert set(mm["metrics"]) == {"tflops_fp32"} and mm["metrics"]["tflops_fp32"] > 0
        assert mm["details"]["shape"] == [128, 128, 128]
        assert mm["details"]["timing"]["fp32"]["method"] == "perf_counter"
        cp = normal[("memory.copy", "rank", rank)]
        assert cp["metrics"]["copy_gbps"] > 0 and cp["details"]["bytes"] == 4 * 2**20


def test_quorum_passes_when_every_rank_agrees(normal: dict[Any, Any]) -> None:
    q = normal[("compute.quorum", "world", 0)]
    assert q["status"] == "PASS" and q["metrics"] == {"disagreeing_ranks": 0.0}
    assert len(set(q["details"]["checksums"].values())) == 1
    assert q["details"]["checksums"]["0"] == q["details"]["reference"]
    assert ("compute.quorum", "world", 1) not in normal  # returned by rank 0 only


@pytest.mark.parametrize("name", COLLECTIVES)
def test_collectives_data_check_passes_and_busbw_follows_the_formula(
    normal: dict[Any, Any], name: str
) -> None:
    r = normal[(name, "world", 0)]
    assert (name, "world", 1) not in normal
    assert r["status"] == "PASS", r["reasons"]
    rows = r["details"]["rows"]
    assert [row["size"] for row in rows] == [1024, 4096, 16384, 65536]
    op = name.split(".", 1)[1]
    for row in rows:
        assert row["wrong"] == 0
        assert row["algbw_gbps"] == pytest.approx(row["size"] / (row["time_us"] / 1e6) / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus_factor(op, 2))
    m = r["metrics"]
    assert m["wrong_elements"] == 0.0
    assert m["busbw_gbps_large"] == pytest.approx(rows[-1]["busbw_gbps"])
    assert m["busbw_gbps_max"] == pytest.approx(max(x["busbw_gbps"] for x in rows))
    assert m["busbw_gbps_max"] > 0
    assert len(r["details"]["table"].splitlines()) == 3 + len(rows)


@pytest.fixture(scope="module")
def corrupt_compute(tmp_path_factory: pytest.TempPathFactory) -> dict[Any, Any]:
    spec = WorldSpec(
        2,
        ["compute.matmul", "compute.quorum", "collectives.all_reduce"],
        options=SMALL,
        env={"MLENV_FAULT": "corrupt:rank=1;slow:rank=1,factor=4"},
    )
    return _by_name(run_world(spec, tmp_path_factory.mktemp("corrupt")))


def test_quorum_names_the_corrupted_rank_and_its_host(corrupt_compute: dict[Any, Any]) -> None:
    q = corrupt_compute[("compute.quorum", "world", 0)]
    assert q["status"] == "FAIL" and q["metrics"]["disagreeing_ranks"] == 1.0
    assert q["details"]["disagreeing"] == [1]
    (reason,) = q["reasons"]
    assert reason.startswith("rank 1 (node0)") and "silent data corruption" in reason


@pytest.mark.serial  # one rank's rate against the other's
def test_slow_rank_is_a_real_throughput_outlier(corrupt_compute: dict[Any, Any]) -> None:
    fast = corrupt_compute[("compute.matmul", "rank", 0)]["metrics"]["tflops_fp32"]
    slow = corrupt_compute[("compute.matmul", "rank", 1)]
    assert slow["details"]["slow_fault_factor"] == 4.0
    assert slow["metrics"]["tflops_fp32"] < fast / 2


def test_bare_corrupt_fault_leaves_collectives_alone(corrupt_compute: dict[Any, Any]) -> None:
    r = corrupt_compute[("collectives.all_reduce", "world", 0)]
    assert r["status"] == "PASS" and r["metrics"]["wrong_elements"] == 0.0


def test_collectives_count_wrong_elements_of_a_bad_contribution(tmp_path: Path) -> None:
    spec = WorldSpec(
        2,
        ["compute.quorum", *COLLECTIVES],
        options=SMALL,
        env={"MLENV_FAULT": "corrupt:rank=1,check=collectives"},
    )
    got = _by_name(run_world(spec, tmp_path))
    assert got[("compute.quorum", "world", 0)]["status"] == "PASS"
    # rank 1's first element is off by one: it lands in one output element on each of
    # the two ranks (all_reduce, all_gather), or in one rank's output only
    # (reduce_scatter: rank 0's chunk; all_to_all: rank 0 receives rank 1's chunk 0).
    expect = {"all_reduce": 2, "all_gather": 2, "reduce_scatter": 1, "all_to_all": 1}
    for op, per_size in expect.items():
        r = got[(f"collectives.{op}", "world", 0)]
        assert r["status"] == "FAIL", op
        assert [row["wrong"] for row in r["details"]["rows"]] == [per_size] * 4, op
        assert r["metrics"]["wrong_elements"] == 4 * per_size
        assert r["reasons"][0].endswith(f"{per_size} wrong elements at 1024 bytes")
        assert f"{per_size:>7}" in r["details"]["table"].splitlines()[3][-8:]
    # broadcast only carries the root's data: a non-root's input is overwritten
    assert got[("collectives.broadcast", "world", 0)]["status"] == "PASS"


def test_two_nodes_measure_world_intra_and_inter_groups(tmp_path: Path) -> None:
    spec = WorldSpec(
        4,
        ["collectives.all_reduce"],
        nnodes=2,
        options={
            "collectives": {
                "min_bytes": 4096,
                "max_bytes": 16384,
                "factor": 4,
                "iters": 2,
                "warmup": 1,
            }
        },
    )
    got = _by_name(run_world(spec, tmp_path))
    keys = sorted((scope, rank) for (_, scope, rank) in got)
    # world from rank 0; one intra group per node (leaders 0 and 2); one inter group
    # per local rank (leaders 0 and 1)
    assert keys == [("inter", 0), ("inter", 1), ("intra", 0), ("intra", 2), ("world", 0)]
    assert got[("collectives.all_reduce", "intra", 2)]["node"] == "node1"
    assert got[("collectives.all_reduce", "inter", 1)]["details"]["ranks"] == [1, 3]
    for r in got.values():
        assert r["status"] == "PASS" and r["metrics"]["busbw_gbps_max"] > 0
    world = got[("collectives.all_reduce", "world", 0)]["details"]["rows"][0]
    assert world["busbw_gbps"] == pytest.approx(world["algbw_gbps"] * 2 * 3 / 4)


@pytest.mark.serial  # elapsed within seconds of a 3 s deadline
def test_a_collective_past_the_deadline_raises_instead_of_hanging(tmp_path: Path) -> None:
    deadline = 3.0
    spec = WorldSpec(
        2, ["collectives.all_reduce"], options=SMALL, deadline_s=deadline, hang_ranks=(1,)
    )
    t0 = time.monotonic()
    records = run_world(spec, tmp_path, timeout_s=60)
    err = records[0]["error"]
    assert err is not None and records[0]["results"] == []
    assert "timed out" in err.lower() or "timeout" in err.lower(), err
    assert deadline <= records[0]["elapsed_s"] < deadline + 10
    assert time.monotonic() - t0 < 60


def test_a_world_of_one_skips_collectives_but_still_computes(tmp_path: Path) -> None:
    got = _by_name(
        run_world(
            WorldSpec(1, ["compute.quorum", "collectives.all_reduce"], options=SMALL), tmp_path
        )
    )
    assert got[("compute.quorum", "world", 0)]["status"] == "PASS"
    r = got[("collectives.all_reduce", "world", 0)]
    assert r["status"] == "SKIP" and r["metrics"] == {} and "one rank" in r["reasons"][0]


@pytest.mark.serial  # sizes chosen from measured rates against a 4 s deadline
def test_sweep_stops_early_rather_than_overrunning_the_deadline(tmp_path: Path) -> None:
    deadline = 4.0
    opts = {
        "collectives": {
            "min_bytes": 2**20,
            "max_bytes": 2**30,
            "factor": 4,
            "iters": 20,
            "warmup": 2,
        }
    }
    (rank0, rank1) = run_world(
        WorldSpec(2, ["collectives.all_reduce"], options=opts, deadline_s=deadline), tmp_path
    )
    assert rank0["error"] is None and rank1["error"] is None
    (r,) = rank0["results"]
    assert r["status"] == "WARN" and r["metrics"]["wrong_elements"] == 0.0
    sizes = [row["size"] for row in r["details"]["rows"]]
    assert sizes[0] == 2**20 and sizes[-1] < 2**30
    assert r["reasons"][-1].endswith("would not finish within its share of the 4 s deadline")
    assert f"stopped before {sizes[-1] * 4} bytes" in r["reasons"][-1]
    assert rank0["elapsed_s"] < deadline
