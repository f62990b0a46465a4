"""``mlenv acceptance --local``: run the acceptance suite on this machine through DeepSpeed.

The DeepSpeed launcher starts N ranks of ``python -m mlenv.acceptance`` (all GPUs when
present, else N CPU ranks with ``DS_ACCELERATOR=cpu`` and gloo); output streams through.
This verb only parses flags, calls :mod:`mlenv.acceptance.run.local` and prints; see there
for the launcher, the process group and the recovery of a report when rank 0 died.
Exit: 0 PASS, 1 FAIL, 2 bad flags/config/baseline, 3 ERROR.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from mlenv.cli._common import SETTINGS, err, guarded, note, repo_root
from mlenv.errors import InputError


def _report_dir_usable(report_dir: Path, prepare: Callable[[Path], None]) -> None:
    """i16: an unusable ``--report-dir`` (a file, a folder we may not write, a dangling
    link) is bad input: exit 2 and one line, as ``render --out``, before anything runs."""
    from mlenv.generated import unwritable_reason

    why = unwritable_reason(report_dir)
    try:
        if why is None:
            prepare(report_dir)
    except OSError as e:
        why = f"{e.filename or report_dir}: {e.strerror or e}"
    if why is not None:
        raise InputError(f"--report-dir {report_dir}: cannot write reports there: {why}")


def register(app: typer.Typer) -> None:
    """Add the ``acceptance`` verb."""

    @app.command("acceptance")
    @guarded
    def acceptance(
        local_: Annotated[bool, typer.Option("--local", help="Run on this machine through the DeepSpeed launcher.")] = False,
        nproc: Annotated[int, typer.Option("--nproc", help="Ranks to start (default: all GPUs, else 2 CPU ranks).")] = 0,
        profile: Annotated[str, typer.Option("--profile", help="quick | full")] = "quick",
        report_dir: Annotated[Path, typer.Option("--report-dir", help="Where reports go.")] = Path("acceptance-report"),
        checks: Annotated[str, typer.Option("--checks", help="Comma list of checks or families (default: all).")] = "",
        baseline: Annotated[str | None, typer.Option("--baseline", help="Baseline file or GPU model (default: by device).")] = None,
        deadline: Annotated[float, typer.Option("--deadline", help="Per-check deadline in seconds (default: by profile).")] = 0.0,
        options: Annotated[Path | None, typer.Option("--options", help="JSON/YAML {check: {key: value}} over the profile.")] = None,
        cluster: Annotated[str | None, typer.Option("--cluster", help="Run on this config's Slurm or hosts platform "
                                                                  "(submit, wait, verdict, reports to reports/<cluster>/<run-id>/).")] = None,
        localize: Annotated[bool, typer.Option("--localize", help="Also run fabric.localize: name the slow node or link "
                                                                  "between nodes, pair by pair.")] = False,
        bundle: Annotated[bool, typer.Option("--bundle", help="Also write the run's sign-off bundle "
                                                              "(see mlenv bundle).")] = False,
    ) -> None:
        """Run the acceptance suite and print the verdict (0 PASS, 1 FAIL, 2 bad input, 3 ERROR)."""
        if cluster is not None:  # issue 13: the suite as a job of the config's platform
            raise typer.Exit(_on_platform(cluster, profile=profile, checks=checks, baseline=baseline,
                                          options=options, deadline=deadline))
        from mlenv.acceptance.core import profiles
        from mlenv.acceptance.records import history
        from mlenv.acceptance.reports import console
        from mlenv.acceptance.run import local, world
        from mlenv.contract import exit_for_verdict

        if not local_:
            raise InputError("only --local runs from here; on a cluster run `mlenv launch CLUSTER` "
                             "(the suite is the default job on pod-0)")
        if nproc < 0:
            raise InputError(f"--nproc: expected a positive number, got {nproc}")
        if deadline < 0:
            raise InputError(f"--deadline: expected seconds > 0, got {deadline}")
        n_checks = local.validate(profile, checks, baseline, options) + int(localize)
        gpus = local.gpu_count()
        if gpus and nproc > gpus:
            raise InputError(f"--nproc {nproc}: this machine has {gpus} GPU(s) and each rank needs its own; "
                             f"use --nproc {gpus} or fewer")
        n = nproc or gpus or 2
        dl = deadline or profiles.DEADLINES[profile]
        _report_dir_usable(report_dir, local.prepare_report_dir)
        suite = ["--profile", profile, "--report-dir", str(report_dir.resolve()), "--deadline", str(dl)]
        suite += ["--checks", checks] if checks else []
        suite += ["--baseline", baseline] if baseline else []
        suite += ["--options", str(options.resolve())] if options else []
        suite += ["--localize"] if localize else []
        history_root = history.default_root(repo_root())
        suite += ["--history-dir", str(history_root.resolve())]
        cmd = local.build_command(n, gpus, world.free_port(), report_dir.resolve(), suite)
        err(f"launching {n} rank(s) ({'GPU' if gpus else 'CPU, gloo'}) through DeepSpeed: {shlex.join(cmd)}")
        # Worst case: every check runs into its deadline (the suite itself aborts sooner).
        budget = n_checks * dl + local.STARTUP_SLACK_S
        env = local.launch_env(n, gpus)
        first = local.first_run_notice(gpus, env)
        if first:
            note(first)
        run = local.run_local(cmd, env, report_dir, budget, verbose=SETTINGS.verbose,
                              on_timeout=lambda b: err(f"the suite did not end within {b:.0f} s: stopping it"))
        if run.recovered:  # rank 0 died: only this process can tell the verdict
            typer.echo(console.verdict_block(run.doc, str(report_dir)))
            for line in history.after_run(report_dir, run.doc, history_root, history.LOCAL_CLUSTER):
                err(line)
        else:  # rank 0 already printed the full verdict block: one closing line is enough
            typer.echo(f"verdict: {run.doc['verdict']} (reports in {report_dir})")
        typer.echo(f"wall time: {run.wall_s:.1f} s")
        if bundle:
            from mlenv.signoff import make_bundle

            typer.echo(f"bundle: {make_bundle(report_dir, Path(repo_root()))[0]}")
        raise typer.Exit(exit_for_verdict(run.doc.get("verdict")))


def _on_platform(cluster: str, *, profile: str, checks: str, baseline: str | None, options: Path | None,
                 deadline: float) -> int:
    """``mlenv acceptance --cluster NAME``: the suite on the config's platform (Slurm, hosts).

    ``--baseline``/``--options`` files must be where every node sees them (the shared
    folder or the same path everywhere); they reach the job as script arguments.
    """
    from mlenv.acceptance.core import profiles
    from mlenv.cli._clusterctx import load_config, platform, session

    cfg = load_config(cluster)
    if profile not in profiles.profile_names():
        raise InputError(f"--profile: expected one of {', '.join(profiles.profile_names())}, got {profile!r}")
    if deadline < 0:
        raise InputError(f"--deadline: expected seconds > 0, got {deadline}")
    args: list[str] = []
    args += ["--checks", checks] if checks else []
    args += ["--baseline", str(Path(baseline).resolve()) if Path(baseline).is_file() else baseline] if baseline else []
    args += ["--options", str(options.resolve())] if options else []
    args += ["--deadline", str(deadline)] if deadline else []
    return platform(cfg).acceptance(cfg, session(), profile=profile, suite_args=args)
