"""``mlenv metrics RUN [--textfile DIR | --push URL]``: a run's Prometheus series where a fleet looks.

Without an option, prints the run's series (the text of its ``metrics.prom``, written again
from results.json so an older run gets one too). ``--textfile DIR`` writes them, atomically,
to ``DIR/mlenv_acceptance_<cluster>.prom`` for node_exporter's textfile collector
(``--collector.textfile.directory=DIR``); ``--push URL`` PUTs them to a Pushgateway
(job ``mlenv_acceptance``, grouped by cluster). ``mlenv metrics latest --cluster NAME``: that
cluster's latest run in this checkout's history (the hosts re-check's cron line). Exit: 0 done; 2 bad input (no such run,
an unreadable results.json, a URL that is not http(s)); 3 the gateway could not be
reached or refused the push.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mlenv.cli._common import err, guarded, repo_root
from mlenv.contract import push_url
from mlenv.errors import EXIT_ERROR, InputError

LATEST = "latest"  # RUN: the latest run of --cluster in this checkout's history


def _cluster_of(report_dir: Path, given: str | None) -> str:
    if given:
        return given
    try:
        rec = json.loads((report_dir / "record.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        rec = {}
    name = rec.get("cluster") if isinstance(rec, dict) else None
    if not isinstance(name, str) or not name:
        raise InputError(
            f"{report_dir}: no record.json naming the run's cluster; give --cluster NAME"
        )
    return name


def _document(report_dir: Path) -> dict[str, Any]:
    path = report_dir / "results.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read the run's results: {e.strerror or e}") from None
    except ValueError as e:
        raise InputError(f"{path}: not a results document: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list):
        raise InputError(f"{path}: not a results document (no 'checks' list)")
    return doc


def _latest(cluster: str | None) -> Path:
    """The report folder of ``cluster``'s latest run in this checkout's history (what the
    hosts re-check's cron line pushes after each run)."""
    from mlenv.acceptance.records import history

    if not cluster:
        raise InputError(f"{LATEST}: give --cluster NAME (whose latest run)")
    path = history.history_path(history.default_root(repo_root()), cluster)
    records, _ = history.read(path)
    folder = records[-1].get("report_dir") if records else None
    if not isinstance(folder, str) or not Path(folder).is_dir():
        raise InputError(f"{LATEST} --cluster {cluster}: no recorded run with a folder in {path}")
    return Path(folder)


@guarded
def metrics_cmd(
    target: Annotated[
        str,
        typer.Argument(
            help="RUN_DIR (a report folder), a run id from the history, or 'latest' (with --cluster).",
            metavar="RUN",
        ),
    ],
    textfile: Annotated[
        Path | None,
        typer.Option(
            "--textfile",
            help="node_exporter textfile directory: write mlenv_acceptance_<cluster>.prom there.",
        ),
    ] = None,
    push: Annotated[
        str | None,
        typer.Option("--push", help="Pushgateway URL (http[s]://host:9091): PUT the series there."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option("--cluster", help="The cluster label (default: the run's, from record.json)."),
    ] = None,
) -> None:
    """Print a run's Prometheus series, or write them for node_exporter (--textfile) or push them (--push)."""
    from mlenv.acceptance.records import prom
    from mlenv.cli._common import run_folder

    if textfile is not None and push is not None:
        raise InputError("--textfile and --push: give one")
    if push is not None:
        push_url(push, "--push")
    report_dir = _latest(cluster) if target == LATEST else run_folder(target)[0]
    doc = _document(report_dir)
    name = _cluster_of(report_dir, cluster)
    if textfile is not None:
        if textfile.exists() and not textfile.is_dir():
            raise InputError(f"--textfile {textfile}: not a directory")
        out = prom.write_atomic(textfile / prom.textfile_name(name), prom.render(doc, name))
        typer.echo(f"{out}: run {doc.get('run_id')} ({doc.get('verdict')}) for node_exporter")
        return
    if push is not None:
        try:
            where = prom.push(push, doc, name)
        except OSError as e:
            err(f"error: push to {push} failed: {e}")
            raise typer.Exit(EXIT_ERROR) from None
        typer.echo(f"pushed run {doc.get('run_id')} ({doc.get('verdict')}) to {push}{where}")
        return
    typer.echo(prom.render(doc, name).decode("utf-8"), nl=False)


def register(app: typer.Typer) -> None:
    """Add ``metrics`` to the app."""
    app.command("metrics")(metrics_cmd)
