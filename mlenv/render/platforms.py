"""Render the non-Kubernetes platforms: Slurm batch scripts and the hosts plan (pure).

``platform: slurm`` → ``slurm/<cluster>/acceptance.sbatch`` and ``train.sbatch``;
``platform: hosts`` → ``hosts/<cluster>/hostfile`` (DeepSpeed's format) and
``launch-plan.json``. With ``acceptance.schedule`` also ``recheck.sbatch`` (the
acceptance job queueing its own next run) or ``acceptance.cron`` (the control host's line). The network keys become the same NCCL variables as in a pod
(:func:`mlenv.render.env.nccl_env`), in the effective mode: RDMA when the config enables it.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlenv.config.model import PLATFORM_TRAITS, Cluster, Mode, Slurm
from mlenv.config.rules import parse_quantity, slurm_minutes
from mlenv.contract import MAX_NODES, push_url
from mlenv.errors import InputError
from mlenv.render import cron
from mlenv.render.env import nccl_env, topology_env
from mlenv.render.shell import render_script
from mlenv.render.tree import source_label

SLURM_FILES = ("acceptance.sbatch", "train.sbatch")
# acceptance.schedule: the acceptance job that queues its own next run
RECHECK_SBATCH = "recheck.sbatch"
HOSTS_CRON = "acceptance.cron"
HOSTFILE = "hostfile"
LAUNCH_PLAN = "launch-plan.json"
# the folder each off-Kubernetes platform renders its scripts to
PLATFORM_ROOTS = {name: t.folder for name, t in PLATFORM_TRAITS.items() if t.folder}


def mode_of(cluster: Cluster) -> Mode:
    """The network mode off Kubernetes: RDMA where the config enables it, else TCP."""
    return "rdma" if cluster.rdma.enabled else "tcp"


def node_count(cluster: Cluster, nodes: int | None = None) -> int:
    """``--nodes``, else ``gpus.default_nodes`` (at most the listed nodes: rules checked it)."""
    n = nodes if nodes is not None else cluster.gpus.default_nodes
    if n < 1:
        raise InputError(f"--nodes must be at least 1, got {n}")
    if n > MAX_NODES:
        raise InputError(f"--nodes {n}: at most {MAX_NODES} nodes")
    if cluster.gpu_nodes and n > len(cluster.gpu_nodes):
        raise InputError(
            f"--nodes {n}: {source_label(cluster)} lists only {len(cluster.gpu_nodes)} node(s) "
            "in nodes.gpu_nodes"
        )
    return n


def _regen(cluster: Cluster, nodes: int | None) -> str:
    return f"mlenv render {cluster.name}" + (f" --nodes {nodes}" if nodes is not None else "")


def slurm_values(cluster: Cluster, nodes: int | None = None) -> dict[str, Any]:
    """What the Slurm templates see (every string is quoted there)."""
    n = node_count(cluster, nodes)
    s = cluster.slurm
    results_dir = s.shared_dir.rstrip("/") + "/results"
    return {
        "s": s,
        "cluster": cluster.name,
        "nodes": n,
        "gpus_per_node": cluster.gpus.per_node,
        # typed GRES (gpu:a100:4) where the site declares types
        "gpu_count": f"{s.gpu_type}:{cluster.gpus.per_node}"
        if s.gpu_type
        else cluster.gpus.per_node,
        "nodelist": ",".join(cluster.gpu_nodes[:n]) if cluster.gpu_nodes else "",
        "results_dir": results_dir,
        "mounts": container_mounts(s),
        "container_flags": container_flags(cluster),
        "master_port": cluster.master_port,
        "master_port_set": cluster.master_port_set,
        **shared_node_request(cluster),
        "mode": mode_of(cluster),
        "cpu": cluster.gpus.type.lower() == "cpu",
        # the exported variables: NCCL's, and MLENV_TOPOLOGY when the config has racks
        "nccl_env": list({**nccl_env(cluster, mode_of(cluster)), **topology_env(cluster)}.items()),
        "source": source_label(cluster),
        "regen": _regen(cluster, nodes),
    }


def container_mounts(s: Slurm) -> str:
    """The runtime's mount list: ``shared_dir`` at the same path, then ``container.mounts``
    (pyxis: flags joined by '+'; apptainer ``--bind``: as written, ``ro``/``rw``)."""
    if s.container_runtime == "apptainer":
        return ",".join([f"{s.shared_dir}:{s.shared_dir}", *s.container_mounts])
    return pyxis_mounts(s)


def container_flags(cluster: Cluster) -> list[str]:
    """The runtime's options from ``slurm.container`` beyond image, mounts, workdir and
    pyxis's ``--container-env`` (a comma list: the scripts hold it in a variable)."""
    s = cluster.slurm
    if s.container_runtime == "apptainer":
        return [
            *([] if cluster.gpus.type.lower() == "cpu" else ["--nv"]),
            *(["--writable-tmpfs"] if s.container_writable else []),
            *([] if s.container_mount_home else ["--no-home"]),
        ]
    return [
        *(["--container-writable"] if s.container_writable else []),
        *([] if s.container_mount_home else ["--no-container-mount-home"]),
        *([f"--container-name={s.container_name}"] if s.container_name else []),
    ]


