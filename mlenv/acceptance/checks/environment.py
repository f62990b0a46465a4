"""The ``environment`` check: what this rank runs on, recorded for the sign-off report.

Host, torch / CUDA / NCCL / DeepSpeed versions, driver, GPU models and count, NCCL_*
settings, and where present ``nvidia-smi topo -m`` and ``ibv_devinfo`` output. A missing
tool is recorded in ``missing_tools``, never fatal.

On a GPU rank it also looks at this rank's GPU *before* anything is measured on it:
memory other processes hold (with their PIDs where nvidia-smi can see them) and
utilisation. A GPU another job holds or keeps busy (thresholds below, documented in
docs/acceptance.md) makes this result ERROR with one line ("GPU 0: 77 GiB held by pid
558; not measured") and ``details['gpu_busy']``; the runner then marks the remaining
checks "not measured" instead of letting them fail with CUDA/NCCL stacks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from mlenv.acceptance.core.base import Check, RunContext, register
from mlenv.acceptance.core.metrics import info
from mlenv.acceptance.core.options import CheckOptions, option
from mlenv.acceptance.core.result import CheckResult, Status

TOOL_TIMEOUT_S = 20.0

# A GPU is busy when processes other than ours hold more than BUSY_MEM_GIB or more than
# BUSY_MEM_FRAC of its memory (whichever is less: 2 GiB on an 80 GB H100, where our own
# CUDA context is ~0.5 GiB and a real job holds tens), or when it is at least
# BUSY_UTIL_PCT% utilised before we have launched any work on it.
BUSY_MEM_GIB = 2.0
BUSY_MEM_FRAC = 0.10
BUSY_UTIL_PCT = 50.0


@dataclass(frozen=True)
class EnvironmentOptions(CheckOptions):
    """When this rank's GPU counts as held by another job (the thresholds above)."""

    busy_mem_gib: float = option(
        BUSY_MEM_GIB, help="GiB other processes may hold on the GPU before it is busy"
    )
    busy_mem_frac: float = option(
        BUSY_MEM_FRAC,
        help="fraction of its memory other processes may hold "
        "(the smaller of the two limits counts)",
    )
    busy_util_pct: float = option(
        BUSY_UTIL_PCT,
        help="utilisation (%) before any check ran that makes it busy (above 100: never)",
    )

    def problems(self) -> list[tuple[str, str]]:
        """Positive limits; a fraction is at most 1."""
        out = [
            (k, f"must be > 0, got {getattr(self, k)}")
            for k in ("busy_mem_gib", "busy_mem_frac", "busy_util_pct")
            if getattr(self, k) <= 0
        ]
        if self.busy_mem_frac > 1:
            out.append(("busy_mem_frac", f"must be at most 1, got {self.busy_mem_frac}"))
        return out


DEFAULT_LIMITS = EnvironmentOptions()
QUERY_GPUS = [
    "nvidia-smi",
    "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu",
    "--format=csv,noheader,nounits",
]
QUERY_APPS = [
    "nvidia-smi",
    "--query-compute-apps=pid,used_memory,gpu_uuid",
    "--format=csv,noheader,nounits",
]

ToolRunner = Callable[[list[str], list[str]], "str | None"]


