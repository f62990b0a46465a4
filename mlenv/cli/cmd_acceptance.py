"""``mlenv acceptance --local``: run the acceptance suite on this machine through DeepSpeed.

The DeepSpeed launcher starts N ranks of ``python -m mlenv.acceptance`` (all GPUs when
present, else N CPU ranks with ``DS_ACCELERATOR=cpu`` and gloo); output streams through.
This verb only parses flags, calls :mod:`mlenv.acceptance.run.local` and prints; see there
for the launcher, the process group and the recovery of a report when rank 0 died.
Exit: 0 PASS, 1 FAIL, 2 bad flags/config/baseline, 3 ERROR, 130 INTERRUPTED by Ctrl-C,
143 INTERRUPTED by SIGTERM or SIGHUP (the run is stopped and its report finalised either way).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlenv.cli._common import SETTINGS, debug, echo_out, err, guarded, note, repo_root
from mlenv.errors import InfraError, InputError

if TYPE_CHECKING:
    from mlenv.acceptance.records.rundir import Claim


def _claim_report_dir(report_dir: Path, run_id: str) -> Claim:
    """The run's own folder, claimed before anything runs. An unusable
    ``--report-dir`` (a file, a folder we may not write, a dangling link), one that holds
    another run's results or one a live run uses is bad input: exit 2 and one line."""
    from mlenv.acceptance.records import rundir
    from mlenv.generated import unwritable_reason

    why = unwritable_reason(report_dir)
    if why is None:
        try:
            return rundir.claim(report_dir, run_id)
        except OSError as e:
            why = f"{e.filename or report_dir}: {e.strerror or e}"
    raise InputError(f"--report-dir {report_dir}: cannot write reports there: {why}")


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
        if cluster is not None:  # the suite as a job of the config's platform
            raise typer.Exit(
                _on_platform(
                    cluster,
                    profile=profile,
                    checks=checks,
                    baseline=baseline,
                    options=options,
                    deadline=deadline,
                    localize=localize,
                    bundle=bundle,
                    skip_probe=skip_probe,
                )
            )
        if skip_probe:
            raise InputError("--skip-probe goes with --cluster (a Slurm config)")
        from mlenv.acceptance.core import profiles
        from mlenv.acceptance.records import rundir
        from mlenv.acceptance.run import local
        from mlenv.contract import new_run_id

        if not local_:
            raise InputError(
                "only --local runs from here; on a cluster run `mlenv launch CLUSTER` "
                "(the suite is the default job on pod-0)"
            )
        if nproc < 0:
            raise InputError(f"--nproc: expected a positive number, got {nproc}")
        if deadline < 0:
            raise InputError(f"--deadline: expected seconds > 0, got {deadline}")
        n_checks = local.validate(profile, checks, baseline, options, deadline) + int(localize)
        gpus = local.gpu_count()
        if gpus and nproc > gpus:
            raise InputError(
                f"--nproc {nproc}: this machine has {gpus} GPU(s) and each rank needs its own; "
                f"use --nproc {gpus} or fewer"
            )
        n = nproc or gpus or 2
        dl = deadline or profiles.DEADLINES[profile]
        run_id = new_run_id()
        per_run = report_dir is None
        if report_dir is None:
            report_dir = Path(rundir.DEFAULT_PARENT) / run_id
        plan = _Plan(n, gpus, dl, n_checks, profile, checks, baseline, options, localize, bundle)
        claim = _claim_report_dir(report_dir, run_id)
        try:
            code = _run_recorded(claim, per_run, plan)
        finally:
            claim.release()
        raise typer.Exit(code)


@dataclass(frozen=True)
class _Plan:
    """What the flags decided: ranks, GPUs, the deadline and what the suite runs."""

    n: int
    gpus: int
    deadline: float
    n_checks: int
    profile: str
    checks: str
    baseline: str | None
    options: Path | None
    localize: bool
    bundle: bool