def pyxis_mounts(s: Slurm) -> str:
    """``--container-mounts``: ``shared_dir`` at the same path, then ``slurm.container_mounts``."""
    return ",".join(
        [f"{s.shared_dir}:{s.shared_dir}", *(_pyxis_mount(m) for m in s.container_mounts)]
    )


def shared_node_request(cluster: Cluster) -> dict[str, Any]:
    """``exclusive: false``: what the job asks of each node it shares with other jobs, so
    that Slurm (task/cgroup) does not confine all the node's ranks to one CPU, its default
    share. ``cpus_per_task``: ``resources.requests.cpu`` rounded up, else one CPU per rank;
    ``mem``: ``resources.requests.memory`` in MiB ('' = the partition's default). An option
    the site sets in ``slurm.sbatch_args`` is left to it (0 / '')."""
    s = cluster.slurm
    if s.exclusive:
        return {"cpus_per_task": 0, "mem": ""}
    site = {a[2:].partition("=")[0] for a in s.sbatch_args}
    req = cluster.resources.requests
    cpu = parse_quantity(req.cpu) if req.cpu else None
    cpus = max(1, math.ceil(cpu)) if cpu is not None else cluster.gpus.per_node
    mem = parse_quantity(req.memory) if req.memory else None
    return {
        "cpus_per_task": 0 if site & {"cpus-per-task", "cpus-per-gpu", "mincpus"} else cpus,
        "mem": ""
        if mem is None or site & {"mem", "mem-per-cpu", "mem-per-gpu"}
        else f"{math.ceil(mem / (1 << 20))}M",
    }


