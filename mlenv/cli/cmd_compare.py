"""``mlenv compare RUN_A RUN_B``: per check, per place, per metric deltas; exit 1 on a regression.

A run is a report folder, a results.json, a sign-off bundle or a run id from the
history. B is worse than A beyond the tolerance (default 10 %, per metric in the
baseline's ``tolerances:``) → a regression, named with its check, rank/GPU or group,
even when both runs pass the absolute bar. Exit 0 none, 1 regression (the one exit 1 that
is not a FAIL verdict), 2 bad input (also: an INTERRUPTED run without --include-interrupted,
a folder that no longer holds the run asked for).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlenv.cli._common import err, guarded, repo_root
from mlenv.cli._output import check_format
from mlenv.contract import dumps_safe
from mlenv.errors import EXIT_FAIL, InputError


@guarded
def compare_cmd(
    run_a: Annotated[
        str, typer.Argument(help="The earlier run: report folder, results.json, bundle or run id.")
    ],
    run_b: Annotated[str, typer.Argument(help="The later run, judged against A.")],
    output: Annotated[
        str, typer.Option("-o", "--output", help="table (default) or json.")
    ] = "table",
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            help="Default tolerance as a fraction (0.1 = 10 %); "
            "the baseline's tolerances: still win.",
        ),
    ] = 0.10,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            help="Baseline file or GPU model for per-metric "
            "tolerances (default: the one B was judged with).",
        ),
    ] = None,
    all_rows: Annotated[
        bool, typer.Option("--all", help="Also show metrics that are not judged (counts, tails).")
    ] = False,
    history_dir: Annotated[
        Path | None,
        typer.Option(
            "--history-dir",
            help="Where run ids are looked up (default $MLENV_HISTORY_DIR, else reports/).",
        ),
    ] = None,
    include_interrupted: Annotated[
        bool,
        typer.Option(
            "--include-interrupted",
            help="Also compare a run someone stopped (verdict INTERRUPTED); refused otherwise.",
        ),
    ] = False,
) -> None:
    """Compare run B with run A; exit 1 when B regressed beyond the tolerance."""
    from mlenv.acceptance.judging import baselines
    from mlenv.acceptance.records.compare import (
        baseline_of,
        compare,
        load_run,
        refuse_interrupted,
        table,
    )
    from mlenv.acceptance.records.history import default_root

    check_format(output, ("table", "json"))
    if not 0 <= tolerance < 10:
        raise InputError(f"--tolerance: expected a fraction such as 0.1, got {tolerance}")
    root = history_dir or default_root(repo_root())
    a, b = load_run(run_a, root), load_run(run_b, root)
    if not include_interrupted:
        refuse_interrupted(a, b)
    base = baselines.resolve(baseline, []) if baseline else baseline_of(b)
    c = compare(a, b, base, tolerance)
    if output == "json":
        typer.echo(dumps_safe(c.to_dict(), indent=2))
    else:
        typer.echo(table(c, everything=all_rows))
    if c.regressions:
        if output == "json":
            err(f"{len(c.regressions)} regression(s) beyond tolerance")
        raise typer.Exit(EXIT_FAIL)


def register(app: typer.Typer) -> None:
    """Add ``compare`` to the app."""
    app.command("compare")(compare_cmd)
