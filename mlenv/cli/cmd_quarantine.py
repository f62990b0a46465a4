"""``mlenv quarantine RUN`` and ``mlenv release RUN`` (issue 26, docs/acceptance.md).

quarantine prints the exact commands that take the run's FAILED nodes out of scheduling
(a dry run: nothing changes); ``--apply`` checks permission first, then runs them and
records what it did. release undoes exactly that, only for nodes a later run passed
(``--after``) or with ``--force``. Exit 0 done/printed, 2 bad input (no such run, a node
not in the run), 3 cluster unreachable or not permitted (the commands are printed for an
admin).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlenv.cli._common import err, guarded, repo_root
from mlenv.errors import InfraError, InputError

if TYPE_CHECKING:
    from mlenv.cluster.api import ClusterClient
    from mlenv.quarantine import Run


def _history_root(history_dir: Path | None) -> Path:
    from mlenv.acceptance.records import history

    return history_dir or history.default_root(repo_root())


def _where(run: Run, cluster: str | None) -> tuple[str, str, str]:
    """(cluster name, platform, client binary for printed commands)."""
    from mlenv.quarantine import platform_of

    name = cluster or run.cluster
    if not name or name == "local":
        return name or "local", "hosts", ""
    from mlenv.cli._clusterctx import load_config

    cfg = load_config(name)
    return cfg.name, platform_of(cfg.platform), "oc" if cfg.platform == "openshift" else "kubectl"


@contextmanager
def _client(platform: str) -> Iterator[ClusterClient | None]:
    if platform != "kubernetes":
        with nullcontext(None) as none:
            yield none
        return
    from mlenv.cli._clusterctx import cluster_client

    with cluster_client() as c:
        yield c


@guarded
def quarantine_cmd(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Report folder, results.json or run id in the history.")],
    apply: Annotated[bool, typer.Option("--apply", help="Run the commands (default: print them, change nothing).")] = False,
    node: Annotated[str | None, typer.Option("--node", help="Only this node (it must be in the run).")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster name (default: the run's record).")] = None,
    history_dir: Annotated[Path | None, typer.Option("--history-dir", help="History root (default $MLENV_HISTORY_DIR, "
                                                                          "else reports/ in the repository).")] = None,
) -> None:
    """Take the nodes that FAILED a run out of scheduling: Kubernetes label, annotation and
    NoSchedule taint; Slurm drain with the run id and check as reason; hosts: the list."""
    from mlenv import quarantine as q

    root = _history_root(history_dir)
    run = q.load_run(run_ref, root)
    ts = q.targets(run, node)
    name, platform, binary = _where(run, cluster)
    if not ts:
        typer.echo(f"run {run.run_id}: no FAILED node" + (f" matching --node {node}" if node else "")
                   + "; nothing to quarantine")
        return
    lines: list[str] = []
    for t in ts:
        why = q.unusable(platform, t)
        if why:
            err(f"note: {t.node}: {why}")
            continue
        lines += q.commands(platform, t, binary=binary)
    if not apply:
        typer.echo(f"# run {run.run_id} ({name}, {platform}): {len(ts)} FAILED node(s); dry run, nothing changed "
                   "(--apply runs these):")
        for ln in lines:
            typer.echo(ln)
        return
    if platform == "hosts":
        for ln in lines:
            typer.echo(ln)
    with _client(platform) as client:
        ok, why = q.permitted(platform, client)
        if not ok:
            typer.echo(f"# not permitted to change nodes ({why}); commands for an admin to run:")
            for ln in lines:
                typer.echo(ln)
            raise InfraError(f"not permitted: {why}; nothing was changed")
        out = q.apply(run, platform, name, ts, client=client, history_root=root)
    for n, why in out.left:
        err(f"left alone: {n}: {why}")
    for n in out.done:
        typer.echo(f"quarantined {n} ({platform}): recorded in {run.report_dir}/{q.QUARANTINE_FILE}")
    typer.echo(f"quarantine of run {run.run_id}: {len(out.done)} node(s) quarantined, {len(out.left)} left alone")


@guarded
def release_cmd(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="The run whose quarantine to undo.")],
    after: Annotated[str | None, typer.Option("--after", metavar="RUN2", help="A later run: release only the nodes it "
                                                                              "measured and passed.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Release without a later passing run (said out loud).")] = False,
    node: Annotated[str | None, typer.Option("--node", help="Only this node.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be undone; change nothing.")] = False,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster name (default: the run's record).")] = None,
    history_dir: Annotated[Path | None, typer.Option("--history-dir", help="History root.")] = None,
) -> None:
    """Undo exactly what `mlenv quarantine RUN --apply` did, node by node, never more."""
    from mlenv import quarantine as q

    root = _history_root(history_dir)
    run = q.load_run(run_ref, root)
    later = q.load_run(after, root) if after else None
    if later is None and not force:
        raise InputError("release needs --after RUN2 (a later run that measured the node and passed it) or --force")
    name, platform, binary = _where(run, cluster)
    if force:
        err(f"warning: --force: releasing run {run.run_id}'s quarantine without a later run that passed the node(s)")
    with _client(platform) as client:
        if not dry_run:
            ok, why = q.permitted(platform, client)
            if not ok:
                raise InfraError(f"not permitted: {why}; nothing was changed")
        out = q.release(run, platform, name, after=later, force=force, only=node, client=client,
                        history_root=root, dry_run=dry_run, binary=binary)
    for ln in out.lines:
        typer.echo(ln)
    for n, why in out.left:
        err(f"kept: {n}: {why}")
    verb = "would release" if dry_run else "released"
    for n in out.done:
        typer.echo(f"{verb} {n}")
    typer.echo(f"release of run {run.run_id}: {len(out.done)} node(s) {verb}, {len(out.left)} kept")


def register(app: typer.Typer) -> None:
    """Add ``quarantine`` and ``release`` to the app."""
    app.command("quarantine")(quarantine_cmd)
    app.command("release")(release_cmd)
