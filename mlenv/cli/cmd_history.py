"""``mlenv history CLUSTER``: a cluster's acceptance runs, newest first (``-o json`` for tools).

Reads ``reports/<cluster>/history.jsonl`` under the repository root (or
``$MLENV_HISTORY_DIR``); a ``--local`` run's cluster is ``local``. ``--fetch`` first copies
the runs recorded on the cluster itself (the scheduled re-checks' in pod-0's
workspace) that the history lacks. Exit 0, or 2 for a bad cluster name, output format,
unreadable history or a platform without fetch, 3 when the cluster cannot be reached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mlenv.cli._common import err, guarded, repo_root
from mlenv.cli._output import check_format
from mlenv.contract import dumps_safe, shown
from mlenv.errors import InputError


def _metrics(rec: dict[str, Any]) -> str:
    m = rec.get("metrics")
    if not isinstance(m, dict):
        return ""
    parts = []
    for check, ms in sorted(m.items()):
        if isinstance(ms, dict):
            parts += [
                f"{check.rsplit('.', 1)[-1]}.{k}={v:.4g}"
                for k, v in sorted(ms.items())
                if isinstance(v, int | float)
            ]
    return " ".join(parts)


def _versions(rec: dict[str, Any]) -> str:
    """``torch 2.4.0, driver 550.54`` over every node (values that differ between nodes are all shown)."""
    v = rec.get("versions")
    if not isinstance(v, dict):
        return ""
    out = []
    for key in ("torch", "driver", "cuda", "nccl"):
        vals = sorted(
            {
                str(n.get(key))
                for n in v.values()
                if isinstance(n, dict) and n.get(key) not in (None, "not present")
            }
        )
        if vals:
            out.append(f"{key} {'/'.join(vals)}")
    return ", ".join(out)


def _started(value: object) -> str:
    """``2026-11-27 08:51Z`` (UTC, to the minute) from the record's ISO time; as it is otherwise."""
    from datetime import UTC, datetime

    try:
        t = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value or "")
    return (t.astimezone(UTC) if t.tzinfo else t).strftime("%Y-%m-%d %H:%MZ")


def table(records: list[dict[str, Any]], width: int | None = None) -> tuple[str, bool]:
    """(rows, whether any was cut): run id, started (UTC), verdict, profile, ranks, config
    sha256 (12), versions, headline metrics. ``width``: cut each row there with ``…``
    (the headline metrics of a full run made rows of about 400 characters). Every value
    comes from the history file, so each is escaped before it can reach a terminal."""
    head = (
        "RUN",
        "STARTED",
        "VERDICT",
        "PROFILE",
        "RANKS",
        "CONFIG",
        "VERSIONS",
        "HEADLINE METRICS (median)",
    )
    rows = []
    for r in records:
        world = r.get("world") if isinstance(r.get("world"), dict) else {}
        rows.append(
            tuple(
                shown(x)
                for x in (
                    r.get("run_id"),
                    _started(r.get("started") or ""),
                    r.get("verdict"),
                    r.get("profile") or "",
                    (world or {}).get("ranks") or "",
                    str(r.get("config_sha256") or "-")[:12],
                    _versions(r),
                    _metrics(r),
                )
            )
        )
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in [head, *rows]
    ]
    cut = False
    if width is not None:
        for i, line in enumerate(lines):
            if len(line.rstrip()) > width:
                lines[i], cut = line[: width - 1].rstrip() + "…", True
    return "\n".join(line.rstrip() for line in lines), cut


def _width(wide: bool) -> int | None:
    """Where rows are cut: the terminal's width (``$COLUMNS`` when set); nothing is cut with
    ``--wide`` or when stdout is no terminal (a pipe into grep gets whole rows)."""
    import os
    import shutil
    import sys

    if wide:
        return None
    if os.environ.get("COLUMNS", "").isdigit() or sys.stdout.isatty():
        return max(shutil.get_terminal_size().columns, 60)
    return None


