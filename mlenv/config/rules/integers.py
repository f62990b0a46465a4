"""Quoted integers (``cross_nic: "1"``): the range the schema gives each integer key, for
the ASCII digit strings it accepts there too."""

from __future__ import annotations

from typing import Any

from mlenv.config.rules.common import _DIGITS, Checker
from mlenv.config.yamlpos import JsonPath


def quoted_integers(c: Checker) -> None:
    """The range of every quoted integer (``cross_nic: "1"``, as upstream ml-dev-env
    writes every NCCL knob). The schema accepts ASCII digit strings for each integer
    key and checks numbers' ranges; other strings are its pattern error."""
    for path, lo, hi in _INT_KNOBS:
        for where, v in _resolve(c.data, path):
            if not (isinstance(v, str) and _DIGITS.fullmatch(v)):
                continue
            want = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"
            digits = v.lstrip("0") or "0"
            if len(digits) > 6:  # never int() an arbitrarily long string
                c.err(where, f"expected an integer {want}, got a string of {len(v)} digits")
            elif (lo is not None and int(digits) < lo) or (hi is not None and int(digits) > hi):
                c.err(where, f"expected an integer {want}, got string {v!r}")


def _int_knobs() -> list[tuple[tuple[str, ...], int | None, int | None]]:
    """(path, minimum, maximum) of every integer key in the schema ('*' = any map key)."""
    from mlenv.config.schema import schema

    out: list[tuple[tuple[str, ...], int | None, int | None]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        t = node.get("type")
        if t == "integer" or (isinstance(t, list) and "integer" in t):
            out.append((path, node.get("minimum"), node.get("maximum")))
        for k, v in (node.get("properties") or {}).items():
            walk(v, (*path, k))
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], (*path, "*"))

    walk(schema(), ())
    return out


_INT_KNOBS = _int_knobs()


def _resolve(data: Any, path: tuple[str, ...]) -> list[tuple[JsonPath, Any]]:
    """The (location, value) pairs at ``path`` in ``data``; '*' walks every key of a map."""
    found: list[tuple[JsonPath, Any]] = [((), data)]
    for part in path:
        nxt: list[tuple[JsonPath, Any]] = []
        for where, node in found:
            if not isinstance(node, dict):
                continue
            keys = list(node) if part == "*" else [part] if part in node else []
            nxt.extend(((*where, k), node[k]) for k in keys)
        found = nxt
    return found
