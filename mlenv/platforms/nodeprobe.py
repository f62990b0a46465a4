"""What a node's python can import, asked before a run, for Slurm and hosts.

The acceptance job runs ``python -m mlenv.acceptance`` with the configured ``python``; an
image that lacks mlenv or DeepSpeed used to end the job in seconds, the cause
(``No module named …``) only in its output. Preflight now runs :data:`PROBE` on one node
first (``srun -N1``, inside the container when one is configured; ssh on hosts) and stops
with one line naming what is missing and the command that fixes it: ``mlenv stage
CLUSTER`` (:mod:`mlenv.platforms.stage`) for mlenv, PyYAML and DeepSpeed, the image or
``python`` itself for torch (the staged venv reuses the node's torch, never installs one).

Runs use the staged venv's python when ``mlenv stage`` made one (:func:`node_python`).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlenv import argv
from mlenv.config.model import Cluster
from mlenv.errors import InfraError

Say = Callable[[str], None]
# What the acceptance suite imports on a node, in the order a fix is looked for.
NEEDED = ("torch", "yaml", "mlenv.acceptance", "deepspeed")
# What `mlenv stage` brings (a wheel from the control host); torch comes with the node.
STAGED = {"mlenv": "mlenv", "yaml": "PyYAML", "deepspeed": "DeepSpeed"}
# srun waits this long for a node of the partition; a busy partition then skips the probe
# (the job itself would queue behind the same work) instead of holding preflight.
SRUN_IMMEDIATE_S = 60
PROBE_TIMEOUT_S = 180.0  # srun's wait + a loaded node's python importing torch and DeepSpeed
# A node that has not run the image yet imports it first (Pyxis/enroot pulls and unpacks
# an NGC image of several GB; Apptainer converts docker:// to a .sif): minutes.
IMAGE_IMPORT_S = 900.0

PROBE = (
    "import json, platform, socket, sys\n"
    "out = {'python': sys.version.split()[0], 'executable': sys.executable, 'node': socket.gethostname(),\n"
    "       'machine': platform.machine(), 'glibc': platform.libc_ver()[1], 'missing': {}}\n"
    f"for m in {NEEDED!r}:\n"
    " try: __import__(m)\n"
    " except Exception as e: out['missing'][m.split('.')[0]] = '%s: %s' % (type(e).__name__, e)\n"
    "try:\n import torch; out['torch'] = torch.__version__; out['gpus'] = torch.cuda.device_count()\n"
    "except Exception as e: out['torch'] = 'missing: %s' % e\n"
    "try:\n import deepspeed; out['deepspeed'] = deepspeed.__version__\n"
    "except Exception: out['deepspeed'] = None\n"
    "print(json.dumps(out))\n"
)


class ClientTimeout(InfraError):
    """A Slurm client that did not return within its time (exit 3, like any InfraError)."""


def refusal(text: str, limit: int = 2000) -> str:
    """Every line a Slurm client printed about a refusal, joined: a site's job_submit.lua
    explains itself on the lines before Slurm's own last one ("Unspecified error")."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "no output"
    joined = " / ".join(lines)
    return joined if len(joined) <= limit else "... " + joined[-limit:]


def partition_words(cluster: Cluster) -> str:
    """``partition 'gpu'`` for messages, or what stands for it without one."""
    p = cluster.slurm.partition
    return f"partition {p!r}" if p else "the Slurm cluster (no slurm.partition)"


def shared_dir(cluster: Cluster) -> str:
    """The folder every node and this machine see (``slurm.shared_dir`` / ``hosts.shared_dir``)."""
    return cluster.slurm.shared_dir if cluster.platform == "slurm" else cluster.hosts.shared_dir


def configured_python(cluster: Cluster) -> str:
    return cluster.slurm.python if cluster.platform == "slurm" else cluster.hosts.python


def venv_dir(cluster: Cluster) -> str:
    """Where ``mlenv stage`` puts the cluster's venv: ``<shared_dir>/.mlenv/venv/<cluster>``."""
    base = shared_dir(cluster).rstrip("/")
    # no shared folder (hosts): each host's own, under its login's home
    return (
        f"{base + '/' if base else ''}.mlenv/venv/{argv.slurm_name(cluster.name, 'cluster name')}"
    )


def node_python(cluster: Cluster) -> str:
    """The staged venv's python when ``mlenv stage`` made one, else the configured ``python``.

    Asked here, on the control host, through the shared folder: ``lexists`` because the
    venv's ``bin/python`` links to the node's (or the container's) interpreter, which this
    machine need not have.
    """
    if shared_dir(cluster):
        staged = f"{venv_dir(cluster)}/bin/python"
        if os.path.lexists(staged):
            return staged
    return configured_python(cluster)


def parse(stdout: str) -> dict[str, Any] | None:
    """The probe's JSON line (the last line of its output), or None."""
    try:
        d = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return d if isinstance(d, dict) else None


def missing_line(
    cluster: Cluster, where: str, found: dict[str, Any], *, stopped: str
) -> str | None:
    """One line naming what ``where``'s python cannot import and the command that fixes it;
    None when nothing is missing. ``stopped`` says what was not done (``nothing was submitted``)."""
    missing: dict[str, str] = dict(found.get("missing") or {})
    if not missing:
        return None
    py = found.get("executable") or node_python(cluster)
    what = ", ".join(f"{m} ({why})" for m, why in missing.items())
    key = "slurm" if cluster.platform == "slurm" else "hosts"
    if "torch" in missing:
        image = " or slurm.container_image" if cluster.platform == "slurm" else ""
        fix = (
            f"point {key}.python{image} at an interpreter with torch (mlenv stage reuses the node's "
            "torch; it does not install one)"
        )
    else:
        brings = ", ".join(STAGED[m] for m in missing if m in STAGED)
        fix = (
            f"run `mlenv stage {cluster.name}` (a wheelhouse of {brings} from this machine and a venv over "
            f"the node's python in {venv_dir(cluster)})"
        )
    return f"preflight: {where}: {py} cannot import {what}: {fix}; {stopped}"


