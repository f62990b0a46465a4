"""gpu.dcgm: NVIDIA's DCGM diagnostics on each node's GPUs.

Where a node has ``dcgmi``, its first rank finds its pod's GPUs (``nvidia-smi`` gives
their UUIDs, ``dcgmi discovery -l`` DCGM's id of each) and runs ``dcgmi diag -r <level>
-i <those ids> -j`` (level 1, seconds, in the quick profile; 2, about two minutes, in
full; 3, about 15 minutes, only when an options file asks for it, with its own
``timeout_s`` and a ``--deadline`` above it, refused up front otherwise). The JSON becomes
one result per GPU (scope ``node``, ``details.gpu`` its index in the pod, ``details.uuid``)
and one per failing NvSwitch, CPU or system test (``details.entity_group``), each graded
by DCGM's own severity with the node verdicts' action in ``details.action``
(:func:`mlenv.acceptance.evidence.dcgm.judge`: persistence mode off is a setting to
change, WARN; a switch failure names the switch). DCGM's ``runtime_error`` is an ERROR
quoting it. Without ``dcgmi`` (a CPU node, an image without DCGM) the node's result is
SKIP with the reason, never PASS.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.metrics import info
from mlenv.acceptance.core.options import CheckOptions, option
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import dcgm

NAME = "gpu.dcgm"
# Level 3 runs for about 15 minutes (NVIDIA's figure): never by accident.
LONG_LEVEL = 3
LONG_LEVEL_MIN_TIMEOUT_S = 900.0
# What the check keeps of its deadline after dcgmi's timeout: to read the JSON and report.
DEADLINE_MARGIN_S = 5.0

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


def run_tool(words: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """A node tool's run (dcgmi, nvidia-smi): output kept, no stdin, never raising on its
    exit code; the checks that read GPUs share it."""
    return subprocess.run(
        words,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _node_result(
    host: str, status: Status, reason: str, details: dict[str, Any]
) -> list[CheckResult]:
    return [
        CheckResult(
            name=NAME, status=status, scope="node", node=host, reasons=[reason], details=details
        )
    ]


def _pod_gpus(
    runner: Runner, timeout_s: float
) -> tuple[list[tuple[int, str]], dict[str, int]] | str:
    """This pod's GPUs (index here, UUID) and DCGM's id of each UUID; the reason when unknown.

    The host engine sees every GPU of the host, the pod only its own: ``dcgmi diag`` runs
    with ``-i`` on the pod's GPUs only, by their DCGM ids (found by UUID), so a GPU of
    another tenant is neither tested nor blamed here.
    """
    try:
        smi = runner(dcgm.GPUS_ARGV, timeout_s)
        mine = dcgm.visible_gpus(smi.stdout) if smi.returncode == 0 else []
        if not mine:
            return f"nvidia-smi named no GPU of this pod (exit {smi.returncode})"
        disc = runner(dcgm.DISCOVERY_ARGV, timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot list this pod's GPUs: {e}"
    ids = dcgm.discovered(disc.stdout)
    missing = [u for _, u in mine if u not in ids]
    if missing:
        return (
            f"the DCGM host engine does not list {', '.join(missing)} (dcgmi discovery -l, "
            f"exit {disc.returncode}): it is not this node's, or DCGM cannot see it"
        )
    return mine, ids


def diagnose(
    host: str,
    level: int,
    timeout_s: float,
    runner: Runner = run_tool,
    which: Callable[[str], str | None] = shutil.which,
) -> list[CheckResult]:
    """Run dcgmi on this node's GPUs and return one result per GPU, and one per NvSwitch,
    CPU or system failure (SKIP/ERROR for the node when it cannot run). ``runner``/``which``
    are injectable: tests feed recorded output."""
    if which("dcgmi") is None:
        return _node_result(
            host,
            Status.SKIP,
            f"dcgmi not found on {host}: DCGM diagnostics not run (install "
            "datacenter-gpu-manager, or run where the GPU operator's DCGM is)",
            {"level": level, "command": " ".join(dcgm.argv_for(level))},
        )
    found = _pod_gpus(runner, min(timeout_s, 60.0))
    if isinstance(found, str):
        return _node_result(
            host,
            Status.ERROR,
            f"DCGM diagnostics not run: {found}",
            {"level": level},
        )
    mine, ids = found
    index_of = {ids[u]: (i, u) for i, u in mine}  # DCGM id → (index here, UUID)
    argv = dcgm.argv_for(level, sorted(index_of))
    base: dict[str, Any] = {"level": level, "command": " ".join(argv)}
    t0 = time.monotonic()
    try:
        p = runner(argv, timeout_s)
    except subprocess.TimeoutExpired:
        return _node_result(
            host,
            Status.ERROR,
            f"dcgmi diag -r {level} did not finish within {timeout_s:g} s",
            base,
        )
    except OSError as e:
        return _node_result(host, Status.ERROR, f"dcgmi could not start: {e}", base)
    took = time.monotonic() - t0
    # dcgmi exits non-zero when a test fails, and still prints the JSON: read it first.
    try:
        diag = dcgm.parse(p.stdout)
    except dcgm.DcgmParseError as e:
        tail = (p.stderr or p.stdout).strip().splitlines()
        return _node_result(
            host,
            Status.ERROR,
            f"dcgmi diag -r {level} gave no diagnostic JSON ({e}; exit {p.returncode}"
            + (f": {tail[-1][:200]}" if tail else "")
            + ")",
            {**base, "stdout": p.stdout[-4000:], "stderr": p.stderr[-4000:]},
        )
    if diag.version:
        base["dcgm_version"] = diag.version
    out: list[CheckResult] = []
    if diag.runtime_error:  # as DCGM wrote it: the operator's clue
        out += _node_result(
            host,
            Status.ERROR,
            f"dcgmi diag -r {level}: DCGM runtime error: {diag.runtime_error}",
            {**base, "runtime_error": diag.runtime_error},
        )
    for ent in diag.entities:
        if ent.group == dcgm.GPU and ent.entity not in index_of:
            continue  # not this pod's (DCGM ran with -i: should not happen)
        status, action = dcgm.judge(ent)
        if ent.group != dcgm.GPU and status not in ("FAIL", "WARN"):
            continue  # a healthy switch or CPU says nothing about the node a GPU does not
        out.append(_entity_result(host, level, ent, status, action, index_of, base, took))
    if not out:
        out += _node_result(host, Status.ERROR, f"dcgmi diag -r {level} named no GPU", base)
    return out


def _entity_result(
    host: str,
    level: int,
    e: dcgm.EntityDiag,
    status: str,
    action: str | None,
    index_of: dict[int, tuple[int, str]],
    base: dict[str, Any],
    took: float,
) -> CheckResult:
    """One entity's result: a GPU named by its index here and UUID, else the switch, CPU or system."""
    details: dict[str, Any] = {**base, "entity_group": e.group}
    if e.group == dcgm.GPU and e.entity is not None:
        idx, uuid = index_of[e.entity]
        details.update({"gpu": idx, "uuid": uuid, "dcgm_id": e.entity})
        who = f"GPU {idx} ({uuid})"
    else:
        details["entity_id"] = e.entity
        who = e.name
    if action is not None:
        details["action"] = action
    bad = e.failed()
    st = {"FAIL": Status.FAIL, "WARN": Status.WARN, "PASS": Status.PASS}.get(status, Status.SKIP)
    if bad:
        reasons = [
            f"{who}: DCGM level {level} "
            + "; ".join(
                f"{t.test} {t.status}" + (f" ({' / '.join(t.texts)[:300]})" if t.texts else "")
                for t in bad
            )
        ]
    elif st == Status.SKIP:
        reasons = [f"{who}: every DCGM level {level} test was skipped"]
    else:
        reasons = []
    details["tests"] = [
        {"category": t.category, "test": t.test, "status": t.status, "messages": t.texts}
        for t in e.tests
    ]
    return CheckResult(
        name=NAME,
        status=st,
        scope="node",
        node=host,
        metrics={
            "tests_run": float(sum(t.status != "SKIP" for t in e.tests)),
            "tests_failed": float(sum(t.status == "FAIL" for t in e.tests)),
        },
        reasons=reasons,
        duration_s=took,
        details=details,
    )


