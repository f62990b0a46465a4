"""The JSON Schema of a cluster config, and its errors turned into located diagnostics.

The schema is package data (``mlenv/config/cluster.schema.json``) so an installed
mlenv validates without the repository; ``clusters/cluster.schema.json`` links to it
for editors.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

from mlenv.config.yamlpos import JsonPath, Parsed, format_path
from mlenv.errors import Diagnostic

SCHEMA_FILE = "cluster.schema.json"

_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
    "null": "null",
}


# Where a config that passed the schema is remembered (see valid_mark).
CACHE_ENV = "MLENV_CACHE_DIR"


@functools.cache
def _schema_text() -> str:
    return resources.files("mlenv.config").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


@functools.cache
def schema() -> dict[str, Any]:
    """The parsed cluster config schema (cached)."""
    loaded: dict[str, Any] = json.loads(_schema_text())
    return loaded


def cache_dir() -> Path | None:
    """mlenv's own cache: ``$MLENV_CACHE_DIR``, else ``$XDG_CACHE_HOME/mlenv``, else
    ``~/.cache/mlenv``; None where there is no home to put it in (a pod's arbitrary UID
    with no passwd entry and no HOME)."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "mlenv"
    try:
        return Path.home() / ".cache" / "mlenv"
    except RuntimeError:
        return None


def _tagged(value: Any) -> Any:
    # a YAML value that is no JSON (a date): by its type and text, never mistaken for a string
    return {"$mlenv-python": type(value).__name__, "repr": repr(value)}


def valid_mark(data: Any) -> Path | None:
    """The file that says ``data`` passed this schema with this validator: named by a
    digest of the document, the schema and this module's source (a change to any of them
    is a new name). Every verb loads its config, and importing jsonschema (attrs,
    referencing) and running it was about 80 ms of each verb's start; a document that
    passed once passes again. None where the document has no stable text, or mlenv no
    cache."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        doc = json.dumps(data, sort_keys=True, allow_nan=False, default=_tagged)
    except (TypeError, ValueError):
        return None
    h = hashlib.sha256()
    for part in (_schema_text().encode(), Path(__file__).read_bytes(), doc.encode()):
        h.update(len(part).to_bytes(8, "big") + part)
    return folder / "valid-configs" / h.hexdigest()


@functools.cache
def python_pattern(pattern: str) -> re.Pattern[str]:
    r"""A JSON Schema (ECMA-262) ``pattern`` compiled with ECMA's meaning of ``$``.

    In ECMA-262 (no ``m`` flag) ``$`` matches only at the end of the input; in Python
    it also matches before a trailing newline, so jsonschema's ``re.search`` would let
    ``"300\n"`` through ``^[0-9]+$``. Every ``$`` outside a character class becomes ``\Z``;
    the schema file itself stays plain ECMA for editors.
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "$":
            ch = r"\Z"
        out.append(ch)
        i += 1
    return re.compile("".join(out))


@functools.cache
def _validator() -> Any:
    # jsonschema is imported here, not at module import, to keep `mlenv --help` fast.
    import jsonschema

    def pattern(validator: Any, patrn: str, instance: Any, _schema: Any) -> Any:
        if validator.is_type(instance, "string") and not python_pattern(patrn).search(instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {patrn!r}")

    cls = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        jsonschema.Draft202012Validator, {"pattern": pattern}
    )
    return cls(schema())


def describe(value: Any) -> str:
    """How a YAML value reads in a message: its kind and (short) text."""
    if value is None:
        return "null (an empty value)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"string {shown!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__} value"


def _types(t: str | list[str]) -> str:
    names = [t] if isinstance(t, str) else list(t)
    words = [_TYPE_WORDS.get(n, n) for n in names if n != "null"]
    return " or ".join(words) if words else "null"


