"""The dev loop's read-only helpers: dev-tool URLs from the Routes, and every pod's GPUs.

They back ``mlenv url`` and ``mlenv gpu-info`` (``make vscode`` / ``make jupyter`` /
``make gpu-info``, the upstream ml-dev-env targets).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlenv.cluster.api import ClusterClient
from mlenv.cluster.deploy import worker_pods
from mlenv.cluster.keys import DEVTOOLS_SECRET
from mlenv.cluster.pool import bounded_map
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.errors import InfraError, InputError, did_you_mean

GPU_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,memory.used,memory.total,utilization.gpu",
    "--format=csv,noheader,nounits",
]


@dataclass(frozen=True)
class ToolUrl:
    """Where a dev tool answers and what lets a person in."""

    tool: str
    url: str
    auth: str


def require_tool(cfg: ClusterConfig, tool: str) -> None:
    """InputError unless ``tool`` is a dev tool ``cfg`` enables; the message says in one
    line how to enable it (upstream's configs have no dev_tools, and `make vscode`
    was its habit). Checked before any cluster call."""
    from mlenv.render.workload import DEV_TOOLS, enabled_dev_tools

    if tool not in DEV_TOOLS:
        hint = did_you_mean(tool, DEV_TOOLS)
        raise InputError(f"unknown dev tool {tool!r}{hint}: one of {', '.join(DEV_TOOLS)}")
    if tool not in enabled_dev_tools(cfg):
        where = str(cfg.source) if cfg.source else f"clusters/{cfg.name}.yaml"
        raise InputError(
            f"cluster {cfg.name} has no {tool} (dev tools are off unless enabled): "
            f"add 'dev_tools: {{{tool}: true}}' to {where}, then "
            f"`make deploy-cluster CLUSTER={cfg.name}` (mlenv deploy {cfg.name})"
        )


def tool_url(cfg: ClusterConfig, client: ClusterClient, tool: str) -> ToolUrl:
    """The Route URL of an enabled dev tool, with how it is authenticated (never a secret
    value: the command that reads it)."""
    from mlenv.render.workload import dev_tool_name, oauth

    require_tool(cfg, tool)
    route = dev_tool_name(tool)
    live = client.get("Route", route, cfg.namespace)
    if live is None:
        raise InfraError(
            f"route/{route} not found in {cfg.namespace}: deploy first "
            f"(mlenv deploy {cfg.name}); with dev_tools.auth: token, TensorBoard has "
            f"no Route: mlenv port-forward {cfg.name}"
        )
    host = str((live.get("spec") or {}).get("host", ""))
    if not host:
        raise InfraError(f"route/{route} has no host yet (the router has not admitted it)")
    if oauth(cfg):
        auth = "sign in with your OpenShift account (oauth-proxy)"
    else:
        key = {"vscode": "code-server-password", "jupyter": "jupyter-token"}.get(tool, "")
        auth = (
            f"{'password' if tool == 'vscode' else 'token'}: oc extract "
            f"secret/{DEVTOOLS_SECRET} -n {cfg.namespace} --keys={key} --to=-"
        )
    return ToolUrl(tool, f"https://{host}", auth)


@dataclass(frozen=True)
class GpuRow:
    """One GPU of one pod (or one line saying why a pod could not be read)."""

    pod: str
    index: str = ""
    name: str = ""
    mem_used_mib: str = ""
    mem_total_mib: str = ""
    util_pct: str = ""
    error: str = ""


def gpu_table(
    cfg: ClusterConfig, client: ClusterClient, *, workers: int | None = None
) -> list[GpuRow]:
    """``nvidia-smi`` on every Running worker pod at once, one row per GPU."""
    pods = [p.name for p in worker_pods(cfg, client) if p.phase == "Running"]
    if not pods:
        raise InfraError(f"no running pods of {cfg.name} in {cfg.namespace}: deploy first")

    def ask(pod: str) -> list[GpuRow]:
        try:
            res = client.exec(pod, cfg.namespace, GPU_QUERY, check=False, timeout=30)
        except InfraError as e:
            return [GpuRow(pod, error=str(e).splitlines()[0])]
        if res.returncode != 0:
            why = (res.stderr or res.stdout).strip().splitlines()
            return [
                GpuRow(
                    pod,
                    error=f"nvidia-smi exit {res.returncode}: {why[-1] if why else 'no output'}",
                )
            ]
        rows = []
        for line in res.stdout.splitlines():
            cols = [c.strip() for c in line.split(",")]
            if len(cols) == 5:
                rows.append(GpuRow(pod, *cols))
        return rows or [GpuRow(pod, error="nvidia-smi listed no GPU")]

    return [row for rows in bounded_map(ask, pods, bound=workers) for row in rows]


# upstream's `make gpu-info` also showed the GPU topology and the InfiniBand ports.
TOPO = ["nvidia-smi", "topo", "-m"]
IBSTAT = ["ibstat"]
NOT_FOUND_RC = 127  # exec: the binary is not in the image


@dataclass(frozen=True)
class PodSection:
    """One command's output in one pod (``text``), or why there is none (``note``)."""

    pod: str
    title: str
    text: str = ""
    note: str = ""


def gpu_sections(
    cfg: ClusterConfig, client: ClusterClient, *, workers: int | None = None
) -> list[PodSection]:
    """``nvidia-smi topo -m`` and ``ibstat`` (when the image has it) on every Running
    worker pod, in pod order."""
    pods = [p.name for p in worker_pods(cfg, client) if p.phase == "Running"]

    def ask(pod: str) -> list[PodSection]:
        out = []
        for argv in (TOPO, IBSTAT):
            title = " ".join(argv)
            try:
                res = client.exec(pod, cfg.namespace, argv, check=False, timeout=30)
            except InfraError as e:
                out.append(PodSection(pod, title, note=str(e).splitlines()[0]))
                continue
            if res.returncode == NOT_FOUND_RC and argv is IBSTAT:
                out.append(PodSection(pod, title, note="not in the image (no InfiniBand tools)"))
            elif res.returncode != 0:
                why = (res.stderr or res.stdout).strip().splitlines()
                out.append(
                    PodSection(
                        pod, title, note=f"exit {res.returncode}: {why[-1] if why else 'no output'}"
                    )
                )
            else:
                out.append(PodSection(pod, title, text=res.stdout.rstrip("\n")))
        return out

    return [sec for secs in bounded_map(ask, pods, bound=workers) for sec in secs]
