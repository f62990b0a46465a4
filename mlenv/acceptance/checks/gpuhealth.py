"""gpu.health: each GPU's state as NVML reports it, read while the GPU is loaded.

Per GPU (one rank-scope result, keyed by the GPU's UUID): the PCIe link's current
generation and width against what the link can reach, ECC uncorrectable errors
(volatile and aggregate), row remapping pending or failed, and the clock event
(throttle) reasons. Per node (its first rank): the GPU count against the ranks the node
runs (or the ``count`` option) and the model against the ``model`` option.

A PCIe link drops to Gen1 when the GPU idles to save power, so the reading is taken
while this rank streams pinned copies to its GPU in a background thread; the GPU's
``gpu_idle`` reason is recorded, and a link read idle is not judged on its generation.
Everything is read with ``nvidia-smi -q -x`` (no privilege). Without ``nvidia-smi`` or a
GPU, the check SKIPs once with the reason.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mlenv.acceptance.checks.gpu import run_tool
from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.metrics import info
from mlenv.acceptance.core.options import CheckOptions, at_least, option
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import nvsmi

NAME = "gpu.health"
NO_GPU = "no CUDA device on this run: GPU health (PCIe link, ECC, row remapping, clocks) is read on GPUs only"

Runner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class HealthOptions(CheckOptions):
    """Options of gpu.health."""

    count: int = option(
        0, help="GPUs each node must have (0: at least as many as the ranks it runs)"
    )
    model: str = option(
        "", help="text every GPU's name must contain, e.g. 'H100 80GB' (empty: not judged)"
    )
    aggregate_ecc_fail: int = option(
        1,
        help="lifetime (aggregate) uncorrectable ECC errors that FAIL a GPU (volatile ones always do)",
    )
    load_s: float = option(
        1.0, help="seconds of pinned copies before the reading (keeps the link up)"
    )
    timeout_s: float = option(30.0, help="seconds nvidia-smi may take")

    def problems(self) -> list[tuple[str, str]]:
        """Non-negative count and load; a positive timeout and ECC bar."""
        return (
            at_least(self, 0, "count", "load_s")
            + at_least(self, 1, "aggregate_ecc_fail")
            + at_least(self, 0.1, "timeout_s")
        )


def judge_gpu(
    g: nvsmi.GpuState, *, host: str, rank: int | None, aggregate_ecc_fail: int = 1
) -> CheckResult:
    """One GPU's result: FAIL for a down-trained link, uncorrectable ECC errors, a row
    remap pending or failed, or a hardware slowdown; WARN for a software thermal slowdown."""
    fail: list[str] = []
    warn: list[str] = []
    idle = "gpu_idle" in g.clock_events_active
    if g.pcie_width_current is not None and g.pcie_width_max is not None:
        if g.pcie_width_current < g.pcie_width_max:
            fail.append(f"PCIe link x{g.pcie_width_current} of x{g.pcie_width_max}")
    if g.pcie_gen_current is not None and g.pcie_gen_max is not None:
        if g.pcie_gen_current < g.pcie_gen_max and not idle:
            fail.append(f"PCIe link Gen{g.pcie_gen_current} of Gen{g.pcie_gen_max} under load")
    if g.ecc_volatile_uncorrectable:
        fail.append(
            f"{g.ecc_volatile_uncorrectable} uncorrectable ECC error(s) since the driver loaded"
        )
    if g.ecc_aggregate_uncorrectable and g.ecc_aggregate_uncorrectable >= aggregate_ecc_fail:
        fail.append(f"{g.ecc_aggregate_uncorrectable} uncorrectable ECC error(s) in its life")
    if g.remap_failure:
        fail.append("row remapping failed (the GPU is to be replaced)")
    if g.remap_pending:
        fail.append("a row remap is pending (reset the GPU)")
    if g.failing_clock_events():
        fail.append("clocks held down by " + ", ".join(g.failing_clock_events()))
    if g.warning_clock_events():
        warn.append("clocks held down by " + ", ".join(g.warning_clock_events()))
    metrics: dict[str, float] = {}
    for k, v in (
        ("pcie_gen_current", g.pcie_gen_current),
        ("pcie_gen_max", g.pcie_gen_max),
        ("pcie_width_current", g.pcie_width_current),
        ("pcie_width_max", g.pcie_width_max),
        ("ecc_volatile_uncorrectable", g.ecc_volatile_uncorrectable),
        ("ecc_aggregate_uncorrectable", g.ecc_aggregate_uncorrectable),
    ):
        if v is not None:
            metrics[k] = float(v)
    if g.remap_pending is not None:
        metrics["remap_pending"] = float(g.remap_pending)
        metrics["remap_failure"] = float(bool(g.remap_failure))
    status = Status.FAIL if fail else Status.WARN if warn else Status.PASS
    return CheckResult(
        name=NAME,
        status=status,
        scope="rank",
        node=host,
        rank=rank,
        metrics=metrics,
        reasons=[f"GPU {g.index} ({g.uuid}): " + "; ".join(fail + warn)] if fail or warn else [],
        details={
            "gpu": g.index,
            "gpu_uuid": g.uuid,
            "gpu_name": g.name,
            "bus_id": g.bus_id,
            "ecc_enabled": g.ecc_enabled,
            "clock_events_active": list(g.clock_events_active),
            "read_idle": idle,
            **({"pcie_gen_device_max": g.pcie_gen_device_max} if g.pcie_gen_device_max else {}),
        },
    )


def judge_node(
    log: nvsmi.NvsmiLog, *, host: str, count: int, model: str, ranks: int = 0
) -> CheckResult:
    """The node's GPU count (exactly ``count``; without it, at least the ``ranks`` the node
    runs) and models (each must contain ``model``)."""
    reasons: list[str] = []
    n = len(log.gpus)
    if count and n != count:
        reasons.append(f"{n} GPU(s) on {host}, expected {count}")
    elif not count and n < ranks:
        reasons.append(f"{n} GPU(s) on {host} for {ranks} rank(s)")
    if model:
        odd = [
            f"GPU {g.index} is {g.name!r}" for g in log.gpus if model.lower() not in g.name.lower()
        ]
        if odd:
            reasons.append(f"expected every GPU to be a {model!r}: " + "; ".join(odd))
    return CheckResult(
        name=NAME,
        status=Status.FAIL if reasons else Status.PASS,
        scope="node",
        node=host,
        metrics={"gpu_count": float(n)},
        reasons=reasons,
        details={
            "expected_count": count or None,
            "ranks": ranks,
            "expected_model": model,
            "driver_version": log.driver_version,
            "gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name} for g in log.gpus],
        },
    )


def pick(log: nvsmi.NvsmiLog, uuid: str, index: int) -> nvsmi.GpuState | None:
    """This rank's GPU: by UUID when torch gave one, else by its index in the list."""
    if uuid:
        return next((g for g in log.gpus if nvsmi.same_uuid(g.uuid, uuid)), None)
    return log.gpus[index] if 0 <= index < len(log.gpus) else None