def _run_recorded(claim: Claim, per_run: bool, plan: _Plan) -> int:
    """:func:`_run`, with a stop at any moment from the claim on recorded: Ctrl-C, SIGTERM or
    SIGHUP before the launcher started (or before rank 0 wrote run.json, which
    ``run_local`` handles) ends INTERRUPTED with its exit code, a report and a history line,
    like a stop later in the run; never "no report"."""
    from mlenv.acceptance.run import local
    from mlenv.errors import Interrupted

    launched: list[bool] = []
    with local.signals_as_interrupts():
        try:
            return _run(claim, per_run, plan, launched)
        except KeyboardInterrupt as e:
            local.ignore_signals()
            if launched:  # the run's own record is done: only its printing was cut short
                raise
            return _record_early_stop(
                claim, e.signal_name if isinstance(e, Interrupted) else "SIGINT"
            )


def _record_early_stop(claim: Claim, signal_name: str) -> int:
    """Finalise and record a run stopped before it launched anything (INTERRUPTED)."""
    from mlenv.acceptance.records import history, rundir
    from mlenv.acceptance.reports import console
    from mlenv.acceptance.run import local
    from mlenv.contract import exit_for_doc, read_results

    report_dir, run_id = claim.path, claim.run_id
    err(f"{signal_name}: stopping the run and finalising its report")
    doc = read_results(report_dir)  # a signal just after the report was written: it stands
    if doc is None:
        rundir.mark_interrupted(report_dir, signal_name)
        doc = local.recover(report_dir, None, run_id, signal_name)
        echo_out(console.verdict_block(doc, str(report_dir)))
    root = history.default_root(repo_root())
    if not _recorded(root, run_id):
        for line in history.after_run(report_dir, doc, root, history.LOCAL_CLUSTER):
            note(line)
    return exit_for_doc(doc)


def _run(claim: Claim, per_run: bool, plan: _Plan, launched: list[bool]) -> int:
    """Launch the ranks into the claimed folder, wait, print the verdict; the exit code.
    ``launched`` gets True once the run has ended and been judged (its record is its own)."""
    from mlenv.acceptance.records import history, rundir
    from mlenv.acceptance.reports import console
    from mlenv.acceptance.run import local, world
    from mlenv.contract import exit_for_doc

    report_dir, run_id = claim.path, claim.run_id
    if per_run:
        said = rundir.point_latest(report_dir.parent, run_id)
        if said:
            note(said)
    for line in console.fold(f"run {run_id}: reports in {report_dir}"):  # 100 columns
        note(line)
    n, gpus, dl = plan.n, plan.gpus, plan.deadline
    suite = [
        "--profile",
        plan.profile,
        "--report-dir",
        str(report_dir.resolve()),
        "--deadline",
        str(dl),
        "--run-id",
        run_id,
    ]
    suite += ["--checks", plan.checks] if plan.checks else []
    suite += ["--baseline", plan.baseline] if plan.baseline else []
    suite += ["--options", str(plan.options.resolve())] if plan.options else []
    suite += ["--localize"] if plan.localize else []
    history_root = history.default_root(repo_root())
    suite += ["--history-dir", str(history_root.resolve())]
    cmd = local.build_command(n, gpus, world.free_port(), report_dir.resolve(), suite)
    # the terminal gets progress and the verdict; the launcher's argv is in
    # launcher.log (and here with -v)
    for line in console.fold(
        f"launching {n} rank(s) ({'GPU' if gpus else 'CPU, gloo'}) through DeepSpeed; "
        f"details in {report_dir / local.LAUNCHER_LOG}"
    ):
        note(line)
    debug(f"launcher: {shlex.join(cmd)}")
    # Worst case: every check runs into its deadline (the suite itself aborts sooner).
    budget = plan.n_checks * dl + local.STARTUP_SLACK_S
    env = local.launch_env(n, gpus)
    no_cxx = local.compiler_problem(gpus, env)  # one line, before anything starts
    if no_cxx:
        raise InfraError(no_cxx)
    first = local.first_run_notice(gpus, env) if not local.ops_installed() else None
    if first:
        note(first)
    level: local.Level = "quiet" if SETTINGS.quiet else "verbose" if SETTINGS.verbose else "normal"
    run = local.run_local(
        cmd,
        env,
        report_dir,
        budget,
        level=level,
        run_id=run_id,
        on_timeout=lambda b: err(f"the suite did not end within {b:.0f} s: stopping it"),
        on_interrupt=lambda sig: err(
            f"{sig}: stopping the run and finalising its report "
            f"(further signals are ignored until that is done)"
        ),
        hung_after_s=dl,
        nproc=n,
        on_hung=lambda line: err(f"error: {line}: stopping the run and finalising its report"),
    )
    local.ignore_signals()  # the run is over: what follows prints and records it
    launched.append(True)
    # Output from here on goes through echo_out: with `| head` the reader may be gone, and
    # the exit code must still be the verdict's, not a BrokenPipeError's.
    if run.recovered:  # rank 0 died or was stopped: only this process can tell the verdict
        if run.unwritten is None:
            echo_out(console.verdict_block(run.doc, str(report_dir)))
        if not _recorded(history_root, run_id):  # rank 0 records a run whose folder is full itself
            for line in history.after_run(
                report_dir,
                run.doc,
                history_root,
                history.LOCAL_CLUSTER,
                plots=run.unwritten is None,
            ):
                if run.unwritten is None or not line.startswith("history:"):
                    note(line)
        if run.unwritten is not None:  # a full disk: one line, not a traceback
            where = history.history_path(history_root, history.LOCAL_CLUSTER)
            kept = (
                f"it is recorded in the history as {run.doc.get('verdict')} ({where})"
                if _recorded(history_root, run_id)
                else f"the history ({where}) could not take it either"
            )
            err(f"error: {run.unwritten}: the run's report could not be written there; {kept}")
            return exit_for_doc(run.doc)
    # else rank 0 printed the verdict block, once (the second verdict line is gone)
    note(f"wall time: {run.wall_s:.1f} s")
    if plan.bundle and not _skipped_no_bundle(run.doc):
        from mlenv.signoff import make_bundle

        echo_out(f"bundle: {make_bundle(report_dir, Path(repo_root()))[0]}")
    return exit_for_doc(run.doc)


