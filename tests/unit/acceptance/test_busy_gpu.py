"""a GPU another job holds is named before it is measured (recorded nvidia-smi output)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlenv.acceptance.checks import environment as envcheck
from mlenv.acceptance.core.base import Check, RunContext
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging.verdict import judge
from mlenv.acceptance.reports import console
from mlenv.acceptance.run.runner import Runner, busy_reason

DATA = Path(__file__).resolve().parents[2] / "data" / "nvidia-smi"
OURS = {4242, 4243}


def _smi(case: str) -> envcheck.ToolRunner:
    """A tool runner that answers the two nvidia-smi queries from the fixtures of ``case``."""

    def run(argv: list[str], missing: list[str]) -> str | None:
        assert argv[0] == "nvidia-smi"
        kind = "gpus" if argv == envcheck.QUERY_GPUS else "apps"
        assert argv in (envcheck.QUERY_GPUS, envcheck.QUERY_APPS), argv
        return (DATA / f"{case}.{kind}.csv").read_text(encoding="utf-8")

    return run


def _usage(case: str) -> list[envcheck.GpuUse]:
    got = envcheck.gpu_usage(_smi(case), ours=lambda pid: pid in OURS)
    assert got is not None
    return got


def _ctx(device: str = "cuda:0", rank: int = 0) -> RunContext:
    return RunContext(
        rank=rank,
        world_size=1,
        local_rank=rank,
        local_world_size=1,
        node_rank=0,
        nnodes=1,
        host="vm",
        backend="nccl",
        device=device,
    )


def test_gpu_held_by_another_process_is_busy_and_named_in_one_line() -> None:
    g0, g1 = _usage("busy")
    assert g0.busy and g0.other_pids == [558] and g0.own_pids == [4242]
    assert g0.other_mib == 78848 - 512  # memory.used minus what our rank holds
    assert g0.why == "GPU 0: 76.5 GiB of 79.6 GiB held by pid 558; not measured"
    assert not g1.busy and g1.other_mib == 0


def test_our_own_processes_never_make_a_gpu_busy() -> None:
    own = _usage("own-only")
    assert [g.busy for g in own] == [False, False] and own[0].util_pct == 88  # our load, our memory
    # the same GPUs with those PIDs not ours: 30 GiB held by someone else is busy
    other = envcheck.gpu_usage(_smi("own-only"), ours=lambda pid: False)
    assert other is not None and all(g.busy for g in other)


def test_compute_busy_and_unlisted_processes_are_busy_too() -> None:
    hot, idle = _usage("hot")
    assert (
        hot.busy and "97% utilised before the checks started (pid 901)" in hot.why and not idle.busy
    )
    g0, g1 = _usage("container")
    # no process listed (another PID namespace): memory.used still tells, the PID cannot
    assert not g0.busy
    assert (
        g1.busy
        and g1.util_pct is None
        and g1.why == "GPU 1: 40 GiB of 79.6 GiB held by another process; not measured"
    )


def test_thresholds_are_the_documented_ones() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "acceptance.md").read_text(
        encoding="utf-8"
    )
    assert (envcheck.BUSY_MEM_GIB, envcheck.BUSY_MEM_FRAC, envcheck.BUSY_UTIL_PCT) == (
        2.0,
        0.10,
        50.0,
    )
    assert "2 GiB" in doc and "10%" in doc and "50%" in doc
    small = envcheck.GpuUse(index=0, uuid="u", used_mib=1700, total_mib=16384, util_pct=0)
    assert envcheck.judge_use(small, [], lambda pid: False).busy  # 10% of 16 GiB is less than 2 GiB


def test_rank_finds_its_own_gpu_by_uuid_or_visible_devices() -> None:
    gpus = _usage("busy")
    assert envcheck.my_gpu(gpus, 0, own_uuid="5d2b1c7e-8f3a-4c1e-9b6d-2a7e4f0c9d11") is gpus[0]
    assert envcheck.my_gpu(gpus, 0, visible="1,0") is gpus[1]
    assert envcheck.my_gpu(gpus, 0, visible="GPU-5d2b1c7e") is gpus[0]
    assert envcheck.my_gpu(gpus, 1) is gpus[1]
    busy, seen = envcheck.busy_gpu(
        _ctx("cuda:0"), _smi("busy"), lambda pid: pid in OURS, own_uuid=""
    )
    assert busy == gpus[0] and len(seen) == 2
    free, _ = envcheck.busy_gpu(
        _ctx("cuda:1", rank=1), _smi("busy"), lambda pid: pid in OURS, own_uuid=""
    )
    assert free is None
    # CPU ranks and machines without nvidia-smi are never busy
    assert envcheck.busy_gpu(_ctx("cpu"), _smi("busy")) == (None, [])
    missing: list[str] = []
    assert envcheck.gpu_usage(lambda argv, miss: miss.append(argv[0]), missing=missing) is None
    assert missing == ["nvidia-smi"]


def test_environment_result_is_error_with_the_one_line_and_the_rest_is_not_measured() -> None:
    busy = _usage("busy")[0]
    r = envcheck.result(
        _ctx(),
        {"gpu_models": ["NVIDIA H100 80GB HBM3"], "gpu_busy": busy.to_dict(), "missing_tools": []},
    )
    assert r.status == Status.ERROR and r.reasons == [busy.why]
    assert busy_reason([r]) == "GPU 0 (vm) busy"
    j = judge([r])
    assert j.reasons == [
        "ERROR: environment rank 0 (vm): GPU 0: 76.5 GiB of 79.6 GiB held by pid 558; not measured"
    ]


class _Chan:
    """The side channel's store as a dict (world of one: nobody else reads it)."""

    def __init__(self) -> None:
        self.kv: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.kv[key] = value

    def get_now(self, key: str) -> str | None:
        return self.kv.get(key)

    def heartbeats(self, n: int) -> list[int | None]:
        return [1] * n


