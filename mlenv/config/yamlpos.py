"""Parse YAML into plain data plus the source position of every key and value.

PyYAML's ``safe_load`` forgets where things came from; we compose the node graph
(which keeps marks) and build the data ourselves, so every diagnostic can say
``file:line:col``. Building it ourselves also lets us refuse duplicate keys (PyYAML
silently keeps the last one) and bound alias expansion (a "billion laughs" document
composes into a few nodes but expands into billions).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from mlenv.errors import Diagnostic

# A config is a few hundred lines; 1 MiB is generous and keeps a stray log file or
# disk image from being parsed at all.
MAX_BYTES = 1 << 20
# Upper bound on values built while expanding aliases; a 512-node config is ~1.5k.
MAX_NODES = 100_000

JsonPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Pos:
    """1-based line and column."""

    line: int
    col: int


@dataclass
class Parsed:
    """Result of :func:`parse`: the data (None on failure), positions and diagnostics."""

    data: Any = None
    # path → position of the value; key_pos: path → position of the mapping key naming it
    value_pos: dict[JsonPath, Pos] = field(default_factory=dict)
    key_pos: dict[JsonPath, Pos] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # paths whose value could not be constructed (reported; stood in for by None)
    unreadable: list[JsonPath] = field(default_factory=list)

    def pos(self, path: JsonPath, *, key: bool = False) -> Pos:
        """Best position for ``path``: its key (if asked and known), its value, else the nearest parent."""
        p = path
        while True:
            if key and p in self.key_pos:
                return self.key_pos[p]
            if p in self.value_pos:
                return self.value_pos[p]
            if not p:
                return Pos(1, 1)
            p = p[:-1]


def format_path(path: JsonPath) -> str:
    """``("network", "rdma", "devices", 1)`` → ``network.rdma.devices[1]``.

    Keys that are not plain identifiers (``rdma/rdma_shared_device_a``) are quoted:
    ``network.rdma.resources["rdma/rdma_shared_device_a"]``.
    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.replace("_", "a").replace("-", "a").isalnum() and part[:1].isalpha():
            out += f".{part}" if out else part
        else:
            # JSON string syntax escapes quotes and control characters: a key holding a
            # newline must not split the one-line diagnostic.
            out += "[" + json.dumps(part, ensure_ascii=False) + "]"
    return out


# PyYAML's scanner is quadratic in the nesting of flow collections ([[[[...), and a
# real config nests a few levels; refuse deep flow nesting before handing it over.
MAX_FLOW_DEPTH = 64


def _flow_depth(text: str) -> int:
    """Deepest ``[``/``{`` nesting, counting brackets anywhere (even inside strings).

    Deliberately an over-estimate: quote tracking could be fooled into hiding a bomb,
    and no real config has 64 unmatched brackets.
    """
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


class _TooBig(Exception):
    pass


# PyYAML's constructors for explicit tags (`!!int abc`, `!!timestamp foo`, `!!bool maybe`,
# `!!float -`) raise plain Python errors, not YAMLError; all of them are the user's input.
_CONSTRUCT_ERRORS = (
    yaml.YAMLError,
    ValueError,
    TypeError,
    AttributeError,
    OverflowError,
    LookupError,
)
_YAML_TAG = "tag:yaml.org,2002:"


def _unreadable(node: yaml.Node, error: Exception) -> str:
    """Why a scalar could not be built, in YAML terms (never a Python exception text)."""
    if isinstance(error, yaml.YAMLError):
        return str(getattr(error, "problem", None) or error)
    tag = "!!" + node.tag[len(_YAML_TAG) :] if node.tag.startswith(_YAML_TAG) else node.tag
    text = str(node.value)
    if tag == "!!int" and re.fullmatch(r"[-+]?[0-9_]+", text):
        # Python refuses to convert integers of more than 4300 digits.
        return f"an integer of {len(text)} characters is too large"
    shown = text if len(text) <= 40 else text[:37] + "..."
    return f"{shown!r} is not a valid {tag}"


