"""``mlenv quarantine RUN`` and ``mlenv release RUN`` (docs/acceptance.md).

quarantine prints the exact commands that take the run's FAILED nodes out of scheduling
(a dry run: nothing changes); ``--apply`` checks permission first, then runs them and
records what it did. release undoes exactly that, only for nodes a later run passed
(``--after``, a later run of the same cluster) or with ``--force``. A node is acted on
once confirmed (``--confirm N/M``: FAILed in N of the cluster's last M runs; hardware
evidence in this run alone). Exit 0 done/printed, 2 bad input (no such run, a node
not in the run), 3 cluster unreachable or not permitted (the commands are printed for an
admin). The verb finds the run and its cluster; the cluster's platform does the rest
(``platform.quarantine``/``release``, mlenv/platforms).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session
from mlenv.cli._common import err, guarded, note, repo_root
from mlenv.cli._output import check_format, emit
from mlenv.errors import InputError

if TYPE_CHECKING:
    from mlenv.platforms.base import Platform
    from mlenv.quarantine import Run


def _history_root(history_dir: Path | None) -> Path:
    from mlenv.acceptance.records import history

    return history_dir or history.default_root(repo_root())


def _platform(run: Run, cluster: str | None) -> tuple[str, Platform]:
    """The cluster name and its platform: ``--cluster``'s config, else the one the run's
    record names. A run on this machine (no cluster, or ``local``, in its record) has no
    config and no scheduler: the hosts platform (the list)."""
    from mlenv.acceptance.records.history import LOCAL_CLUSTER

    if cluster is None and (not run.cluster or run.cluster == LOCAL_CLUSTER):
        from mlenv.platforms.dispatch import platform_named

        return LOCAL_CLUSTER, platform_named("hosts")
    cfg = load_config(cluster or str(run.cluster))
    return cfg.name, platform(cfg)


@guarded
def quarantine_cmd(
    run_ref: Annotated[
        str,
        typer.Argument(metavar="RUN", help="Report folder, results.json or run id in the history."),
    ],
    apply: Annotated[
        bool,
        typer.Option("--apply", help="Run the commands (default: print them, change nothing)."),
    ] = False,
    node: Annotated[
        str | None, typer.Option("--node", help="Only this node (it must be in the run).")
    ] = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="Cluster name (default: the run's record).")
    ] = None,
    history_dir: Annotated[
        Path | None,
        typer.Option(
            "--history-dir",
            help="History root (default $MLENV_HISTORY_DIR, else reports/ in the repository).",
        ),
    ] = None,
    confirm: Annotated[
        str,
        typer.Option(
            "--confirm",
            metavar="N/M",
            help="Act on a node only once it FAILed in N of the cluster's last M runs (this one "
            "included); wrong answers, DCGM and XID-class failures need this run alone.",
        ),
    ] = "2/3",
    condition: Annotated[
        bool,
        typer.Option(
            "--condition",
            help="Kubernetes: also set the Node condition MlenvAcceptance=False "
            "(needs patch nodes/status; release sets it back).",
        ),
    ] = False,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="The dry run as data: json or yaml (the commands and each node; not with --apply).",
        ),
    ] = None,
) -> None:
    """Take the nodes that FAILED a run out of scheduling: Kubernetes label, annotation and
    NoSchedule taint, and an Event on the Node; Slurm drain with the run id and check as
    reason; hosts: the list."""
    from mlenv import quarantine as q
    from mlenv.contract import shown

    def out(line: str) -> None:  # node names come from a report: never terminal control
        typer.echo(shown(line, keep="\t"))

    fmt = check_format(output, ("json", "yaml"))
    if fmt is not None and apply:
        raise InputError("-o/--output prints the dry run as data: it goes without --apply")
    rule = q.parse_confirm(confirm)
    root = _history_root(history_dir)
    run = q.load_run(run_ref, root)
    ts = q.targets(run, node)
    name, p = _platform(run, cluster)
    confirmed, lines = q.confirm(run, ts, name, root, rule)
    if fmt is not None:  # the confirmation's words go to stderr: stdout is the document
        for line in lines:
            note(line)
    else:
        for line in lines:
            out(f"# {line}")
    if ts and not confirmed:
        (note if fmt is not None else out)(
            f"run {run.run_id}: no FAILED node confirmed (--confirm {confirm}); nothing to quarantine"
        )
        if fmt is None:
            return  # with -o the document follows: no node in it
    p.quarantine(
        name,
        session(),
        run=run,
        targets=confirmed,
        apply=apply,
        only=node,
        history_root=root,
        condition=condition,
        plan=(lambda doc: emit(doc, fmt)) if fmt is not None else None,
    )


@guarded
def release_cmd(
    run_ref: Annotated[
        str, typer.Argument(metavar="RUN", help="The run whose quarantine to undo.")
    ],
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            metavar="RUN2",
            help="A later run: release only the nodes it measured and passed.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Release without a later passing run (said out loud).")
    ] = False,
    node: Annotated[str | None, typer.Option("--node", help="Only this node.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be undone; change nothing.")
    ] = False,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="Cluster name (default: the run's record).")
    ] = None,
    history_dir: Annotated[Path | None, typer.Option("--history-dir", help="History root.")] = None,
) -> None:
    """Undo exactly what `mlenv quarantine RUN --apply` did, node by node, never more."""
    from mlenv import quarantine as q

    root = _history_root(history_dir)
    run = q.load_run(run_ref, root)
    later = q.load_run(after, root) if after else None
    if later is None and not force:
        raise InputError(
            "release needs --after RUN2 (a later run that measured the node and passed it) or --force"
        )
    name, p = _platform(run, cluster)
    if force:
        err(
            f"warning: --force: releasing run {run.run_id}'s quarantine without a later run that passed the node(s)"
        )
    p.release(
        name,
        session(),
        run=run,
        after=later,
        force=force,
        only=node,
        dry_run=dry_run,
        history_root=root,
    )


@guarded
def recheck_cmd(
    run_ref: Annotated[
        str, typer.Argument(metavar="RUN", help="The run whose quarantined nodes to re-check.")
    ],
    suite: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[-- SUITE-ARGS]", help="Flags for the suite, e.g. -- --checks compute."
        ),
    ] = None,
    node: Annotated[str | None, typer.Option("--node", help="Only this node.")] = None,
    profile: Annotated[
        str, typer.Option("--profile", help="The suite's profile (quick or full).")
    ] = "quick",
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            help="Kubernetes: seconds each re-check Pod may take to start (default 300).",
        ),
    ] = 300.0,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="Cluster name (default: the run's record).")
    ] = None,
    history_dir: Annotated[Path | None, typer.Option("--history-dir", help="History root.")] = None,
) -> None:
    """Run the suite again on each node RUN quarantined, where it stands (Kubernetes: a Pod
    pinned to the node, tolerating only the quarantine taint; Slurm: the drain traded for
    a maintenance reservation of the node, drained again after), and record it as a later
    run of the cluster, the evidence `mlenv release RUN --after` needs. Exit 0 every node
    passed, 1 one failed (it stays quarantined), 2 bad input, 3 one could not be re-checked."""
    from mlenv import quarantine as q
    from mlenv.acceptance.core import profiles

    if profile not in profiles.profile_names():
        raise InputError(
            f"--profile {profile!r}: expected one of {', '.join(profiles.profile_names())}"
        )
    if not 0 < wait <= 3600:
        raise InputError(f"--wait must be between 0 and 3600 seconds, got {wait:g}")
    root = _history_root(history_dir)
    run = q.load_run(run_ref, root)
    nodes = q.quarantined_nodes(run, only=node)
    if cluster is None and not run.cluster:
        raise InputError(f"run {run.run_id}: its record names no cluster; pass --cluster NAME")
    cfg = load_config(cluster or str(run.cluster))
    raise typer.Exit(
        platform(cfg).recheck(
            cfg,
            session(),
            run_id=run.run_id,
            nodes=nodes,
            profile=profile,
            suite_args=list(suite or []),
            history_root=root,
            wait_s=wait,
            run=run,
        )
    )


def register(app: typer.Typer) -> None:
    """Add ``quarantine``, ``release`` and ``recheck`` to the app."""
    app.command("quarantine")(quarantine_cmd)
    app.command("release")(release_cmd)
    app.command("recheck")(recheck_cmd)