def _sub_schema(path: JsonPath) -> dict[str, Any] | None:
    """The schema node that describes the value at ``path`` (properties only)."""
    node: dict[str, Any] = schema()
    for part in path:
        if isinstance(part, int):
            items = node.get("items")
            if not isinstance(items, dict):
                return None
            node = items
            continue
        props = node.get("properties", {})
        if part in props:
            node = props[part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node


def _close(word: str, choices: list[str]) -> str:
    for c in choices:  # `warn` for `WARN`: the schema is case-sensitive, people are not
        if c.lower() == word.lower():
            return f"did you mean '{c}'?"
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else ""


def schema_diagnostics(parsed: Parsed, file: str) -> list[Diagnostic]:
    """Every schema violation of ``parsed.data``, located and worded for humans; none,
    without running the validator, for a document remembered as valid (:func:`valid_mark`),
    and a document with no violation at all is remembered (an unwritable cache only
    means it is validated each time)."""
    mark = None if parsed.unreadable else valid_mark(parsed.data)
    if mark is not None and mark.is_file():
        return []
    out: list[Diagnostic] = []
    errors = 0
    for error in _validator().iter_errors(parsed.data):
        errors += 1
        path = tuple(error.absolute_path)
        # A value YAML could not construct was reported already; its stand-in None is not news.
        if any(path[: len(u)] == u for u in parsed.unreadable):
            continue
        out.extend(_translate(error, parsed, file))
    if errors == 0 and mark is not None:
        try:
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.touch()
        except OSError:
            pass
    # jsonschema's order follows the schema; humans read files top to bottom.
    out.sort(key=lambda d: (d.line, d.col, d.path, d.message))
    return out


def _translate(error: Any, parsed: Parsed, file: str) -> list[Diagnostic]:
    path: JsonPath = tuple(error.absolute_path)
    validator: str = error.validator
    value = error.instance
    sub: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}

    def diag(p: JsonPath, message: str, hint: str = "", *, key: bool = False) -> Diagnostic:
        pos = parsed.pos(p, key=key)
        return Diagnostic(file, pos.line, pos.col, format_path(p), message, hint)

    if validator == "additionalProperties" and isinstance(value, dict):
        known = sorted(sub.get("properties", {}))
        extras = [k for k in value if k not in known]
        where = format_path(path) or "the top level"
        return [
            diag(
                (*path, k),
                f"unknown key '{k}' (allowed under {where}: {', '.join(known)})",
                _close(str(k), known),
                key=True,
            )
            for k in extras
        ]
    if validator == "required":
        missing = [r for r in error.validator_value if isinstance(value, dict) and r not in value]
        where = format_path(path) or "the top level"
        return [diag(path, f"missing required key '{m}' under {where}", key=True) for m in missing]
    if validator == "type":
        expected = sub.get("x-expected") or _types(error.validator_value)
        return [diag(path, f"expected {expected}, got {describe(value)}")]
    if validator == "enum":
        allowed = [str(v) for v in error.validator_value]
        hint = _close(str(value), allowed) if isinstance(value, str) else ""
        return [diag(path, f"expected one of {', '.join(allowed)}, got {describe(value)}", hint)]
    if validator in ("minimum", "maximum"):
        parent = _sub_schema(path) or {}
        lo, hi = parent.get("minimum"), parent.get("maximum")
        if lo is not None and hi is not None:
            want = f"from {lo} to {hi}"
        else:
            want = f">= {lo}" if lo is not None else f"<= {hi}"
        return [diag(path, f"expected an integer {want}, got {describe(value)}")]
    if validator == "pattern":
        if "propertyNames" in error.schema_path:
            # The error sits on the mapping; the offending key is the instance.
            expected = sub.get("x-expected", f"a name matching {error.validator_value}")
            return [diag((*path, value), f"invalid key {value!r}: expected {expected}", key=True)]
        expected = sub.get("x-expected") or (_sub_schema(path) or {}).get(
            "x-expected", f"a string matching {error.validator_value}"
        )
        return [diag(path, f"expected {expected}, got {describe(value)}")]
    if validator == "uniqueItems":
        seen: set[str] = set()
        for i, item in enumerate(value):
            if repr(item) in seen:
                shown = repr(item) if isinstance(item, str) else describe(item)
                return [diag((*path, i), f"{shown} is listed twice")]
            seen.add(repr(item))
    return [diag(path, str(error.message))]
