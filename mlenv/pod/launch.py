"""Command lines for the job: DeepSpeed over pdsh/ssh from pod-0, or torchrun in every pod.

Everything is built as an argument list (never a shell string); the launchers are run
as ``python -m …`` of this interpreter so PATH on the pod does not matter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from mlenv.errors import EXIT_ERROR, EXIT_FAIL, EXIT_INPUT, EXIT_OK

ACCEPTANCE_MODULE = "mlenv.acceptance"


@dataclass(frozen=True)
class Job:
    """What every rank runs: a script path or a module, plus its arguments."""

    target: str
    args: list[str] = field(default_factory=list)
    module: bool = False
    # The acceptance suite reads LOCAL_RANK from the environment (it also runs under
    # torchrun, which passes no --local_rank); user scripts usually expect the flag.
    local_rank_flag: bool = True


def new_run_id() -> str:
    """A sortable, unique-enough id for the results directory (UTC time)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def acceptance_job(report_dir: str, profile: str | None, extra: list[str]) -> Job:
    """The default job: the acceptance suite writing its reports to ``report_dir``."""
    args = ["--report-dir", report_dir]
    if profile:
        args += ["--profile", profile]
    return Job(ACCEPTANCE_MODULE, args + extra, module=True, local_rank_flag=False)


def deepspeed_argv(job: Job, hostfile: str, master_addr: str, master_port: int, ssh_port: int,
                   python: str = sys.executable) -> list[str]:
    """The DeepSpeed launcher command for ``job`` over every host of ``hostfile``.

    ``--no_ssh_check``: our preflight already proved every sshd answers, and the
    launcher's own check ignores our ssh client config.
    """
    argv = [python, "-u", "-m", "deepspeed.launcher.runner", "--hostfile", hostfile,
            "--launcher", "pdsh", "--master_addr", master_addr, "--master_port", str(master_port),
            "--ssh_port", str(ssh_port), "--no_ssh_check"]
    if job.module:
        argv.append("--module")
    if not job.local_rank_flag:
        argv.append("--no_local_rank")
    return argv + [job.target, *job.args]


def deepspeed_env(base: Mapping[str, str], ssh_client_config: str) -> dict[str, str]:
    """The launcher's environment: pdsh's ssh gets our client config via ``-F``.

    ssh reads ``~/.ssh`` from the passwd home, which a random UID may not have; the
    launcher appends ``-p <port>`` to PDSH_SSH_ARGS_APPEND itself.
    """
    env = dict(base)
    extra = f"-F {ssh_client_config}"
    env["PDSH_SSH_ARGS_APPEND"] = f"{env.get('PDSH_SSH_ARGS_APPEND', '')} {extra}".strip()
    env["PDSH_RCMD_TYPE"] = "ssh"
    return env


def torchrun_argv(job: Job, nnodes: int, node_rank: int, nproc_per_node: int, master_addr: str,
                  master_port: int, python: str = sys.executable) -> list[str]:
    """The torchrun command one pod runs (static rendezvous at MASTER_ADDR:MASTER_PORT)."""
    argv = [python, "-u", "-m", "torch.distributed.run", "--nnodes", str(nnodes),
            "--node-rank", str(node_rank), "--nproc-per-node", str(nproc_per_node),
            "--master-addr", master_addr, "--master-port", str(master_port)]
    if job.module:
        argv.append("-m")
    return argv + [job.target, *job.args]


def map_exit(rc: int) -> tuple[int, str]:
    """The job's exit status mapped to the contract, with a note for anything unusual.

    0/1/2/3 pass through (the acceptance suite already speaks the contract); a signal
    or any other code means the job crashed, which is ERROR (3), never FAIL.
    """
    if rc in (EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_ERROR):
        return rc, ""
    if rc < 0:
        return EXIT_ERROR, f"the job was killed by signal {-rc}"
    return EXIT_ERROR, f"the job exited with status {rc} (crash or launcher failure)"


def run(argv: list[str], env: Mapping[str, str]) -> int:
    """Run ``argv`` with output streaming straight through; returns its exit status."""
    proc = subprocess.Popen(argv, env=dict(env))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        # The launcher's own SIGINT handler stops the remote ranks; give it time to.
        try:
            return proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def results_summary(report_dir: str) -> str | None:
    """``verdict`` and reasons from ``report_dir/results.json`` when the job wrote one."""
    import json

    path = os.path.join(report_dir, "results.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    reasons = "; ".join(str(r) for r in doc.get("reasons", [])[:5])
    return f"verdict {doc.get('verdict')} ({path})" + (f": {reasons}" if reasons else "")
