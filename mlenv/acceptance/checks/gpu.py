"""gpu.dcgm: NVIDIA's DCGM diagnostics on each node's GPUs.

Where a node has ``dcgmi``, its first rank runs ``dcgmi diag -r <level> -j`` (level 1,
seconds, in the quick profile; 2, about two minutes, in full; 3, about 15 minutes, only
when an options file asks for it, with its own ``timeout_s``) and turns the JSON into one
result per GPU (scope ``node``, ``details.gpu``): FAIL when a DCGM test failed on it,
WARN when one warned, naming the tests and DCGM's messages. Node verdicts read
``details.gpu`` to say which GPU to reset. Without ``dcgmi`` (a CPU node, an image
without DCGM) the node's result is SKIP with the reason, never PASS.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.options import CheckOptions, option
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import dcgm

NAME = "gpu.dcgm"
# Level 3 runs for about 15 minutes (NVIDIA's figure): never by accident.
LONG_LEVEL = 3
LONG_LEVEL_MIN_TIMEOUT_S = 900.0

Runner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class DcgmOptions(CheckOptions):
    """Options of gpu.dcgm."""

    level: int = option(
        1,
        help="dcgmi diag -r level: 1 quick (seconds), 2 (minutes, the full profile), "
        "3 (~15 min: set timeout_s too)",
    )
    timeout_s: float = option(
        0.0, help="seconds dcgmi may run (0: the check's deadline); level 3 needs >= 900"
    )

    def problems(self) -> list[tuple[str, str]]:
        """Level 1..3; level 3 only with its own timeout."""
        out = []
        if self.level not in (1, 2, 3):
            out.append(("level", f"must be 1, 2 or 3, got {self.level}"))
        if self.timeout_s < 0:
            out.append(("timeout_s", f"must be >= 0, got {self.timeout_s}"))
        if self.level == LONG_LEVEL and self.timeout_s < LONG_LEVEL_MIN_TIMEOUT_S:
            out.append(
                (
                    "timeout_s",
                    f"level 3 runs about 15 minutes: set timeout_s >= {LONG_LEVEL_MIN_TIMEOUT_S:g} "
                    "(and --deadline above it)",
                )
            )
        return out


def _run(words: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        words,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def diagnose(
    host: str,
    level: int,
    timeout_s: float,
    runner: Runner = _run,
    which: Callable[[str], str | None] = shutil.which,
) -> list[CheckResult]:
    """Run dcgmi on this node and return one result per GPU (SKIP/ERROR for the node when
    it cannot run). ``runner``/``which`` are injectable: tests feed recorded output."""
    argv = dcgm.argv_for(level)
    base = {"level": level, "command": " ".join(argv)}
    if which("dcgmi") is None:
        return [
            CheckResult(
                name=NAME,
                status=Status.SKIP,
                scope="node",
                node=host,
                reasons=[
                    f"dcgmi not found on {host}: DCGM diagnostics not run (install "
                    "datacenter-gpu-manager, or run where the GPU operator's DCGM is)"
                ],
                details=base,
            )
        ]
    t0 = time.monotonic()
    try:
        p = runner(argv, timeout_s)
    except subprocess.TimeoutExpired:
        return [
            CheckResult(
                name=NAME,
                status=Status.ERROR,
                scope="node",
                node=host,
                reasons=[f"dcgmi diag -r {level} did not finish within {timeout_s:g} s"],
                details=base,
            )
        ]
    except OSError as e:
        return [
            CheckResult(
                name=NAME,
                status=Status.ERROR,
                scope="node",
                node=host,
                reasons=[f"dcgmi could not start: {e}"],
                details=base,
            )
        ]
    took = time.monotonic() - t0
    # dcgmi exits non-zero when a test fails, and still prints the JSON: read it first.
    try:
        gpus = dcgm.parse(p.stdout)
    except dcgm.DcgmParseError as e:
        tail = (p.stderr or p.stdout).strip().splitlines()
        return [
            CheckResult(
                name=NAME,
                status=Status.ERROR,
                scope="node",
                node=host,
                reasons=[
                    f"dcgmi diag -r {level} gave no diagnostic JSON ({e}; exit {p.returncode}"
                    + (f": {tail[-1][:200]}" if tail else "")
                    + ")"
                ],
                details={**base, "stdout": p.stdout[-4000:], "stderr": p.stderr[-4000:]},
            )
        ]
    out = []
    for g in gpus:
        bad = g.failed()
        status = {"FAIL": Status.FAIL, "WARN": Status.WARN, "PASS": Status.PASS}.get(
            g.status, Status.SKIP
        )
        if bad:
            reasons = [
                f"GPU {g.gpu}: DCGM level {level} "
                + "; ".join(
                    f"{t.test} {t.status}"
                    + (f" ({' / '.join(t.messages)[:300]})" if t.messages else "")
                    for t in bad
                )
            ]
        elif status == Status.SKIP:
            reasons = [f"GPU {g.gpu}: every DCGM level {level} test was skipped"]
        else:
            reasons = []
        ran = [t for t in g.tests if t.status != "SKIP"]
        out.append(
            CheckResult(
                name=NAME,
                status=status,
                scope="node",
                node=host,
                metrics={
                    "tests_run": float(len(ran)),
                    "tests_failed": float(sum(t.status == "FAIL" for t in g.tests)),
                },
                reasons=reasons,
                duration_s=took,
                details={
                    **base,
                    "gpu": g.gpu,
                    "tests": [
                        {
                            "category": t.category,
                            "test": t.test,
                            "status": t.status,
                            "messages": t.messages,
                        }
                        for t in g.tests
                    ],
                },
            )
        )
    if not out:
        out.append(
            CheckResult(
                name=NAME,
                status=Status.ERROR,
                scope="node",
                node=host,
                reasons=[f"dcgmi diag -r {level} named no GPU"],
                details=base,
            )
        )
    return out


@register
class DcgmCheck(Check):
    """DCGM diagnostics on this node's GPUs (its first rank runs them)."""

    name = NAME
    description = "NVIDIA DCGM diagnostics (dcgmi diag -r 1 quick, 2 full) per GPU; SKIP where dcgmi is absent"
    Options = DcgmOptions

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """One result per GPU of this node from its local rank 0; nothing from the other ranks."""
        if ctx.local_rank != 0:
            return []
        o = ctx.options_of(DcgmOptions, self.name)
        timeout = o.timeout_s or max(1.0, ctx.deadline_s - 5.0)
        return diagnose(ctx.host, o.level, timeout)