def read(
    host: str,
    timeout_s: float,
    runner: Runner = run_tool,
    which: Callable[[str], str | None] = shutil.which,
) -> nvsmi.NvsmiLog | CheckResult:
    """``nvidia-smi -q -x`` parsed, or the ERROR/SKIP result that says why it could not be."""
    if which("nvidia-smi") is None:
        return CheckResult(
            name=NAME,
            status=Status.SKIP,
            scope="node",
            node=host,
            reasons=[f"nvidia-smi not found on {host}: GPU health not read"],
        )
    try:
        p = runner(nvsmi.ARGV, timeout_s)
    except subprocess.TimeoutExpired:
        why = f"nvidia-smi -q -x did not finish within {timeout_s:g} s"
    except OSError as e:
        why = f"nvidia-smi could not start: {e}"
    else:
        try:
            return nvsmi.parse(p.stdout)
        except nvsmi.NvsmiParseError as e:
            tail = (p.stderr or "").strip().splitlines()
            why = f"nvidia-smi -q -x gave no readable XML ({e}; exit {p.returncode}" + (
                f": {tail[-1][:200]})" if tail else ")"
            )
    return CheckResult(name=NAME, status=Status.ERROR, scope="node", node=host, reasons=[why])


class _Load:
    """Pinned copies to the GPU in a background thread, so the link is up while it is read."""

    def __init__(self, device: str) -> None:
        import torch

        self._stop = threading.Event()
        self._host = torch.ones(16 * 2**20, dtype=torch.float32).pin_memory()
        self._dev = torch.empty_like(self._host, device=torch.device(device))
        self._device = device
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import torch

        with torch.cuda.device(torch.device(self._device)):
            while not self._stop.is_set():
                self._dev.copy_(self._host, non_blocking=True)
                torch.cuda.synchronize()

    def __enter__(self) -> _Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)


@register
class HealthCheck(Check):
    """NVML's view of this rank's GPU (and, from the node's first rank, the node's GPUs)."""

    name = NAME
    description = (
        "GPU model and count, PCIe gen/width current vs max under load, ECC uncorrectable, "
        "row remapping, clock throttle reasons, GPU UUID (nvidia-smi -q -x)"
    )
    Options = HealthOptions
    run_order = 20
    metrics = {
        "pcie_gen_*": info("PCIe generation"),
        "pcie_width_*": info("PCIe lanes"),
        "ecc_*": info("errors"),
        "remap_*": info("rows"),
        "gpu_count": info("GPUs"),
    }

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """One result per GPU (its rank) and one per node (local rank 0); one SKIP on a CPU run."""
        if not ctx.is_cuda:
            if ctx.rank != 0:
                return []
            return [CheckResult(name=NAME, status=Status.SKIP, scope="world", reasons=[NO_GPU])]
        from mlenv.acceptance.checks.hostcopy import gpu_uuid

        o = ctx.options_of(HealthOptions, NAME)
        t0 = time.perf_counter()
        timeout = min(o.timeout_s, max(1.0, ctx.deadline_s - o.load_s - 5.0))
        with _Load(ctx.device):
            time.sleep(o.load_s)
            got = read(ctx.host, timeout)
        took = time.perf_counter() - t0
        if isinstance(got, CheckResult):  # the node's: no nvidia-smi, or unreadable output
            got.duration_s = took
            return [got] if ctx.local_rank == 0 else []
        out: list[CheckResult] = []
        index = int(ctx.device.split(":", 1)[1]) if ":" in ctx.device else ctx.local_rank
        mine = pick(got, gpu_uuid(ctx.device), index)
        if mine is None:
            out.append(
                CheckResult(
                    name=NAME,
                    status=Status.ERROR,
                    scope="rank",
                    node=ctx.host,
                    rank=ctx.rank,
                    reasons=[f"nvidia-smi lists no GPU with this rank's UUID ({ctx.device})"],
                )
            )
        else:
            r = judge_gpu(
                mine, host=ctx.host, rank=ctx.rank, aggregate_ecc_fail=o.aggregate_ecc_fail
            )
            r.duration_s = took
            out.append(r)
        if ctx.local_rank == 0:
            node = judge_node(
                got, host=ctx.host, count=o.count, model=o.model, ranks=ctx.local_world_size
            )
            node.duration_s = took
            out.append(node)
        return out