class _Builder:
    """Builds Python data from composed nodes, recording positions as it goes."""

    def __init__(self, file: str, out: Parsed) -> None:
        self.file = file
        self.out = out
        self.count = 0
        self.constructor = yaml.constructor.SafeConstructor()

    def _pos(self, node: yaml.Node) -> Pos:
        return Pos(node.start_mark.line + 1, node.start_mark.column + 1)

    def _diag(self, node: yaml.Node, path: JsonPath, message: str, hint: str = "") -> None:
        p = self._pos(node)
        self.out.diagnostics.append(
            Diagnostic(self.file, p.line, p.col, format_path(path), message, hint)
        )

    def build(self, node: yaml.Node, path: JsonPath) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _TooBig
        self.out.value_pos.setdefault(path, self._pos(node))
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(child, (*path, i)) for i, child in enumerate(node.value)]
        try:
            return self.constructor.construct_object(node, deep=True)
        except _CONSTRUCT_ERRORS as e:
            self._diag(node, path, f"cannot read this value: {_unreadable(node, e)}")
            self.out.unreadable.append(path)
            return None

    def _pairs(self, node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
        """Key/value node pairs with YAML merge keys (``<<: *base``) expanded, explicit keys last."""
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        own: list[tuple[yaml.Node, yaml.Node]] = []
        for k, v in node.value:
            if k.tag == "tag:yaml.org,2002:merge":
                sources = v.value if isinstance(v, yaml.SequenceNode) else [v]
                for src in sources:
                    if isinstance(src, yaml.MappingNode):
                        merged.extend(self._pairs(src))
                    else:
                        self._diag(
                            src, (), "a merge key (<<) needs a mapping or a list of mappings"
                        )
            else:
                own.append((k, v))
        # Explicit keys override merged ones, as YAML 1.1 merge specifies.
        own_keys = {k.value for k, _ in own if isinstance(k, yaml.ScalarNode)}
        return [(k, v) for k, v in merged if k.value not in own_keys] + own

    def _mapping(self, node: yaml.MappingNode, path: JsonPath) -> dict[str, Any]:
        result: dict[str, Any] = {}
        seen: dict[str, Pos] = {}
        for knode, vnode in self._pairs(node):
            if not isinstance(knode, yaml.ScalarNode):
                self._diag(knode, path, "a key must be a plain string, not a list or mapping")
                continue
            try:
                key_obj = self.constructor.construct_object(knode, deep=True)
            except _CONSTRUCT_ERRORS as e:
                self._diag(knode, path, f"cannot read this key: {_unreadable(knode, e)}")
                continue
            if key_obj is None or isinstance(key_obj, (bool, int, float)):
                # `yes:`/`1:`/`null:` as keys are YAML 1.1 surprises; keep the text as written.
                key = knode.value
            else:
                key = str(key_obj)
            kpath = (*path, key)
            kp = self._pos(knode)
            if key in seen:
                first = seen[key]
                self._diag(
                    knode,
                    kpath,
                    f"duplicate key '{key}' (first defined at line {first.line})",
                    "YAML keeps only the last one; remove one of them",
                )
                continue
            seen[key] = kp
            self.out.key_pos[kpath] = kp
            result[key] = self.build(vnode, kpath)
        return result


def too_large(file: str, size: int) -> Diagnostic:
    """The diagnostic for a file over :data:`MAX_BYTES` (``size`` as known, maybe a lower bound)."""
    return Diagnostic(
        file,
        1,
        1,
        "",
        f"file is too large ({size} bytes; a cluster config is at most {MAX_BYTES} bytes)",
        "is this the right file?",
    )


def parse(raw: bytes, file: str) -> Parsed:
    """Parse one YAML document, never raising: problems become diagnostics.

    Refuses input over :data:`MAX_BYTES`, non-UTF-8 (binary) content, several
    documents, duplicate keys and alias expansion beyond :data:`MAX_NODES`.
    """
    out = Parsed()

    def fail(message: str, line: int = 1, col: int = 1, hint: str = "") -> Parsed:
        out.diagnostics.append(Diagnostic(file, line, col, "", message, hint))
        out.data = None
        return out

    if len(raw) > MAX_BYTES:
        out.diagnostics.append(too_large(file, len(raw)))
        return out
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        before = raw[: e.start]
        line = before.count(b"\n") + 1
        col = e.start - (before.rfind(b"\n") + 1) + 1
        return fail(
            f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); is this a binary file?",
            line,
            col,
        )
    if "\x00" in text:
        i = text.index("\x00")
        line = text.count("\n", 0, i) + 1
        return fail(
            "contains a NUL character; is this a binary file?",
            line,
            i - (text.rfind("\n", 0, i) + 1) + 1,
        )
    if _flow_depth(text) > MAX_FLOW_DEPTH:
        return fail("document is nested too deeply for a cluster config")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = ", ".join(p for p in (e.context, e.problem) if p) or "invalid YAML"
        hint = ""
        if e.context_mark is not None and mark is not None and e.context_mark.line != mark.line:
            hint = f"the construct started at line {e.context_mark.line + 1}"
        if "'\\t'" in problem:
            hint = "indent with spaces: YAML does not allow tabs"
        elif "another document" in problem:
            hint = "a cluster config is one document: remove the '---' separator"
        if mark is None:
            return fail(f"not valid YAML: {problem}")
        return fail(f"not valid YAML: {problem}", mark.line + 1, mark.column + 1, hint)
    except yaml.YAMLError as e:
        return fail(f"not valid YAML: {e}")
    except RecursionError:
        # PyYAML's composer recurses once per nesting level.
        return fail("document is nested too deeply for a cluster config")
    if node is None:
        return fail("file is empty: expected a mapping with at least 'cluster: {name, namespace}'")
    if not isinstance(node, yaml.MappingNode):
        kind = "a list" if isinstance(node, yaml.SequenceNode) else "a single value"
        p = node.start_mark
        return fail(
            f"expected a mapping (key: value lines) at the top level, got {kind}",
            p.line + 1,
            p.column + 1,
        )
    builder = _Builder(file, out)
    try:
        out.data = builder.build(node, ())
    except _TooBig:
        return fail(
            f"document expands to more than {MAX_NODES} values through aliases (an alias bomb?)"
        )
    except RecursionError:
        return fail("document is nested too deeply (recursive aliases?)")
    return out
