"""``mlenv bundle RUN_DIR`` writes a run's sign-off bundle; ``mlenv bundle verify FILE`` checks one.

The bundle (layout in docs/acceptance.md) holds the report folder, the cluster config
with its sha256, the rendered manifests with their sha256 and whether each matches a
fresh ``render`` (as ``render --check`` would say), the baseline with every threshold's
source, the versions seen per node, and a MANIFEST of every file's sha256.
Exit: 0 written / verified, 1 the bundle does not verify (each bad file named),
2 bad input (no such run folder or file, unknown cluster, a SKIPPED run without
``--allow-skipped``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlenv.cli._common import err, guarded, repo_root, run_folder
from mlenv.errors import EXIT_FAIL, InputError


@guarded
def bundle_cmd(
    target: Annotated[
        str,
        typer.Argument(
            help="RUN_DIR (a report folder) or a run id from the history, or 'verify'.",
            metavar="RUN_DIR|RUN_ID|verify",
        ),
    ],
    file: Annotated[
        str | None, typer.Argument(help="With 'verify': the bundle to check.", metavar="[FILE]")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Archive path (default RUN_DIR/mlenv-bundle-<run id>.tar.gz)."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="Cluster whose config and k8s/ tree to include "
            "(default: the run's, from its record.json).",
        ),
    ] = None,
    mode: Annotated[
        str | None, typer.Option("--mode", help="rdma or tcp: only that tree (default: both).")
    ] = None,
    extract: Annotated[
        Path | None,
        typer.Option(
            "--extract",
            help="With 'verify': also write the verified files under DIR/<top folder>/ "
            "(exactly the bytes that were hashed; nothing when it does not verify).",
            metavar="DIR",
        ),
    ] = None,
    allow_skipped: Annotated[
        bool,
        typer.Option(
            "--allow-skipped",
            help="Bundle a SKIPPED run too (every check skipped: nothing measured).",
        ),
    ] = False,
) -> None:
    """Write a run's sign-off bundle, or verify one (mlenv bundle verify FILE [--extract DIR]: exit 0 ok, 1 naming each bad file)."""
    if target == "verify":
        if file is None:
            raise InputError("mlenv bundle verify FILE: give the bundle to check")
        _verify(Path(file), extract)
        return
    if extract is not None:
        raise InputError("--extract goes with mlenv bundle verify FILE")
    if file is not None:
        raise InputError(
            f"unexpected argument {file!r}: mlenv bundle RUN_DIR, or mlenv bundle verify FILE"
        )
    if mode is not None and mode not in ("rdma", "tcp"):
        raise InputError(f"--mode must be rdma or tcp, got {mode!r}")
    report_dir, asked = run_folder(target)
    from mlenv.signoff import make_bundle

    path, index = make_bundle(
        report_dir, Path(repo_root()), out, cluster, mode, asked, allow_skipped=allow_skipped
    )
    for note in index.get("left_out", []):
        err(f"note: {note}")
    from mlenv.acceptance.records.bundle import manifest_sha256
    from mlenv.signoff import ran_line

    ran = index.get("ran") or {}
    if cluster is not None and index["cluster"] != cluster:
        err(
            f"note: run {index['run_id']} ran on {ran.get('platform')}, not on cluster {cluster}: {cluster}'s config "
            "and manifests are in the bundle for reference only"
        )
    from mlenv.contract import shown

    # verdict, run id and world come from the report folder: escaped like compare and history
    typer.echo(
        shown(
            f"bundle: {path} ({index['verdict']}, run {index['run_id']}, cluster {index['cluster']}; "
            f"{ran_line(ran)})"
        )
    )
    typer.echo(
        f"MANIFEST sha256: {manifest_sha256(path)} (send it to the reviewer by a second channel)"
    )


def _verify(path: Path, extract: Path | None) -> None:
    from mlenv.acceptance.records.bundle import extract as extract_to
    from mlenv.acceptance.records.bundle import verify

    if not path.is_file():
        raise InputError(f"{path}: no such file")
    if extract is not None and extract.exists() and not extract.is_dir():
        raise InputError(f"--extract {extract}: not a folder")
    where = None
    if extract is not None:
        where, problems = extract_to(path, extract)
    else:
        problems = verify(path)
    for p in problems:
        err(p)
    if problems:
        err(f"{path}: does NOT verify ({len(problems)} problem(s))")
        raise typer.Exit(EXIT_FAIL)
    from mlenv.acceptance.records.bundle import manifest_sha256

    typer.echo(f"{path}: OK, every file matches its MANIFEST sha256")
    if where is not None:
        typer.echo(f"extracted: {where}/ (the verified bytes)")
    typer.echo(
        f"MANIFEST sha256: {manifest_sha256(path)} (compare it with the one the sender gave you)"
    )


def register(app: typer.Typer) -> None:
    """Add ``bundle`` to the app."""
    app.command("bundle")(bundle_cmd)
