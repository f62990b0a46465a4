"""Acceptance runs below the CLI: ``--local`` (plan, claim the run's folder, launch the
ranks, recover and record a run that rank 0 could not finish, bundle it) and ``--cluster``
(check what the job will run with, hand it to the config's platform, bundle the run it
recorded).

Every function takes checked flags, raises the typed errors of :mod:`mlenv.errors`,
returns an exit code (0 PASS, 1 FAIL, 2 bad input, 3 ERROR, 130/143 interrupted) and says
its lines through a :class:`~mlenv.service.Notifier`. The heavy parts (the launcher, the
records, the bundle) are imported inside the functions, so importing this module costs
nothing at ``mlenv --help``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlenv.errors import InfraError, InputError
from mlenv.service import Notifier

if TYPE_CHECKING:
    from mlenv.acceptance.records.rundir import Claim
    from mlenv.acceptance.run.local import Level, LocalRun
    from mlenv.config.model import Cluster
    from mlenv.platforms.base import Session


@dataclass(frozen=True)
class LocalPlan:
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
    level: Level = "normal"  # how much of the ranks' output streams through


def plan_local(
    *,
    nproc: int,
    profile: str,
    checks: str,
    baseline: str | None,
    options: Path | None,
    deadline: float,
    localize: bool,
    bundle: bool,
    level: Level = "normal",
) -> LocalPlan:
    """The local run's plan: the suite's inputs checked (profile, checks, baseline, options),
    one rank per GPU unless ``nproc`` says otherwise (2 CPU ranks without a GPU), the
    profile's deadline unless ``deadline`` gives one. InputError for a bad input or more
    ranks than GPUs."""
    from mlenv.acceptance.core import profiles
    from mlenv.acceptance.run import local

    n_checks = local.validate(profile, checks, baseline, options, deadline) + int(localize)
    gpus = local.gpu_count()
    if gpus and nproc > gpus:
        raise InputError(
            f"--nproc {nproc}: this machine has {gpus} GPU(s) and each rank needs its own; "
            f"use --nproc {gpus} or fewer"
        )
    n = nproc or gpus or 2
    dl = deadline or profiles.DEADLINES[profile]
    return LocalPlan(
        n, gpus, dl, n_checks, profile, checks, baseline, options, localize, bundle, level
    )


def claim_report_dir(report_dir: Path, run_id: str) -> Claim:
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


def run_local(plan: LocalPlan, report_dir: Path | None, *, root: Path, say: Notifier) -> int:
    """Run the suite on this machine into ``report_dir`` (default: a new
    ``acceptance-report/<run-id>/``, pointed at by ``latest``); the verdict's exit code.
    ``root`` is the checkout whose ``reports/`` keeps the history and the bundles."""
    from mlenv.acceptance.records import rundir
    from mlenv.contract import new_run_id

    run_id = new_run_id()
    per_run = report_dir is None
    if report_dir is None:
        report_dir = Path(rundir.DEFAULT_PARENT) / run_id
    claim = claim_report_dir(report_dir, run_id)
    try:
        return _run_recorded(_Run(claim, per_run, plan, root, say))
    finally:
        claim.release()


@dataclass(frozen=True)
class _Run:
    """One local run: its claimed folder, whether that folder is a new per-run one, the
    plan, the checkout root and where its lines go."""

    claim: Claim
    per_run: bool
    plan: LocalPlan
    root: Path
    say: Notifier


def _run_recorded(r: _Run) -> int:
    """:func:`_run`, with a stop at any moment from the claim on recorded: Ctrl-C, SIGTERM or
    SIGHUP before the launcher started (or before rank 0 wrote run.json, which
    ``run_local`` handles) ends INTERRUPTED with its exit code, a report and a history line,
    like a stop later in the run; never "no report"."""
    from mlenv.acceptance.run import local
    from mlenv.errors import Interrupted

    launched: list[bool] = []
    with local.signals_as_interrupts():
        try:
            return _run(r, launched)
        except KeyboardInterrupt as e:
            local.ignore_signals()
            if launched:  # the run's own record is done: only its printing was cut short
                raise
            return _record_early_stop(r, e.signal_name if isinstance(e, Interrupted) else "SIGINT")


def _record_early_stop(r: _Run, signal_name: str) -> int:
    """Finalise and record a run stopped before it launched anything (INTERRUPTED)."""
    from mlenv.acceptance.records import history, rundir
    from mlenv.acceptance.reports import console
    from mlenv.acceptance.run import local
    from mlenv.contract import exit_for_doc, read_results

    report_dir, run_id = r.claim.path, r.claim.run_id
    r.say.err(f"{signal_name}: stopping the run and finalising its report")
    doc = read_results(report_dir)  # a signal just after the report was written: it stands
    if doc is None:
        rundir.mark_interrupted(report_dir, signal_name)
        doc = local.recover(report_dir, None, run_id, signal_name)
        r.say.out(console.verdict_block(doc, str(report_dir)))
    root = history.default_root(r.root)
    if not _recorded(root, run_id):
        for line in history.after_run(report_dir, doc, root, history.LOCAL_CLUSTER):
            r.say.note(line)
    return exit_for_doc(doc)


def _suite_args(r: _Run, history_root: Path) -> list[str]:
    """The arguments of ``python -m mlenv.acceptance`` in each rank (paths made absolute)."""
    plan = r.plan
    suite = [
        "--profile",
        plan.profile,
        "--report-dir",
        str(r.claim.path.resolve()),
        "--deadline",
        str(plan.deadline),
        "--run-id",
        r.claim.run_id,
    ]
    suite += ["--checks", plan.checks] if plan.checks else []
    suite += ["--baseline", plan.baseline] if plan.baseline else []
    suite += ["--options", str(plan.options.resolve())] if plan.options else []
    suite += ["--localize"] if plan.localize else []
    return suite + ["--history-dir", str(history_root.resolve())]


def _run(r: _Run, launched: list[bool]) -> int:
    """Launch the ranks into the claimed folder, wait, say the verdict; the exit code.
    ``launched`` gets True once the run has ended and been judged (its record is its own)."""
    from mlenv.acceptance.records import history, rundir
    from mlenv.acceptance.run import local, world
    from mlenv.contract import exit_for_doc

    report_dir, run_id, plan, say = r.claim.path, r.claim.run_id, r.plan, r.say
    if r.per_run:
        said = rundir.point_latest(report_dir.parent, run_id)
        if said:
            say.note(said)
    from mlenv.acceptance.reports.console import fold  # 100 columns; a path is never cut

    for line in fold(f"run {run_id}: reports in {report_dir}"):
        say.note(line)
    n, gpus, dl = plan.n, plan.gpus, plan.deadline
    history_root = history.default_root(r.root)
    suite = _suite_args(r, history_root)
    cmd = local.build_command(n, gpus, world.free_port(), report_dir.resolve(), suite)
    # the terminal gets progress and the verdict; the launcher's argv is in
    # launcher.log (and here with -v)
    for line in fold(
        f"launching {n} rank(s) ({'GPU' if gpus else 'CPU, gloo'}) through DeepSpeed; "
        f"details in {report_dir / local.LAUNCHER_LOG}"
    ):
        say.note(line)
    say.debug(f"launcher: {shlex.join(cmd)}")
    # Worst case: every check runs into its deadline (the suite itself aborts sooner).
    budget = plan.n_checks * dl + local.STARTUP_SLACK_S
    env = local.launch_env(n, gpus)
    no_cxx = local.compiler_problem(gpus, env)  # one line, before anything starts
    if no_cxx:
        raise InfraError(no_cxx)
    first = local.first_run_notice(gpus, env) if not local.ops_installed() else None
    if first:
        say.note(first)
    run = local.run_local(
        cmd,
        env,
        report_dir,
        budget,
        level=plan.level,
        run_id=run_id,
        on_timeout=lambda b: say.err(f"the suite did not end within {b:.0f} s: stopping it"),
        on_interrupt=lambda sig: say.err(
            f"{sig}: stopping the run and finalising its report "
            f"(further signals are ignored until that is done)"
        ),
        hung_after_s=dl,
        nproc=n,
        on_hung=lambda line: say.err(f"error: {line}: stopping the run and finalising its report"),
    )
    local.ignore_signals()  # the run is over: what follows prints and records it
    launched.append(True)
    # Output from here on goes through say.out: with `| head` the reader may be gone, and
    # the exit code must still be the verdict's, not a BrokenPipeError's.
    if run.recovered and not _record_recovered(r, run, history_root):
        return exit_for_doc(run.doc)
    # else rank 0 printed the verdict block, once (the second verdict line is gone)
    say.note(f"wall time: {run.wall_s:.1f} s")
    if plan.bundle and not _skipped_no_bundle(run.doc, say):
        from mlenv.signoff import make_bundle

        say.out(f"bundle: {make_bundle(report_dir, r.root)[0]}")
    return exit_for_doc(run.doc)


def _record_recovered(r: _Run, run: LocalRun, history_root: Path) -> bool:
    """Say and record a run whose verdict only this process can tell (rank 0 died or was
    stopped); False when its report could not be written (a full disk: one line, no
    traceback, and the run ends there)."""
    from mlenv.acceptance.records import history
    from mlenv.acceptance.reports import console

    report_dir, run_id, say = r.claim.path, r.claim.run_id, r.say
    if run.unwritten is None:
        say.out(console.verdict_block(run.doc, str(report_dir)))
    if not _recorded(history_root, run_id):  # rank 0 records a run whose folder is full itself
        for line in history.after_run(
            report_dir,
            run.doc,
            history_root,
            history.LOCAL_CLUSTER,
            plots=run.unwritten is None,
        ):
            if run.unwritten is None or not line.startswith("history:"):
                say.note(line)
    if run.unwritten is None:
        return True
    where = history.history_path(history_root, history.LOCAL_CLUSTER)
    kept = (
        f"it is recorded in the history as {run.doc.get('verdict')} ({where})"
        if _recorded(history_root, run_id)
        else f"the history ({where}) could not take it either"
    )
    say.err(f"error: {run.unwritten}: the run's report could not be written there; {kept}")
    return False


def _skipped_no_bundle(doc: dict[str, object] | None, say: Notifier) -> bool:
    """True (and said in one line) when ``--bundle`` is not honoured: the run is SKIPPED, and
    a sign-off bundle of a run that measured nothing is only made on purpose."""
    if not isinstance(doc, dict) or doc.get("verdict") != "SKIPPED":
        return False
    say.err(
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


def run_on_platform(
    cfg: Cluster,
    s: Session,
    *,
    profile: str,
    checks: str,
    baseline: str | None,
    options: Path | None,
    deadline: float,
    localize: bool = False,
    bundle: bool = False,
    skip_probe: bool = False,
    say: Notifier,
) -> int:
    """``mlenv acceptance --cluster NAME``: the suite on the config's platform (Slurm, hosts).

    ``--baseline``/``--options`` files reach the job as script arguments: on Slurm they must
    be where every node sees them (the shared folder or the same path everywhere); on hosts
    they are copied into the run's folder on the hosts (``mlenv.platforms.hosts.run_inputs``).
    """
    from mlenv.acceptance.core import profiles
    from mlenv.platforms.dispatch import platform_for

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
    before = _run_ids(s.root, cfg.name)
    code = platform_for(cfg).acceptance(cfg, s, profile=profile, suite_args=args)
    if bundle:  # --bundle was dropped here before, silently (like --localize)
        _bundle_new_run(s.root, cfg.name, before, say)
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


def _run_ids(root: Path, cluster: str) -> set[str]:
    """The run ids this machine's history holds for ``cluster``."""
    from mlenv.acceptance.records import history

    return history.known_run_ids(history.default_root(root), cluster)


def _bundle_new_run(root: Path, cluster: str, before: set[str], say: Notifier) -> None:
    """``--bundle`` on a platform: the sign-off bundle of the run this call recorded (the
    platform copies each run to ``reports/<cluster>/<run-id>/`` and records it here as it
    ends, whatever its verdict); said in one line when no run was recorded."""
    from mlenv.acceptance.records import history
    from mlenv.signoff import make_bundle

    new = [
        r
        for r in history.read(history.history_path(history.default_root(root), cluster))[0]
        if str(r.get("run_id")) not in before
    ]
    if not new or not new[-1].get("report_dir"):
        say.err(f"bundle: no run of {cluster} was recorded by this call: nothing to bundle")
        return
    if _skipped_no_bundle(new[-1], say):
        return
    say.out(f"bundle: {make_bundle(Path(str(new[-1]['report_dir'])), root, cluster=cluster)[0]}")