@dataclass
class GpuUse:
    """One GPU as nvidia-smi saw it before we measured, and whether another job holds it."""

    index: int
    uuid: str
    used_mib: float
    total_mib: float
    util_pct: float | None
    other_mib: float = 0.0  # memory.used minus what our own processes hold
    other_pids: list[int] = field(default_factory=list)
    own_pids: list[int] = field(default_factory=list)
    busy: bool = False
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _num(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_gpus(text: str) -> list[GpuUse]:
    """Rows of ``--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu`` (csv, no units)."""
    out: list[GpuUse] = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 5 or not cols[0].isdigit():
            continue
        used, total = _num(cols[2]), _num(cols[3])
        if used is None or total is None:
            continue
        out.append(
            GpuUse(
                index=int(cols[0]),
                uuid=cols[1],
                used_mib=used,
                total_mib=total,
                util_pct=_num(cols[4]),
            )
        )
    return out


def parse_apps(text: str) -> list[tuple[int, float, str]]:
    """(pid, used MiB, GPU uuid) rows of ``--query-compute-apps=pid,used_memory,gpu_uuid``."""
    out: list[tuple[int, float, str]] = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 3 or not cols[0].isdigit():
            continue
        out.append((int(cols[0]), _num(cols[1]) or 0.0, cols[2]))
    return out


def is_our_process(pid: int) -> bool:
    """True for this process and for sibling ranks (``mlenv.acceptance`` in their command line).

    A PID from another PID namespace (a container sees the host's) is not in /proc
    here and counts as another job's: we cannot tell, and saying so is the safe side.
    """
    if pid == os.getpid():
        return True
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"mlenv.acceptance" in cmd or b"mlenv/acceptance" in cmd


def _gib(mib: float) -> str:
    if mib < 1024:
        return f"{mib:.0f} MiB"
    return f"{mib / 1024:.1f}".removesuffix(".0") + " GiB"


def judge_use(
    g: GpuUse,
    apps: list[tuple[int, float, str]],
    ours: Callable[[int], bool],
    limits: EnvironmentOptions = DEFAULT_LIMITS,
) -> GpuUse:
    """Fill ``other_*`` and ``busy`` of ``g`` from the compute apps on it."""
    mine = [(pid, mib) for pid, mib, uuid in apps if uuid == g.uuid and ours(pid)]
    others = [(pid, mib) for pid, mib, uuid in apps if uuid == g.uuid and not ours(pid)]
    g.own_pids = sorted(p for p, _ in mine)
    g.other_pids = sorted(p for p, _ in others)
    # memory.used is the truth (it also counts processes nvidia-smi cannot list from a
    # container); subtract what our own processes are listed with.
    g.other_mib = max(0.0, g.used_mib - sum(m for _, m in mine))
    limit = min(limits.busy_mem_gib * 1024, limits.busy_mem_frac * g.total_mib)
    held = g.other_mib > limit
    # Utilisation is per GPU, not per process: when every process listed on it is ours
    # (a check that just ran), the load is ours too and the GPU is not busy.
    only_ours = bool(mine) and not others
    hot = g.util_pct is not None and g.util_pct >= limits.busy_util_pct and not only_ours
    if held or hot:
        g.busy = True
        pids = ", ".join(str(p) for p in g.other_pids)
        who = (
            f"pid {pids}"
            if len(g.other_pids) == 1
            else (f"pids {pids}" if pids else "another process")
        )
        parts = []
        if held:
            parts.append(f"{_gib(g.other_mib)} of {_gib(g.total_mib)} held by {who}")
        if hot:
            parts.append(
                f"{g.util_pct:.0f}% utilised before the checks started"
                + ("" if held or not g.other_pids else f" ({who})")
            )
        g.why = f"GPU {g.index}: {'; '.join(parts)}; not measured"
    return g


def gpu_usage(
    runner: ToolRunner | None = None,
    ours: Callable[[int], bool] = is_our_process,
    missing: list[str] | None = None,
    limits: EnvironmentOptions = DEFAULT_LIMITS,
) -> list[GpuUse] | None:
    """Every GPU's use by other processes, or None when nvidia-smi is absent or fails.

    ``runner`` runs a command and returns its stdout (tests feed recorded output).
    """
    run = runner or run_tool
    miss = missing if missing is not None else []
    text = run(QUERY_GPUS, miss)
    if text is None:
        return None
    apps = parse_apps(run(QUERY_APPS, miss) or "")
    return [judge_use(g, apps, ours, limits) for g in parse_gpus(text)]


def my_gpu(
    gpus: list[GpuUse], local_device: int, own_uuid: str | None = None, visible: str | None = None
) -> GpuUse | None:
    """The entry for this rank's device: by UUID when torch gives one, else through
    ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs), else the local index itself."""
    if own_uuid:
        key = own_uuid.lower().removeprefix("gpu-")
        for g in gpus:
            if g.uuid.lower().removeprefix("gpu-") == key:
                return g
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if 0 <= local_device < len(ids):
            want = ids[local_device]
            for g in gpus:
                if (want.isdigit() and g.index == int(want)) or (
                    not want.isdigit() and g.uuid.startswith(want)
                ):
                    return g
            return None
    return next((g for g in gpus if g.index == local_device), None)


def _pkg_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, Any]:
    """torch, CUDA, NCCL and DeepSpeed versions (DeepSpeed from metadata: importing it is slow)."""
    import torch

    nccl: str | None = None
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:  # no NCCL in this build
            nccl = None
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "deepspeed": _pkg_version("deepspeed"),
    }