def _skipped_no_bundle(doc: dict[str, object] | None) -> bool:
    """True (and said in one line) when ``--bundle`` is not honoured: the run is SKIPPED, and
    a sign-off bundle of a run that measured nothing is only made on purpose."""
    if not isinstance(doc, dict) or doc.get("verdict") != "SKIPPED":
        return False
    err(
        "bundle: not written: the run is SKIPPED (no check measured anything); "
        "`mlenv bundle RUN --allow-skipped` makes one on purpose"
    )
    return True


def _recorded(root: Path, run_id: str) -> bool:
    """The history already holds ``run_id`` (rank 0 wrote it before the run ended)."""
    from mlenv.acceptance.records.history import find_run

    try:
        return find_run(root, run_id) is not None
    except InputError:  # two records already: a third would not help
        return True


def platform_suite_args(
    *, checks: str, baseline: str | None, options: Path | None, deadline: float, localize: bool
) -> list[str]:
    """The suite's arguments for a job on the config's platform (paths made absolute)."""
    args: list[str] = []
    args += ["--checks", checks] if checks else []
    args += (
        ["--baseline", str(Path(baseline).resolve()) if Path(baseline).is_file() else baseline]
        if baseline
        else []
    )
    args += ["--options", str(options.resolve())] if options else []
    args += ["--deadline", str(deadline)] if deadline else []
    # --localize was dropped here, so the job's localize stayed on "auto" (SKIP)
    return args + (["--localize"] if localize else [])