class _BusyEnv(Check):
    name = "environment"

    def run(self, ctx: RunContext) -> list[CheckResult]:
        return [
            envcheck.result(ctx, {"gpu_models": ["H100"], "gpu_busy": _usage("busy")[0].to_dict()})
        ]


class _Raises(Check):
    """What a check on a busy GPU used to end as: a multi-line CUDA error."""

    name = "compute.matmul"

    def run(self, ctx: RunContext) -> list[CheckResult]:
        raise RuntimeError(
            "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported\n"
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
        )


def _cpu_ctx() -> RunContext:
    return RunContext(
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        nnodes=1,
        host="vm",
        backend="gloo",
        device="cpu",
        deadline_s=10.0,
    )


def test_runner_marks_the_checks_after_a_busy_gpu_not_measured() -> None:
    shown: list[list[CheckResult]] = []
    chan: Any = _Chan()
    out = Runner(_cpu_ctx(), chan, ["vm"], [_BusyEnv, _Raises], emit=shown.append).run()
    assert [(r.name, r.status) for r in out.results] == [
        ("environment", Status.ERROR),
        ("compute.matmul", Status.SKIP),
    ]
    assert out.results[1].reasons == ["not measured: GPU 0 (vm) busy"]
    assert chan.kv["go/0"] == "abort:GPU 0 (vm) busy" and out.notes == []
    assert [len(b) for b in shown] == [
        1,
        1,
    ]  # one emit per check: the live judge sees all ranks at once
    j = judge(out.results)
    assert (
        j.verdict.value == "ERROR"
        and len(j.reasons) == 1
        and "held by pid 558; not measured" in j.reasons[0]
    )


def test_error_reasons_in_the_verdict_block_have_no_traceback() -> None:
    (r,), broke = Runner(_cpu_ctx(), _Chan(), ["vm"], [_Raises]).run_one(_Raises)  # type: ignore[arg-type]
    assert not broke
    assert r.reasons == [
        "compute.matmul check raised on rank 0 (vm): RuntimeError: CUDA error: out of memory"
    ]
    assert "Traceback" in r.details["traceback"] and "CUDA_LAUNCH_BLOCKING" in r.details["message"]
    # even a reason that arrives multi-line (an older results.jsonl) is one line in the block
    old = CheckResult(
        name="memory.copy",
        status=Status.ERROR,
        scope="rank",
        node="vm",
        rank=0,
        reasons=['Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom'],
    )
    doc: dict[str, Any] = {
        "verdict": judge([r, old]).verdict.value,
        "reasons": judge([r, old]).reasons,
    }
    block = console.verdict_block(doc, "/tmp/r")
    reasons = [ln for ln in block.splitlines() if ln.startswith("  - ")]
    assert len(reasons) == 2 and all(len(ln) <= 100 for ln in block.splitlines())
    # a reason runs over onto indented lines; nothing else joins the block
    assert [ln[:4] for ln in block.splitlines()[1:-1] if not ln.startswith("  - ")] == ["    "]
    assert (
        "ERROR: compute.matmul check raised on rank 0 (vm): RuntimeError: CUDA error: out of memory"
        in block
    )
    assert not any('File "' in ln for ln in block.splitlines())
    joined = block.replace("\n    ", " ")  # a reason's continuation back onto its line
    assert "Traceback" not in joined.replace(
        "Traceback (most recent call last): (+2 more line(s) in results.json)", ""
    )
    print(block)


@pytest.mark.parametrize("case", ["busy", "own-only", "hot", "container"])
def test_fixtures_parse_into_two_gpus(case: str) -> None:
    assert [g.index for g in _usage(case)] == [0, 1]
