"""``-o/--output``: the output format, the same option on every verb that has one.

``table`` (the default: for people), ``json``, and ``yaml`` where a verb prints objects
(status, list-clusters, validate, secrets): one document on stdout, for scripts and CI, as
``kubectl get -o json``. Anything else is refused with the allowed values. A path
to write to is ``--out`` (render, bundle), never ``-o``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mlenv.contract import dumps_safe
from mlenv.errors import InputError, did_you_mean

FORMATS = ("table", "json", "yaml")

OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="table (default), json or yaml: one machine-readable document on stdout instead of the table.",
    ),
]


def check_format(fmt: str | None, allowed: tuple[str, ...] = FORMATS) -> str | None:
    """``fmt`` as a machine format (json, yaml), None for the table; InputError naming the
    allowed values otherwise (checked before any work)."""
    if fmt is not None and fmt not in allowed:
        raise InputError(
            f"-o/--output must be one of {', '.join(allowed)}, got {fmt!r}"
            f"{did_you_mean(fmt, allowed)}"
        )
    return None if fmt == "table" else fmt


def emit(doc: Any, fmt: str) -> None:
    """Print ``doc`` as JSON (2-space indent) or YAML (block style, no anchors/aliases)."""
    if fmt == "json":
        typer.echo(dumps_safe(doc, indent=2, ensure_ascii=False))  # never NaN: not JSON
        return
    from mlenv.render.serialize import dump_all

    typer.echo(
        dump_all([doc], sort_keys=False, default_flow_style=False, allow_unicode=True), nl=False
    )