def run_tool(argv: list[str], missing: list[str]) -> str | None:
    """Output of a diagnostic tool, or None (its name added to ``missing``) when absent or failing."""
    if shutil.which(argv[0]) is None:
        missing.append(argv[0])
        return None
    try:
        p = subprocess.run(
            argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        missing.append(f"{argv[0]} ({type(e).__name__})")
        return None
    if p.returncode != 0:
        missing.append(f"{argv[0]} (exit {p.returncode}: {p.stderr.strip()[:200]})")
        return None
    return p.stdout


def _torch_uuid(device: str) -> str | None:
    try:
        import torch

        return str(torch.cuda.get_device_properties(torch.device(device)).uuid)
    except Exception:  # older torch without .uuid: fall back to the index
        return None


def busy_gpu(
    ctx: RunContext,
    runner: ToolRunner | None = None,
    ours: Callable[[int], bool] = is_our_process,
    own_uuid: str | None = None,
    missing: list[str] | None = None,
) -> tuple[GpuUse | None, list[GpuUse]]:
    """(this rank's GPU if another job holds it, every GPU seen): only on a CUDA rank."""
    if not ctx.is_cuda:
        return None, []
    gpus = gpu_usage(runner, ours, missing, ctx.options_of(EnvironmentOptions, "environment"))
    if not gpus:
        return None, []
    index = int(ctx.device.split(":", 1)[1]) if ":" in ctx.device else ctx.local_rank
    mine = my_gpu(
        gpus,
        index,
        own_uuid if own_uuid is not None else _torch_uuid(ctx.device),
        os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    return (mine if mine is not None and mine.busy else None), gpus


def collect(ctx: RunContext) -> dict[str, Any]:
    """Everything the check records for this rank, as the result's details."""
    import torch

    missing: list[str] = []
    d: dict[str, Any] = {"host": ctx.host, **versions(), "python": _python_version()}
    gpus: list[str] = []
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    d["gpu_models"] = gpus
    d["nccl_env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
    # The Kubernetes Node this pod runs on (downward API spec.nodeName): node verdicts name it.
    node_name = os.environ.get("MLENV_NODE_NAME", "").strip()
    if node_name:
        d["node_name"] = node_name
    # Only one rank per node runs the node-wide tools: same answer, less noise.
    if ctx.local_rank == 0:
        smi = run_tool(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], missing
        )
        d["driver"] = smi.splitlines()[0].strip() if smi and smi.strip() else None
        d["nvidia_smi_topo"] = (
            run_tool(["nvidia-smi", "topo", "-m"], missing) if smi is not None else None
        )
        d["ibv_devinfo"] = run_tool(["ibv_devinfo"], missing)
    busy, seen = busy_gpu(ctx, missing=missing)
    if seen:
        d["gpu_use"] = [g.to_dict() for g in seen]
    if busy is not None:
        d["gpu_busy"] = busy.to_dict()
    d["missing_tools"] = sorted(set(missing))
    return d


def _python_version() -> str:
    import platform

    return platform.python_version()


@register
class Environment(Check):
    """Record the software and hardware this rank runs on."""

    name = "environment"
    description = "versions, GPUs, driver, NCCL settings, topology and RDMA devices"
    Options = EnvironmentOptions
    run_order = 10
    metrics = {"gpu_count": info("GPUs")}

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """One rank-scope result per rank; metrics: gpu_count. ERROR when this rank's GPU is busy."""
        return [result(ctx, collect(ctx))]


def result(ctx: RunContext, d: dict[str, Any]) -> CheckResult:
    """The environment result for ``d`` (what :func:`collect` recorded)."""
    reasons: list[str] = []
    status = Status.PASS
    busy = d.get("gpu_busy")
    if isinstance(busy, dict):
        # ERROR, not FAIL: the node was not judged, another job was in the way.
        status = Status.ERROR
        reasons.append(str(busy["why"]))
    if d.get("missing_tools"):
        reasons.append("tools missing (recorded, not fatal): " + ", ".join(d["missing_tools"]))
    return CheckResult(
        name="environment",
        status=status,
        scope="rank",
        node=ctx.host,
        rank=ctx.rank,
        metrics={"gpu_count": float(len(d.get("gpu_models", [])))},
        reasons=reasons,
        details=d,
    )
