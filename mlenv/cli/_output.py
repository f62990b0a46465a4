"""``-o json|yaml`` for the verbs that print a table (status, list-clusters, validate):
one document on stdout, for scripts and CI, as ``kubectl get -o json`` (i16)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from mlenv.errors import InputError

FORMATS = ("json", "yaml")

OutputOpt = Annotated[str | None, typer.Option(
    "--output", "-o", help="json or yaml: one machine-readable document on stdout instead of the table.")]


def check_format(fmt: str | None) -> None:
    """InputError unless ``fmt`` is None, json or yaml (checked before any work)."""
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"-o/--output must be one of {', '.join(FORMATS)}, got {fmt!r}")


def emit(doc: Any, fmt: str) -> None:
    """Print ``doc`` as JSON (2-space indent) or YAML (block style, no anchors/aliases)."""
    if fmt == "json":
        typer.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    from mlenv.render.serialize import dump_all

    typer.echo(dump_all([doc], sort_keys=False, default_flow_style=False, allow_unicode=True),
               nl=False)
