"""Test-only checks for the framework's fault tests, loaded via MLENV_ACCEPTANCE_PLUGINS.

``probe.allreduce`` does a real all_reduce (so a missing peer blocks it, as a real
collective would), then times a little local work and reports it as ``probe_ms``,
stretched by ``MLENV_FAULT=slow``'s factor. ``pause.sleep`` sleeps on every rank
(``MLENV_PROBE_PAUSE_S``), a window for tests that stop a rank inside a check.
"""

from __future__ import annotations

import time

from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.result import CheckResult, Status


@register
class ProbeAllReduce(Check):
    """all_reduce of ones; the sum must equal the world size."""

    name = "probe.allreduce"

    def run(self, ctx: RunContext) -> list[CheckResult]:
        import torch
        import torch.distributed as dist

        x = torch.ones(1024)
        dist.all_reduce(
            x
        )  # untimed: the first collective's wait for peers is not this rank's speed
        ok = bool((x == ctx.world_size).all())
        a = torch.ones(128, 128)
        samples = []
        for _ in range(5):  # best of 5: other processes on a shared box only ever add time
            t0 = time.perf_counter()
            for _ in range(20):
                a = (a @ a) / 128.0
            samples.append(time.perf_counter() - t0)
        dt = min(samples)
        slow = ctx.fault("slow", self.name)
        if slow:
            dt *= float(slow.get("factor", "4"))
        return [
            CheckResult(
                name=self.name,
                status=Status.PASS if ok else Status.FAIL,
                scope="rank",
                metrics={"probe_ms": 1000 * dt},
            )
        ]


@register
class PauseSleep(Check):
    """Sleeps ``MLENV_PROBE_PAUSE_S`` seconds (default 5) on every rank, then PASS: a window
    in which every rank is inside a check, for tests that stop or signal a rank there."""

    name = "pause.sleep"

    def run(self, ctx: RunContext) -> list[CheckResult]:
        import os

        end = time.monotonic() + float(os.environ.get("MLENV_PROBE_PAUSE_S", "5"))
        while time.monotonic() < end:
            time.sleep(0.1)
        return [CheckResult(name=self.name, status=Status.PASS, scope="rank")]
