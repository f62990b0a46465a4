"""The ``environment`` check: what this rank runs on, recorded for the sign-off report.

Host, torch / CUDA / NCCL / DeepSpeed versions, driver, GPU models and count, NCCL_*
settings, and where present ``nvidia-smi topo -m`` and ``ibv_devinfo`` output. A missing
tool is recorded in ``missing_tools``, never fatal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import metadata
from typing import Any

from mlenv.acceptance.base import Check, RunContext, register
from mlenv.acceptance.result import CheckResult, Status

TOOL_TIMEOUT_S = 20.0


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
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
            "deepspeed": _pkg_version("deepspeed")}


def run_tool(argv: list[str], missing: list[str]) -> str | None:
    """Output of a diagnostic tool, or None (its name added to ``missing``) when absent or failing."""
    if shutil.which(argv[0]) is None:
        missing.append(argv[0])
        return None
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        missing.append(f"{argv[0]} ({type(e).__name__})")
        return None
    if p.returncode != 0:
        missing.append(f"{argv[0]} (exit {p.returncode}: {p.stderr.strip()[:200]})")
        return None
    return p.stdout


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
    # Only one rank per node runs the node-wide tools: same answer, less noise.
    if ctx.local_rank == 0:
        smi = run_tool(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], missing)
        d["driver"] = smi.splitlines()[0].strip() if smi and smi.strip() else None
        d["nvidia_smi_topo"] = run_tool(["nvidia-smi", "topo", "-m"], missing) if smi is not None else None
        d["ibv_devinfo"] = run_tool(["ibv_devinfo"], missing)
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

    def run(self, ctx: RunContext) -> list[CheckResult]:
        """One rank-scope result per rank; metrics: gpu_count."""
        d = collect(ctx)
        reasons = []
        if d["missing_tools"]:
            reasons.append("tools missing (recorded, not fatal): " + ", ".join(d["missing_tools"]))
        return [CheckResult(name=self.name, status=Status.PASS, scope="rank", node=ctx.host, rank=ctx.rank,
                            metrics={"gpu_count": float(len(d["gpu_models"]))}, reasons=reasons, details=d)]
