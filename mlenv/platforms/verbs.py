"""The CLI verbs on ``platform: slurm`` and ``platform: hosts``: what ``mlenv/cli/cmd_*``
call after loading the config. They print through ``say`` and raise typed errors (the CLI
maps them to exit codes); :func:`acceptance` returns the verdict's exit code."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from mlenv.config.model import Cluster
from mlenv.errors import InputError

Say = Callable[[str], None]


def _root() -> Path:
    """The repository root the CLI uses (``MLENV_ROOT`` or the folder holding ``clusters/``)."""
    env = os.environ.get("MLENV_ROOT")
    if env:
        return Path(env)
    here = Path.cwd()
    for d in (here, *here.parents):
        if (d / "clusters").is_dir():
            return d
    return here


def _hosts_pending(verb: str) -> None:
    raise InputError(f"mlenv {verb} on platform: hosts is not implemented yet")


def deploy(cfg: Cluster, *, nodes: int | None, say: Say, warn: Say) -> None:
    """slurm: preflight, then ``sbatch`` the acceptance job and record its id."""
    if cfg.platform == "hosts":
        from mlenv.platforms import hosts

        hosts.preflight(cfg, say=say, nodes=nodes)
        return
    from mlenv.platforms import slurm

    sub = slurm.submit(cfg, _root(), say, nodes=nodes)
    say(f"follow it with: mlenv status {cfg.name} / mlenv logs {cfg.name}; cancel: mlenv teardown {cfg.name} "
        f"(job {sub.job_id})")


def status(cfg: Cluster, *, say: Say) -> None:
    if cfg.platform == "hosts":
        from mlenv.platforms import hosts

        for line in hosts.status_lines(cfg):
            say(line)
        return
    from mlenv.platforms import slurm

    for line in slurm.status_lines(cfg, _root()):
        say(line)


def logs(cfg: Cluster, *, tail: int | None, say: Say) -> None:
    if cfg.platform == "hosts":
        _hosts_pending("logs (the run streams to the terminal; each rank's log is in the report's logs/)")
    from mlenv.platforms import slurm

    say(slurm.log_text(cfg, _root(), tail).rstrip("\n"))


def teardown(cfg: Cluster, *, say: Say) -> None:
    if cfg.platform == "hosts":
        say(f"{cfg.name}: platform hosts leaves nothing running: acceptance runs in the foreground "
            "(Ctrl-C ends it and its ssh sessions)")
        return
    from mlenv.platforms import slurm

    say(slurm.teardown(cfg, _root()))


def sync(cfg: Cluster, *, say: Say) -> None:
    if cfg.platform == "hosts":
        from mlenv.platforms import hosts

        say(hosts.sync(cfg, _root()))
        return
    from mlenv.platforms import slurm

    say(slurm.sync(cfg, _root()))


def acceptance(cfg: Cluster, *, nodes: int | None, profile: str, suite_args: list[str], say: Say,
               timeout_s: float | None = None) -> int:
    """Submit, wait with progress, print the verdict, copy the reports back; the exit code."""
    if cfg.platform == "hosts":
        from mlenv.platforms import hosts

        return hosts.acceptance(cfg, _root(), say, nodes=nodes, profile=profile, suite_args=suite_args)
    from mlenv.acceptance.reports import console
    from mlenv.platforms import slurm

    doc, code, dest = slurm.acceptance(cfg, _root(), say, nodes=nodes, profile=profile, suite_args=suite_args,
                                       timeout_s=timeout_s)
    say(console.verdict_block(doc, str(dest)))
    return code


def acceptance_cli(cluster: str, *, profile: str, checks: str, baseline: str | None, options: Path | None,
                   deadline: float, say: Say) -> int:
    """``mlenv acceptance --cluster NAME``: the suite on the config's Slurm or hosts platform.

    ``--baseline``/``--options`` files must be where every node sees them (the shared
    folder or the same path everywhere); they reach the job as script arguments.
    """
    from mlenv.acceptance.core import profiles
    from mlenv.config import load

    cfg = load(cluster, _root())
    if cfg.platform not in ("slurm", "hosts"):
        raise InputError(f"--cluster {cluster}: platform {cfg.platform} runs the suite in its pods "
                         f"(mlenv launch {cfg.name}); --cluster is for platform slurm or hosts")
    if profile not in profiles.profile_names():
        raise InputError(f"--profile: expected one of {', '.join(profiles.profile_names())}, got {profile!r}")
    if deadline < 0:
        raise InputError(f"--deadline: expected seconds > 0, got {deadline}")
    args: list[str] = []
    args += ["--checks", checks] if checks else []
    args += ["--baseline", str(Path(baseline).resolve()) if Path(baseline).is_file() else baseline] if baseline else []
    args += ["--options", str(options.resolve())] if options else []
    args += ["--deadline", str(deadline)] if deadline else []
    return acceptance(cfg, nodes=None, profile=profile, suite_args=args, say=say)


def shell(cfg: Cluster, *, command: list[str], node: int) -> int:
    """slurm: ``srun --pty`` on one node of the partition; hosts: ssh to host ``node``.
    The terminal stays attached; the command's exit status is returned."""
    import subprocess
    import sys

    tty = sys.stdin.isatty() and sys.stdout.isatty()
    if cfg.platform == "hosts":
        from mlenv.platforms import hosts

        words = hosts.shell_argv(cfg, command, node, tty)
    else:
        from mlenv.platforms import slurm

        words = slurm.shell_argv(cfg, command, node, tty)
    try:
        return subprocess.call(words)
    except FileNotFoundError:
        from mlenv.errors import InfraError

        raise InfraError(f"{words[0]}: not found") from None
