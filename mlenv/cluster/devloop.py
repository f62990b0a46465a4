"""The dev loop's read-only helpers: dev-tool URLs from the Routes, and every pod's GPUs.

They back ``mlenv url`` and ``mlenv gpu-info`` (``make vscode`` / ``make jupyter`` /
``make gpu-info``, the upstream ml-dev-env targets).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from mlenv.cluster.api import ClusterClient
from mlenv.cluster.keys import DEVTOOLS_SECRET
from mlenv.cluster.pods import worker_pods
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


# upstream's `make gpu-info` also showed the GPU topology and the InfiniBand ports.
TOPO = ["nvidia-smi", "topo", "-m"]
IBSTAT = ["ibstat"]
NOT_FOUND_RC = 127  # exec: the binary is not in the image
# The three commands, in this order, in one exec per pod (three execs per pod were
# three client processes and API streams each: 3.5x kubectl's one exec at 32 pods).
GPU_COMMANDS = (GPU_QUERY, TOPO, IBSTAT)
# Runs each command with its errors in its output, then a line "MARK STATUS" that ends
# its section; MARK is $1, a fresh random word per call, so no command's output can end
# a section early. Every command is fixed text here: nothing of the caller's is in it.
GPU_SCRIPT = 'm="$1"\n' + "".join(
    f'{" ".join(argv)} 2>&1; printf \'\\n%s %s\\n\' "$m" "$?"\n' for argv in GPU_COMMANDS
)


@dataclass(frozen=True)
class PodSection:
    """One command's output in one pod (``text``), or why there is none (``note``)."""

    pod: str
    title: str
    text: str = ""
    note: str = ""


@dataclass(frozen=True)
class CommandOutput:
    """What one of :data:`GPU_COMMANDS` printed (stdout and stderr together) and its status."""

    returncode: int
    output: str


def split_sections(stdout: str, mark: str, count: int) -> list[CommandOutput] | None:
    """The outputs of :data:`GPU_SCRIPT`'s commands, in order; None unless exactly
    ``count`` sections, each ended by its ``MARK STATUS`` line, came back."""
    found: list[CommandOutput] = []
    lines: list[str] = []
    for line in stdout.split("\n"):
        head, _, rc = line.partition(" ")
        if head == mark and rc.isdigit():
            # the text before the printf's leading newline: the command's output, exactly
            found.append(CommandOutput(int(rc), "\n".join(lines)))
            lines = []
        else:
            lines.append(line)
    return found if len(found) == count else None


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no output"


def _gpu_rows(pod: str, out: CommandOutput) -> list[GpuRow]:
    if out.returncode != 0:
        return [GpuRow(pod, error=f"nvidia-smi exit {out.returncode}: {_last_line(out.output)}")]
    rows = []
    for line in out.output.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 5:
            rows.append(GpuRow(pod, *cols))
    return rows or [GpuRow(pod, error="nvidia-smi listed no GPU")]


def _section(pod: str, argv: list[str], out: CommandOutput) -> PodSection:
    title = " ".join(argv)
    if out.returncode == NOT_FOUND_RC and argv is IBSTAT:
        return PodSection(pod, title, note="not in the image (no InfiniBand tools)")
    if out.returncode != 0:
        return PodSection(pod, title, note=f"exit {out.returncode}: {_last_line(out.output)}")
    return PodSection(pod, title, text=out.output.rstrip("\n"))


def gpu_report(
    cfg: ClusterConfig, client: ClusterClient, *, workers: int | None = None
) -> tuple[list[GpuRow], list[PodSection]]:
    """``nvidia-smi`` on every Running worker pod at once, one row per GPU, and each pod's
    ``nvidia-smi topo -m`` and ``ibstat`` (when the image has it), in pod order: one read
    of the pods and one exec per pod (:data:`GPU_SCRIPT`) through the bounded pool."""
    pods = [p.name for p in worker_pods(cfg, client) if p.phase == "Running"]
    if not pods:
        raise InfraError(f"no running pods of {cfg.name} in {cfg.namespace}: deploy first")

    def ask(pod: str) -> tuple[list[GpuRow], list[PodSection]]:
        mark = f"mlenv-{secrets.token_hex(8)}"
        argv = ["sh", "-c", GPU_SCRIPT, "sh", mark]
        try:
            res = client.exec(pod, cfg.namespace, argv, check=False, timeout=60)
        except InfraError as e:
            why = str(e).splitlines()[0]
        else:
            outs = split_sections(res.stdout, mark, len(GPU_COMMANDS))
            if outs is not None:
                query, topo, ibstat = outs
                return _gpu_rows(pod, query), [
                    _section(pod, TOPO, topo),
                    _section(pod, IBSTAT, ibstat),
                ]
            # sh itself did not run the script (no sh in the image, the exec refused)
            why = f"exit {res.returncode}: {_last_line(res.stderr or res.stdout)}"
        return [GpuRow(pod, error=why)], [
            PodSection(pod, " ".join(argv), note=why) for argv in (TOPO, IBSTAT)
        ]

    rows: list[GpuRow] = []
    sections: list[PodSection] = []
    for pod_rows, pod_sections in bounded_map(ask, pods, bound=workers):
        rows += pod_rows
        sections += pod_sections
    return rows, sections