def _on_platform(
    cluster: str,
    *,
    profile: str,
    checks: str,
    baseline: str | None,
    options: Path | None,
    deadline: float,
    localize: bool = False,
    bundle: bool = False,
    skip_probe: bool = False,
) -> int:
    """``mlenv acceptance --cluster NAME``: the suite on the config's platform (Slurm, hosts).

    ``--baseline``/``--options`` files reach the job as script arguments: on Slurm they must
    be where every node sees them (the shared folder or the same path everywhere); on hosts
    they are copied into the run's folder on the hosts (``mlenv.platforms.hosts.run_inputs``).
    """
    from mlenv.acceptance.core import profiles
    from mlenv.cli._clusterctx import load_config, platform, session

    cfg = load_config(cluster)
    if skip_probe:
        from mlenv.platforms.slurm import without_probe

        cfg = without_probe(cfg)
    if profile not in profiles.profile_names():
        raise InputError(
            f"--profile: expected one of {', '.join(profiles.profile_names())}, got {profile!r}"
        )
    if deadline < 0:
        raise InputError(f"--deadline: expected seconds > 0, got {deadline}")
    # The same checks as --local, here and before anything is submitted or shipped: a typo in
    # --options or --checks was found by every rank on the nodes, after the queue and the
    # rendezvous, as a run that ended ERROR. A file that is not on this machine may be a path
    # only the nodes see (Slurm; hosts refuse it in run_inputs), and a --baseline that is no
    # file here is a GPU model name: those are left to the job. So are checks and options
    # when a plugin module of MLENV_ACCEPTANCE_PLUGINS is not importable here: its checks
    # exist on the nodes only, and this machine cannot tell them from a typo.
    from mlenv.acceptance.core.registry import plugin_modules

    if all(_importable(mod) for mod in plugin_modules()):
        _validate_here(profile, checks, baseline, options)
    args = platform_suite_args(
        checks=checks, baseline=baseline, options=options, deadline=deadline, localize=localize
    )
    before = _run_ids(cfg.name)
    code = platform(cfg).acceptance(cfg, session(), profile=profile, suite_args=args)
    if bundle:  # --bundle was dropped here before, silently (like --localize)
        _bundle_new_run(cfg.name, before)
    return code


def _validate_here(profile: str, checks: str, baseline: str | None, options: Path | None) -> None:
    """``local.validate`` of what the job will run with: the flags, else ``$MLENV_OPTIONS`` /
    ``$MLENV_BASELINE``, which the Slurm script and the hosts' runner take when the flag is
    not given (mlenv.platforms.hosts.inputs_from_env); only files this machine has (see above).
    An error in a file named by the environment says so: the user typed no flag."""
    import os

    from mlenv.acceptance.run import local
    from mlenv.platforms.hosts import inputs_from_env

    given: dict[str, str] = {
        "--options": str(options) if options is not None else "",
        "--baseline": baseline or "",
    }
    from_env = inputs_from_env([flag for flag, v in given.items() if v], os.environ)
    given.update((flag, value) for flag, (value, _) in from_env.items())
    source = {flag: var for flag, (_, var) in from_env.items()}
    paths = {flag: Path(v).expanduser() for flag, v in given.items() if v}
    files = {flag: f for flag, f in paths.items() if f.is_file()}
    try:
        local.validate(
            profile,
            checks,
            str(files["--baseline"]) if "--baseline" in files else None,
            files.get("--options"),
        )
    except InputError as e:
        named = [f"${var}={given[flag]}" for flag, var in source.items() if flag in files]
        if not named:
            raise
        raise InputError(
            f"{e} (the file comes from {' and '.join(named)} in this environment)"
        ) from None


def _importable(module: str) -> bool:
    """Whether this machine can import ``module`` (found without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a malformed name
        return False


def _run_ids(cluster: str) -> set[str]:
    """The run ids this machine's history holds for ``cluster``."""
    from mlenv.acceptance.records import history

    return history.known_run_ids(history.default_root(repo_root()), cluster)


def _bundle_new_run(cluster: str, before: set[str]) -> None:
    """``--bundle`` on a platform: the sign-off bundle of the run this call recorded (the
    platform copies each run to ``reports/<cluster>/<run-id>/`` and records it here as it
    ends, whatever its verdict); said in one line when no run was recorded."""
    from mlenv.acceptance.records import history
    from mlenv.signoff import make_bundle

    root = history.default_root(repo_root())
    new = [
        r
        for r in history.read(history.history_path(root, cluster))[0]
        if str(r.get("run_id")) not in before
    ]
    if not new or not new[-1].get("report_dir"):
        err(f"bundle: no run of {cluster} was recorded by this call: nothing to bundle")
        return
    if _skipped_no_bundle(new[-1]):
        return
    echo_out(
        f"bundle: {make_bundle(Path(str(new[-1]['report_dir'])), Path(repo_root()), cluster=cluster)[0]}"
    )