def limit_signal_s(cluster: Cluster) -> int:
    """Seconds before ``slurm.time_limit`` that Slurm warns the acceptance job (USR1): a
    quarter of the limit, at most 90 s (the ranks' reports take seconds); 0 with no limit."""
    minutes = slurm_minutes(cluster.slurm.time_limit)
    if minutes is None or math.isinf(minutes):
        return 0
    return max(1, min(90, int(minutes * 60) // 4))


def _pyxis_mount(mount: str) -> str:
    """A mount as pyxis takes it: flags joined by '+' (a ',' would start the next mount)."""
    src, sep, rest = mount.partition(":")
    dst, sep2, flags = rest.partition(":")
    return f"{src}{sep}{dst}{sep2}{flags.replace(',', '+')}"


def render_slurm(cluster: Cluster, nodes: int | None = None) -> dict[str, str]:
    """File name → content of ``slurm/<cluster>/`` (``recheck.sbatch`` too with ``acceptance.schedule``)."""
    values = slurm_values(cluster, nodes)
    out = {}
    for f in SLURM_FILES:
        job = f"mlenv-{f.split('.')[0]}-{cluster.name}"
        # only the acceptance job traps the warning; a training script keeps Slurm's own end
        signal_s = limit_signal_s(cluster) if f == "acceptance.sbatch" else 0
        out[f] = render_script(
            f"slurm/{f}.j2", job_name=job, limit_signal_s=signal_s, recheck=False, **values
        )
    if cluster.recheck.schedule:
        out[RECHECK_SBATCH] = render_script(
            "slurm/acceptance.sbatch.j2",
            job_name=recheck_job_name(cluster),
            limit_signal_s=limit_signal_s(cluster),
            recheck=True,
            **values,
            **recheck_values(cluster),
        )
    return out


def recheck_job_name(cluster: Cluster) -> str:
    """The job name every run of the Slurm re-check carries (``--dependency=singleton`` keys on it)."""
    return f"mlenv-recheck-{cluster.name}"


def recheck_script_path(cluster: Cluster) -> str:
    """Where ``bash recheck.sbatch --install`` puts the script each run queues again."""
    return f"{cluster.slurm.shared_dir.rstrip('/')}/.mlenv/recheck/{cluster.name}/{RECHECK_SBATCH}"


def recheck_values(cluster: Cluster) -> dict[str, Any]:
    """What ``_recheck.sbatch.j2`` sees: the schedule expanded (:mod:`mlenv.render.cron`)."""
    sched = cluster.recheck.schedule
    e = cron.expand(sched)
    return {
        "schedule": sched,
        "profile": cluster.recheck.profile,
        "metrics_push": push_url(cluster.recheck.metrics_push)
        if cluster.recheck.metrics_push
        else "",
        "recheck_script": recheck_script_path(cluster),
        "cron_minutes": cron.words(e.minutes),
        "cron_hours": cron.words(e.hours),
        "cron_days": cron.words(e.days),
        "cron_months": cron.words(e.months),
        "cron_weekdays": cron.words(e.weekdays),
        "cron_day_or": int(e.day_or),
    }


def launch_plan(cluster: Cluster, nodes: int | None = None) -> dict[str, Any]:
    """``platform: hosts``: which host starts which ranks, and how (read by mlenv.platforms.hosts)."""
    n = node_count(cluster, nodes) if nodes is not None else len(cluster.gpu_nodes)
    hosts = list(cluster.gpu_nodes[:n])
    h = cluster.hosts
    return {
        "cluster": cluster.name,
        "hosts": hosts,
        "ranks_per_host": cluster.gpus.per_node,
        "world_size": len(hosts) * cluster.gpus.per_node,
        "master_addr": hosts[0] if hosts else "",
        "master_port": cluster.master_port,
        "ssh": {"user": h.ssh_user, "port": h.ssh_port, "key": h.ssh_key},
        "python": h.python,
        "shared_dir": h.shared_dir,
        "network_mode": mode_of(cluster),
        "device": "cpu" if cluster.gpus.type.lower() == "cpu" else "cuda",
        "env": {**nccl_env(cluster, mode_of(cluster)), **topology_env(cluster)},
        "launcher": "one torchrun per host over ssh: --nnodes H --node_rank I --nproc_per_node G, "
        "static rendezvous at master_addr:master_port",
        "generated_from": source_label(cluster),
        "regenerate": _regen(cluster, nodes),
    }


def render_hosts(
    cluster: Cluster, nodes: int | None = None, control: Control | None = None
) -> dict[str, str]:
    """File name → content of ``hosts/<cluster>/``: the DeepSpeed hostfile and the launch plan;
    with ``acceptance.schedule`` and ``control`` also the control host's cron line."""
    plan = launch_plan(cluster, nodes)
    head = (
        f"# Generated by mlenv render from {plan['generated_from']} - do not edit\n"
        f"# Regenerate: {plan['regenerate']}\n"
    )
    hostfile = head + "".join(f"{h} slots={plan['ranks_per_host']}\n" for h in plan["hosts"])
    out = {HOSTFILE: hostfile, LAUNCH_PLAN: json.dumps(plan, indent=2, sort_keys=True) + "\n"}
    if cluster.recheck.schedule and control is not None:
        out[HOSTS_CRON] = head + hosts_cron(cluster, control)
    return out


@dataclass(frozen=True)
class Control:
    """The control host as the hosts cron line names it: this checkout and this mlenv."""

    root: str  # the repository root (holds clusters/)
    mlenv: tuple[str, ...]  # argv that runs mlenv, e.g. (sys.executable, "-m", "mlenv")


def hosts_cron(cluster: Cluster, control: Control) -> str:
    """``acceptance.cron``: comments and one crontab line for the control host, which runs
    ``mlenv acceptance --cluster`` from the checkout (so the run lands in its history).

    cron hands the command to /bin/sh: every value is one ``shlex.quote`` word. cron itself
    turns a ``%`` into a newline and has no quoting of its own, so a path with ``%``, a
    backslash or a control character is refused (exit 2) rather than escaped."""
    for what, value in (
        ("the repository root", control.root),
        *(("mlenv", w) for w in control.mlenv),
    ):
        if not value.isprintable() or "%" in value or "\\" in value:
            raise InputError(
                f"{what} {value!r}: a cron line cannot carry '%', '\\' or control characters; "
                "run mlenv render from a checkout (and python) whose path has none"
            )
    root = control.root.rstrip("/") or "/"
    log = f"{root}/.mlenv/recheck/{cluster.name}.log"
    words = [
        *control.mlenv,
        "acceptance",
        "--cluster",
        cluster.name,
        "--profile",
        cluster.recheck.profile,
    ]
    run = shlex.join(words)
    then = ""
    push = cluster.recheck.metrics_push
    if push:  # after any verdict (`;`): a FAIL is what a fleet's alert wants to see
        pushing = [*control.mlenv, "metrics", "latest", "--cluster", cluster.name]
        run = f"{{ {run}; {shlex.join([*pushing, '--push', push_url(push)])}; }}"
        then = (
            f"# Then `mlenv metrics latest --cluster {cluster.name} --push URL` sends the run's series\n"
            "# to the Pushgateway of acceptance.metrics.push.\n"
        )
    command = (
        f"cd {shlex.quote(root)} && mkdir -p {shlex.quote(os.path.dirname(log))} && "
        f"{run} >> {shlex.quote(log)} 2>&1"
    )
    return (
        f"# Re-checks on a schedule: acceptance.schedule {cluster.recheck.schedule} on this control host's cron\n"
        "# (its time zone). Install (as the user who runs mlenv here), from the checkout:\n"
        f"#   (crontab -l 2>/dev/null; grep -v '^#' hosts/{cluster.name}/{HOSTS_CRON}) | crontab -\n"
        f"# Each run is `mlenv acceptance --cluster {cluster.name}` from this checkout: reports in\n"
        f"# reports/{cluster.name}/<run-id>/, one line in its history; the output in {log}.\n"
        f"{then}"
        f"{cron.five_fields(cluster.recheck.schedule)} {command}\n"
    )


def recheck_hints(root: Path, clusters: list[Cluster], out: Path | None = None) -> list[str]:
    """``mlenv render``'s line on installing each slurm/hosts cluster's scheduled re-check
    (none for a cluster without ``acceptance.schedule`` or on Kubernetes)."""
    lines = []
    for c in clusters:
        if not c.recheck.schedule or not c.traits.folder:
            continue
        d = platform_dir(root, c, out)
        folder = d.relative_to(root) if d.is_relative_to(root) else d
        if c.traits.sbatch:
            lines.append(
                f"re-check on schedule {c.recheck.schedule!r}: install it from a login node with "
                f"`bash {folder}/{RECHECK_SBATCH} --install` (remove: --remove)"
            )
        else:
            lines.append(
                f"re-check on schedule {c.recheck.schedule!r}: add it to this host's crontab with "
                f"`(crontab -l 2>/dev/null; grep -v '^#' {folder}/{HOSTS_CRON}) | crontab -`"
            )
    return lines


def render_platform(
    cluster: Cluster, nodes: int | None = None, control: Control | None = None
) -> dict[str, str]:
    """The files of ``cluster``'s platform folder (slurm or hosts)."""
    if not cluster.traits.folder:
        raise ValueError(
            f"platform {cluster.platform} renders Kubernetes manifests, not a platform folder"
        )
    if cluster.traits.sbatch:
        return render_slurm(cluster, nodes)
    return render_hosts(cluster, nodes, control)


def platform_dir(root: Path, cluster: Cluster, out: Path | None = None) -> Path:
    """``<root>/slurm/<cluster>`` (or ``hosts/``); with ``--out DIR``: ``DIR/<cluster>``."""
    base = out if out is not None else root / cluster.traits.folder
    return base / cluster.name


def planned(
    root: Path,
    cluster: Cluster,
    out: Path | None = None,
    nodes: int | None = None,
    mlenv: tuple[str, ...] = (),
) -> tuple[Path, dict[str, str]]:
    """(folder, files) of a slurm/hosts cluster for ``mlenv render`` (written and checked like k8s/);
    ``mlenv``: the argv the hosts cron line runs mlenv with (none: no cron line)."""
    control = Control(str(root.resolve()), mlenv) if mlenv else None
    return platform_dir(root, cluster, out), render_platform(cluster, nodes, control)
