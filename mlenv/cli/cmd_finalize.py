"""``mlenv finalize RUN_DIR``: finalise the report of a run whose processes were killed.

A SIGKILL (the OOM killer, ``kill -9``, a lost machine) leaves ``run.json`` and
``results.jsonl`` but no ``results.json``, JUnit, summary or history line; this verb
writes them from ``results.jsonl`` (verdict ERROR saying so, or INTERRUPTED when the CLI
had been asked to stop the run) and appends the history line. A run killed before rank 0 wrote ``run.json`` is
finalised too (its claim lock names the run). The history gets one line per run id: a
run already recorded (a copy of its folder finalised again) is not added twice. Exit 0
finalised (the verdict is printed), 2 not a run folder, already finalised, or in use by a
live run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlenv.cli._common import echo_out, err, guarded, repo_root
from mlenv.errors import InputError


@guarded
def finalize_cmd(
    run_dir: Annotated[
        Path, typer.Argument(help="The run's report folder (it holds run.json / results.jsonl).")
    ],
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="The cluster the run belongs to in the history "
            "(default: $MLENV_CLUSTER, else local).",
        ),
    ] = None,
    history_dir: Annotated[
        Path | None,
        typer.Option(
            "--history-dir",
            help="History root (default $MLENV_HISTORY_DIR, else reports/ in the repository).",
        ),
    ] = None,
) -> None:
    """Finalise a killed run's report from its results.jsonl and record it in the history."""
    from mlenv.acceptance.records import history, rundir
    from mlenv.acceptance.reports import console
    from mlenv.acceptance.run import local
    from mlenv.contract import RESULTS_JSON, is_run_id, read_results

    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such report folder")
    holder = rundir.lock_holder(run_dir)
    if holder is not None:
        raise InputError(
            f"{run_dir}: in use by a live run (pid {holder}); it finalises its own report"
        )
    odd = rundir.odd_entries(run_dir)
    if odd:  # a FIFO would hang the reader, a link would be written through
        raise InputError(f"{run_dir}: {odd[0]}; not finalised")
    doc = read_results(run_dir)
    if doc is not None:
        raise InputError(
            f"{run_dir}: already finalised (run {doc.get('run_id')}, verdict {doc.get('verdict')})"
        )
    if (run_dir / RESULTS_JSON).exists():
        err(
            f"note: {run_dir / RESULTS_JSON} is unreadable (torn); written again from results.jsonl"
        )
    # killed before rank 0 wrote run.json: the claim's lock (it names the run) or the
    # launcher's log is all there is, and the run is still one to record
    marks = ("run.json", "results.jsonl", rundir.LOCK_FILE, local.LAUNCHER_LOG)
    if not any((run_dir / f).is_file() for f in marks):
        raise InputError(
            f"{run_dir}: not a run's report folder (no run.json, results.jsonl, "
            f"{rundir.LOCK_FILE} or {local.LAUNCHER_LOG})"
        )
    name = cluster or history.current_cluster()
    history.check_cluster_name(name)
    run_id = rundir.lock_run_id(run_dir) or (run_dir.name if is_run_id(run_dir.name) else "unknown")
    doc = local.recover(
        run_dir, None, run_id, rundir.interrupted_by(run_dir), rundir.hung_note(run_dir)
    )
    (run_dir / rundir.LOCK_FILE).unlink(missing_ok=True)  # a dead run's lock: ours, and stale
    echo_out(console.verdict_block(doc, str(run_dir)))
    for line in history.after_run(
        run_dir, doc, history_dir or history.default_root(repo_root()), name
    ):
        err(line)


def register(app: typer.Typer) -> None:
    """Add ``finalize`` to the app."""
    app.command("finalize")(finalize_cmd)