def _known_or_did_you_mean(cluster: str, root: Path) -> None:
    """A cluster with no history must at least be one we know (``local``, a config in
    ``clusters/``, a history folder); else exit 2 with the nearest names (``history locl``)."""
    import difflib

    from mlenv.acceptance.records.history import HISTORY_FILE, LOCAL_CLUSTER

    known = {LOCAL_CLUSTER}
    known |= {p.stem for p in (Path(repo_root()) / "clusters").glob("*.yaml")}
    known |= {p.parent.name for p in root.glob(f"*/{HISTORY_FILE}")}
    if cluster in known:
        return
    near = difflib.get_close_matches(cluster, sorted(known), n=3, cutoff=0.6)
    hint = (
        f"; did you mean {' or '.join(near)}?" if near else f"; known: {', '.join(sorted(known))}"
    )
    raise InputError(
        f"cluster {cluster!r}: no such cluster (no clusters/{cluster}.yaml, no runs in {root}){hint}"
    )


def _fetch(cluster: str, root: Path, *, to_stderr: bool) -> None:
    """the platform copies the cluster's new runs into ``root`` (a line per run; on
    stderr under ``-o json``, which keeps stdout one document). No such config, or a
    platform without fetch: exit 2; an unreachable cluster: exit 3."""
    import dataclasses

    from mlenv.cli._clusterctx import load_config, platform, session

    cfg = load_config(cluster)
    if cfg.name != cluster:
        raise InputError(
            f"--fetch: {cluster!r} is config {cfg.name!r}: name the cluster (mlenv history {cfg.name} "
            "--fetch)"
        )
    from mlenv.platforms.base import Unsupported

    s = session()
    try:
        platform(cfg).history_fetch(
            cfg, dataclasses.replace(s, say=s.warn) if to_stderr else s, history_root=root
        )
    except Unsupported as e:
        raise InputError(
            str(e).replace("mlenv history-fetch:", "mlenv history --fetch:", 1)
        ) from None


@guarded
def history_cmd(
    cluster: Annotated[
        str, typer.Argument(help="Cluster name (`local` for mlenv acceptance --local runs).")
    ],
    output: Annotated[
        str, typer.Option("-o", "--output", help="table (default) or json.")
    ] = "table",
    limit: Annotated[int, typer.Option("--limit", help="Newest N runs (0: all).")] = 0,
    history_dir: Annotated[
        Path | None,
        typer.Option(
            "--history-dir",
            help="History root (default $MLENV_HISTORY_DIR, else reports/ in the repository).",
        ),
    ] = None,
    wide: Annotated[
        bool,
        typer.Option(
            "--wide", help="Whole rows, every headline metric (a terminal cuts them at its width)."
        ),
    ] = False,
    fetch: Annotated[
        bool,
        typer.Option(
            "--fetch",
            help="First copy the runs recorded on the cluster (scheduled "
            "re-checks) that the history lacks: one record per run id.",
        ),
    ] = False,
) -> None:
    """List a cluster's acceptance runs, newest first."""
    from mlenv.acceptance.records import history

    check_format(output, ("table", "json"))
    if limit < 0:
        raise InputError(f"--limit: expected 0 or more, got {limit}")
    root = history_dir or history.default_root(repo_root())
    path = history.history_path(root, cluster)
    if fetch:
        _fetch(cluster, root, to_stderr=output == "json")
    if not path.is_file():
        _known_or_did_you_mean(cluster, root)
    records, notes = history.read(path)
    for n in notes:
        err(f"note: {n}")
    if (
        cluster == history.LOCAL_CLUSTER
    ):  # --local runs' default folders: name the ones a kill left behind
        from mlenv.acceptance.records.rundir import DEFAULT_PARENT, unfinalised

        # acceptance --local writes under the folder it was started in: the checkout's, and here
        seen: set[Path] = set()
        for parent in (Path(repo_root()) / DEFAULT_PARENT, Path(DEFAULT_PARENT)):
            if parent.resolve() not in seen:
                seen.add(parent.resolve())
                for d in unfinalised(parent):
                    err(f"note: {d}: a run that was never finalised (killed?): mlenv finalize {d}")
    records = history.newest_first(history.distinct(records))
    if limit:
        records = records[:limit]
    if output == "json":
        typer.echo(dumps_safe(records, indent=2))
        return
    if not records:
        err(f"no runs recorded for cluster {cluster!r} ({path})")
        return
    text, cut = table(records, _width(wide))
    typer.echo(text)
    if cut:
        err(
            "note: rows cut at the terminal's width (…): --wide shows whole rows, -o json everything"
        )


def register(app: typer.Typer) -> None:
    """Add ``history`` to the app."""
    app.command("history")(history_cmd)
