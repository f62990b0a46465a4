"""Jinja2 templates that values cannot break.

Templates live in ``mlenv/data/templates/`` (package data, so an installed ``mlenv``
finds them without the repository; ``templates/`` at the repository root is a symlink
to it, as the architecture's layout shows). Every inserted value goes through
``| tojson`` — JSON is valid YAML, so quotes, newlines, ``{{ }}``, ``: `` or ``#`` in a
value stay inside one scalar — and ``StrictUndefined`` turns a typo into an error.
The output is parsed back with ``yaml.safe_load_all`` and checked to be exactly one
mapping of the expected kind.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import yaml


def template_dir() -> Path:
    """Directory holding the ``*.yaml.j2`` templates (package data)."""
    return Path(str(resources.files("mlenv").joinpath("data", "templates")))


# A JSON surrogate-pair escape (not itself preceded by an escaped backslash).
_SURROGATE_PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _pair_to_yaml(m: re.Match[str]) -> str:
    hi, lo = int(m.group(2), 16), int(m.group(3), 16)
    return f"{m.group(1)}\\U{0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00):08x}"


def tojson(value: Any) -> str:
    """JSON text of ``value`` that YAML reads back as exactly ``value``.

    ASCII-only JSON, so no character can act as a YAML line break (U+0085, U+2028) or
    indicator. JSON writes characters beyond U+FFFF as surrogate pairs, which YAML
    decodes as two lone surrogates; those become YAML's ``\\UXXXXXXXX`` escape instead.
    """
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError naming the missing variable
    return _SURROGATE_PAIR.sub(_pair_to_yaml, json.dumps(value, ensure_ascii=True, sort_keys=True))


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # YAML, not HTML; safety comes from tojson on every value
        keep_trailing_newline=True,
    )
    env.filters["tojson"] = tojson  # replaces Jinja's HTML-oriented one
    return env


def render_template(template: str, kind: str, /, **values: Any) -> dict[str, Any]:
    """Render the file ``template`` with ``values`` and return the one manifest it produces.

    Raises ``ValueError`` if the output is not exactly one mapping of ``kind`` — that
    would be a template bug (a value cannot cause it), so it is not an InputError.
    """
    text = _environment().get_template(template).render(**values)
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ValueError(
            f"template {template} produced {len(docs)} documents, expected one mapping"
        )
    doc: dict[str, Any] = docs[0]
    if doc.get("kind") != kind:
        raise ValueError(
            f"template {template} produced kind {doc.get('kind')!r}, expected {kind!r}"
        )
    return doc
