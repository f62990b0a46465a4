"""``mlenv acceptance --local``: run the acceptance suite on this machine through DeepSpeed.

The DeepSpeed launcher starts N ranks of ``python -m mlenv.acceptance`` (all GPUs when
present, else N CPU ranks with ``DS_ACCELERATOR=cpu`` and gloo); output streams through.
This verb only parses and checks flags, calls :mod:`mlenv.service.acceptance` (the run,
its recovery, record and bundle; the launcher is :mod:`mlenv.acceptance.run.local`) and
prints what the service says.
Exit: 0 PASS, 1 FAIL, 2 bad flags/config/baseline, 3 ERROR, 130 INTERRUPTED by Ctrl-C,
143 INTERRUPTED by SIGTERM or SIGHUP (the run is stopped and its report finalised either way).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlenv.cli._common import SETTINGS, debug, echo_out, err, guarded, note, repo_root
from mlenv.errors import InputError
from mlenv.service import Notifier


def _out(text: str) -> None:
    """A result line on stdout; with `| head` the reader may be gone, and the exit code
    must still be the verdict's, not a BrokenPipeError's."""
    echo_out(text)


# The service's lines: results on stdout, progress on stderr unless --quiet, -v details,
# problems always.
SAY = Notifier(out=_out, note=note, err=err, debug=debug)


def register(app: typer.Typer) -> None:
    """Add the ``acceptance`` verb."""

    @app.command("acceptance")
    @guarded
    def acceptance(
        local_: Annotated[
            bool,
            typer.Option("--local", help="Run on this machine through the DeepSpeed launcher."),
        ] = False,
        nproc: Annotated[
            int,
            typer.Option(
                "--nproc",
                help="Ranks to start; 0 means one per GPU of this machine, or 2 CPU ranks without a GPU.",
            ),
        ] = 0,
        profile: Annotated[str, typer.Option("--profile", help="quick | full")] = "quick",
        report_dir: Annotated[
            Path | None,
            typer.Option(
                "--report-dir",
                help="This run's own folder, new or empty (default: acceptance-report/<run-id>/).",
            ),
        ] = None,
        checks: Annotated[
            str, typer.Option("--checks", help="Comma list of checks or families (default: all).")
        ] = "",
        baseline: Annotated[
            str | None,
            typer.Option("--baseline", help="Baseline file or GPU model (default: by device)."),
        ] = None,
        deadline: Annotated[
            float,
            typer.Option("--deadline", help="Per-check deadline in seconds (default: by profile)."),
        ] = 0.0,
        options: Annotated[
            Path | None,
            typer.Option("--options", help="JSON/YAML {check: {key: value}} over the profile."),
        ] = None,
        cluster: Annotated[
            str | None,
            typer.Option(
                "--cluster",
                help="Run on this config's Slurm or hosts platform "
                "(submit, wait, verdict, reports to reports/<cluster>/<run-id>/).",
            ),
        ] = None,
        localize: Annotated[
            bool,
            typer.Option(
                "--localize",
                help="Also run fabric.localize: name the slow node or link "
                "between nodes, pair by pair.",
            ),
        ] = False,
        bundle: Annotated[
            bool,
            typer.Option(
                "--bundle", help="Also write the run's sign-off bundle (see mlenv bundle)."
            ),
        ] = False,
        skip_probe: Annotated[
            bool,
            typer.Option(
                "--skip-probe",
                help="With --cluster on Slurm: no one-node import probe before sbatch (as slurm.import_probe: false).",
            ),
        ] = False,
    ) -> None:
        """Run the acceptance suite and print the verdict (0 PASS, 1 FAIL, 2 bad input, 3 ERROR,
        130/143 interrupted)."""
        from mlenv.service import acceptance as service

        if cluster is not None:  # the suite as a job of the config's platform
            from mlenv.cli._clusterctx import load_config, session

            raise typer.Exit(
                service.run_on_platform(
                    load_config(cluster),
                    session(),
                    profile=profile,
                    checks=checks,
                    baseline=baseline,
                    options=options,
                    deadline=deadline,
                    localize=localize,
                    bundle=bundle,
                    skip_probe=skip_probe,
                    say=SAY,
                )
            )
        if skip_probe:
            raise InputError("--skip-probe goes with --cluster (a Slurm config)")
        if not local_:
            raise InputError(
                "only --local runs from here; on a cluster run `mlenv launch CLUSTER` "
                "(the suite is the default job on pod-0)"
            )
        if nproc < 0:
            raise InputError(f"--nproc: expected a positive number, got {nproc}")
        if deadline < 0:
            raise InputError(f"--deadline: expected seconds > 0, got {deadline}")
        plan = service.plan_local(
            nproc=nproc,
            profile=profile,
            checks=checks,
            baseline=baseline,
            options=options,
            deadline=deadline,
            localize=localize,
            bundle=bundle,
            level="quiet" if SETTINGS.quiet else "verbose" if SETTINGS.verbose else "normal",
        )
        raise typer.Exit(service.run_local(plan, report_dir, root=Path(repo_root()), say=SAY))
