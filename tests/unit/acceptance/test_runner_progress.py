"""Long checks say they are alive: rank 0 prints "still running" lines at an interval,
with the elapsed time and the deadline; a quick check prints none."""

from __future__ import annotations

import time

from mlenv.acceptance.core.base import Check, RunContext
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.run.runner import Runner


class _Sleeper(Check):
    name = "probe.sleep"
    description = "sleeps, then passes"
    seconds = 0.0

    def run(self, ctx: RunContext) -> list[CheckResult]:
        time.sleep(self.seconds)
        return [CheckResult(name=self.name, status=Status.PASS, scope="rank")]


def _runner(said: list[str]) -> Runner:
    ctx = RunContext(
        rank=1,
        world_size=2,
        local_rank=1,
        local_world_size=2,
        node_rank=0,
        nnodes=1,
        host="vm",
        backend="gloo",
        device="cpu",
        deadline_s=5.0,
    )
    # rank 1 keeps run_one away from the store (no heartbeat watch), which is all this needs
    return Runner(
        ctx,
        chan=None,  # type: ignore[arg-type]
        hosts=["vm", "vm"],
        checks=[],
        progress=said.append,
        progress_every_s=0.2,
    )


def test_a_long_check_reports_progress() -> None:
    said: list[str] = []
    slow = type("Slow", (_Sleeper,), {"seconds": 0.75})
    results, broke = _runner(said).run_one(slow)
    assert not broke and results[0].status == Status.PASS
    assert 2 <= len(said) <= 4, said
    assert all(
        s.startswith("… probe.sleep still running (") and "of its 5 s deadline" in s for s in said
    )


def test_a_quick_check_is_silent() -> None:
    said: list[str] = []
    _runner(said).run_one(type("Quick", (_Sleeper,), {"seconds": 0.0}))
    assert said == []
