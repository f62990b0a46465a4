"""Read the acceptance suite's input files (options, baselines) with the cluster configs' strict YAML reader.

:func:`mlenv.config.yamlpos.parse` refuses what PyYAML's ``safe_load`` lets through
silently: a duplicated key (PyYAML keeps the last one), several documents, alias bombs,
binary content, an unreadable tagged value. Every refusal is an InputError with
``file:line:col``. JSON files go through the same reader (JSON is YAML flow syntax).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlenv.config.yamlpos import MAX_BYTES, Parsed, parse
from mlenv.errors import InputError


def is_blank(raw: bytes) -> bool:
    """True for a document of nothing but blank lines, comments and ``---``."""
    return not any(
        line.strip() and not line.lstrip().startswith(b"#") and line.strip() != b"---"
        for line in raw.splitlines()
    )


def parse_strict(
    raw: bytes, file: str, what: str, *, json: bool = False
) -> tuple[Any, Parsed | None]:
    """(data, positions) of one YAML (or, with ``json``, JSON) document; ``(None, None)`` when blank.

    Raises InputError naming ``file``, line and column for anything the strict reader
    refuses; ``what`` names the kind of file in the messages ("options file").
    """
    if is_blank(raw):
        return None, None
    if json:
        # JSON allows tabs as whitespace, YAML's indentation does not; a tab inside a JSON
        # string is invalid anyway, so spaces change nothing else (columns included).
        raw = raw.replace(b"\t", b" ")
    parsed = parse(raw, file)
    errors = [d for d in parsed.diagnostics if d.severity == "error"]
    if errors:
        d = errors[0]
        msg = d.message.replace(
            "a cluster config", f"an {what}" if what[:1] in "aeiou" else f"a {what}"
        )
        if msg.startswith("not valid YAML: "):
            msg = "invalid YAML: " + msg[len("not valid YAML: ") :]
        hint = d.hint.replace(
            "a cluster config", f"an {what}" if what[:1] in "aeiou" else f"a {what}"
        )
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        path = f"{d.path}: " if d.path else ""
        raise InputError(
            f"{file}:{d.line}:{d.col}: {path}{msg}" + (f" ({hint})" if hint else "") + more
        )
    return parsed.data, parsed


def read_strict(path: Path, what: str) -> tuple[Any, Parsed | None]:
    """:func:`parse_strict` of the file at ``path`` (``.json`` files as JSON); InputError if unreadable."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror or e}") from None
    return parse_strict(raw, str(path), what, json=path.suffix == ".json")