@register
class DcgmCheck(Check):
    """DCGM diagnostics on this node's GPUs (its first rank runs them)."""

    name = NAME
    description = "NVIDIA DCGM diagnostics (dcgmi diag -r 1 quick, 2 full) per GPU; SKIP where dcgmi is absent"
    Options = DcgmOptions
    run_order = 20
    metrics = {"tests_run": info("tests"), "tests_failed": info("tests")}

    @classmethod
    def deadline_problem(cls, options: CheckOptions, deadline_s: float) -> str | None:
        """dcgmi's own timeout must fit in the check's deadline, with room to report."""
        if not isinstance(options, DcgmOptions) or not options.timeout_s:
            return None
        need = options.timeout_s + DEADLINE_MARGIN_S
        if deadline_s < need:
            return (
                f"level {options.level} with timeout_s {options.timeout_s:g} needs a per-check "
                f"deadline of at least {need:g} s, got {deadline_s:g} (pass --deadline {need:g} "
                "or more)"
            )
        return None

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """One result per GPU of this node from its local rank 0; nothing from the other ranks."""
        if ctx.local_rank != 0:
            return []
        o = ctx.options_of(DcgmOptions, self.name)
        timeout = o.timeout_s or max(1.0, ctx.deadline_s - DEADLINE_MARGIN_S)
        return diagnose(ctx.host, o.level, timeout)
