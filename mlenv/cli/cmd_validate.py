"""``mlenv validate``: check cluster configs and report every problem of every file at once."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from mlenv.cli._common import err, guarded, repo_root
from mlenv.cli._output import OutputOpt, check_format, emit
from mlenv.errors import EXIT_INPUT, Diagnostic, InputError


@guarded
def validate(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            help="Cluster names (clusters/<name>.yaml) or config files; default: every clusters/*.yaml."
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Validate cluster configs: schema and semantic rules, all errors of all files in one run.

    Each problem prints as ``file:line:col: json.path: message (hint)``. Exit 0 when
    every file is valid, 2 otherwise. -o json|yaml also prints every file's result and
    diagnostics as one document on stdout.
    """
    # Imported here so `mlenv --help` does not pay for YAML/jsonschema.
    from mlenv.config.loader import check_file, cluster_files, duplicate_names, resolve

    output = check_format(output)
    root = Path(repo_root())
    diags: list[Diagnostic] = []
    files: list[Path] = []
    if targets:
        unknown: list[str] = []
        for t in targets:
            try:
                files.append(resolve(t, root))
            except InputError as e:
                unknown.append(str(e))
        for u in unknown:
            err(f"error: {u}")
        if unknown and not files:
            raise typer.Exit(EXIT_INPUT)
    else:
        files = cluster_files(root)
        if not files:
            raise InputError(f"no cluster configs found: {root / 'clusters'}/*.yaml")
        unknown = []

    clusters = []
    bad_files = 0
    per_file: list[dict[str, Any]] = []
    for f in files:
        cluster, file_diags = check_file(f)
        diags += file_diags
        per_file.append(
            {
                "file": str(f),
                "cluster": cluster.name if cluster else None,
                "valid": cluster is not None,
                "diagnostics": [asdict(d) for d in file_diags],
            }
        )
        if cluster is None:
            bad_files += 1
        else:
            clusters.append(cluster)
    if not targets:
        # Two files with one cluster.name would render into the same k8s/<name>/.
        dup = duplicate_names(clusters)
        diags += dup
        bad_files += len(dup)

    for d in diags:
        err(d.format())
    # An unknown name counts as one error in one (missing) file.
    errors = sum(1 for d in diags if d.severity == "error") + len(unknown)
    if output is not None:
        dup_diags = [
            asdict(d) for d in diags if not any(asdict(d) in p["diagnostics"] for p in per_file)
        ]
        emit(
            {
                "valid": errors == 0,
                "errors": errors,
                "files": per_file,
                "unknown": list(unknown),
                "diagnostics": dup_diags,
            },
            output,
        )
    if errors:
        err(
            f"{errors} error(s) in {bad_files + len(unknown)} of {len(files) + len(unknown)} file(s)"
        )
        raise typer.Exit(EXIT_INPUT)
    if output is None:
        typer.echo(f"ok: {len(files)} file(s)")


def register(app: typer.Typer) -> None:
    """Add ``mlenv validate`` to ``app``."""
    app.command("validate")(validate)