# --- Slurm: one srun on one node -------------------------------------------------------


def container_options(cluster: Cluster) -> list[str]:
    """pyxis's ``--container-*`` options as the batch script has them (``shared_dir`` at the
    same path, then ``slurm.container.mounts``); [] without a container or with apptainer."""
    from mlenv.render.platforms import container_flags, pyxis_mounts

    s = cluster.slurm
    if not s.container_image or s.container_runtime != "pyxis":
        return []
    return [
        f"--container-image={s.container_image}",
        f"--container-mounts={pyxis_mounts(s)}",
        f"--container-workdir={s.shared_dir}",
        *container_flags(cluster),
        *([f"--container-env={','.join(s.container_env)}"] if s.container_env else []),
    ]


def container_prefix(cluster: Cluster) -> list[str]:
    """``apptainer exec … IMAGE`` before the task's command, as the batch script has it;
    [] without a container or with pyxis (srun's own options)."""
    from mlenv.render.platforms import container_flags, container_mounts

    s = cluster.slurm
    if not s.container_image or s.container_runtime != "apptainer":
        return []
    return [
        "apptainer",
        "exec",
        *container_flags(cluster),
        "--bind",
        container_mounts(s),
        "--pwd",
        s.shared_dir,
        s.container_image,
    ]


def srun_words(
    cluster: Cluster,
    base: list[str],
    command: list[str],
    *,
    immediate: int = SRUN_IMMEDIATE_S,
    minutes: int = 5,
) -> list[str]:
    """``srun BASE… --immediate=N --time=M [container options] -- COMMAND…``: one short task;
    ``base`` is :func:`mlenv.platforms.slurm.srun_options` (one node of the partition, the
    config's account/QOS/reservation, the first listed node)."""
    opts = [
        *base,
        f"--immediate={int(immediate)}",
        f"--time={int(minutes)}",
        "--job-name=mlenv-preflight",
        *container_options(cluster),
    ]
    return argv.slurm("srun", opts, [*container_prefix(cluster), *command])


# How mlenv.platforms.slurm runs a client (its errors and hints): passed in, as slurm imports this.
Run = Callable[..., "subprocess.CompletedProcess[str]"]


def slurm_probe(
    cluster: Cluster,
    python: str,
    run: Run,
    base: list[str],
    *,
    immediate: int = SRUN_IMMEDIATE_S,
    timeout: float = PROBE_TIMEOUT_S,
) -> dict[str, Any] | None:
    """:data:`PROBE` run by ``python`` on one node (``srun`` with ``base`` options, through
    ``run``): what it found; None when no node was free within ``immediate`` s; InfraError
    (exit 3) when srun or the python failed."""
    image = cluster.slurm.container_image
    allow = timeout + (IMAGE_IMPORT_S if image else 0.0)
    try:
        r = run(
            srun_words(
                cluster,
                base,
                [python, "-c", PROBE],
                immediate=immediate,
                minutes=max(5, math.ceil(allow / 60) + 1),
            ),
            timeout=allow + immediate,
        )
    except ClientTimeout:
        raise InfraError(
            f"preflight: the import probe (srun -N1 {python}"
            + (f" in {image}" if image else "")
            + f") did not finish within {allow + immediate:g} s (up to {immediate} s for a free node, "
            + (
                f"{IMAGE_IMPORT_S:g} s for the node to import the image on first use, "
                if image
                else ""
            )
            + f"{timeout:g} s for python to import torch, DeepSpeed and mlenv); nothing was submitted"
        ) from None
    found = parse(r.stdout) if r.returncode == 0 else None
    if found is not None:
        return found
    text = r.stderr or r.stdout
    # only "no node free in time" skips the probe; a refused account or partition is an error
    if re.search(r"Requested nodes are busy|[Ii]mmediate execution impossible", r.stderr or ""):
        return None
    where = f" in {cluster.slurm.container_image}" if cluster.slurm.container_image else ""
    raise InfraError(
        f"preflight: the import probe (srun -N1 {python}{where}) failed: "
        f"{refusal(text) if text.strip() else f'exit {r.returncode}'}; nothing was submitted"
        + (
            " (where the site refuses such a job, set slurm.import_probe: false)"
            if r.returncode != 0 and text.strip()
            else ""
        )
    )


def slurm_check(cluster: Cluster, say: Say, run: Run, base: list[str]) -> dict[str, Any] | None:
    """The probe with the python runs use; InfraError (exit 3) with :func:`missing_line` when a
    module is missing. None (said) when no node was free in time: the job finds out itself."""
    py = node_python(cluster)
    found = slurm_probe(cluster, py, run, base)
    if found is None:
        say(
            f"preflight: no node of {partition_words(cluster)} free within {SRUN_IMMEDIATE_S} s "
            "for the import probe; the job will find out itself"
        )
        return None
    line = missing_line(
        cluster, f"node {found.get('node') or '?'}", found, stopped="nothing was submitted"
    )
    if line:
        raise InfraError(line)
    say(
        f"preflight: node {found.get('node')}: {py}: python {found['python']}, torch {found.get('torch')}, "
        f"deepspeed {found.get('deepspeed')}, mlenv importable"
    )
    return found


def staged_root(cluster: Cluster) -> Path:
    """The folder ``mlenv stage`` writes under (``<shared_dir>/.mlenv``)."""
    return Path(shared_dir(cluster)) / ".mlenv"
