"""every hostile string in every string field — validate says 0 or 2, never crashes,
and what it accepts renders without becoming shell code.

The fields are found by walking the JSON Schema (every string-typed leaf, list item and
map value), so a new field is covered the day it is added. Values come from
tests/data/hostile/strings.txt.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlenv.config import check_file
from mlenv.config.schema import schema
from mlenv.errors import InputError
from mlenv.render.plan import render_cluster

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "hostile" / "strings.txt"
# Two bases: CPU/TCP (local) and RDMA with devices, networks and resources (barcelona), so
# an accepted value in an RDMA field reaches the rendered RDMA environment too.
BASES = {
    name: yaml.safe_load((ROOT / "clusters" / f"{name}.yaml").read_text())
    for name in ("local", "barcelona")
}
BASE = BASES["local"]


def hostile_strings() -> list[str]:
    out = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line:
            continue
        out.append(ast.literal_eval('"' + line.replace('"', '\\"') + '"'))
    return out + ["x" * 10_000]


def string_fields() -> list[tuple[str, ...]]:
    """Paths of every string-typed leaf ('[]' a list item, '*' a map value)."""
    out: list[tuple[str, ...]] = []

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> None:
        t = node.get("type")
        types = t if isinstance(t, list) else [t]
        for k, v in (node.get("properties") or {}).items():
            walk(v, (*path, k))
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], (*path, "*"))
        if "array" in types and isinstance(node.get("items"), dict):
            walk(node["items"], (*path, "[]"))
        if "string" in types and not node.get("enum") and "properties" not in node:
            out.append(path)

    walk(schema(), ())
    return out


def inject(path: tuple[str, ...], value: str, base: str = "local") -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(BASES[base])
    node = data
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if part == "[]":
            continue
        nxt = path[i + 1] if not last else None
        if last or nxt in ("[]",):
            if nxt == "[]":
                node[part] = [value]
            elif part == "*":
                node["NCCL_X" if path[-2] == "env" else "example.com/res"] = value
            else:
                node[part] = value
            return data
        if part == "*":
            key = "NCCL_X" if path[i - 1] == "env" else "k"
            node = node.setdefault(key, {})
        else:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
    return data


FIELDS = string_fields()
VALUES = hostile_strings()
SHELL_META = re.compile(r"[$`;|&<>\n\\'\"]")


def _commands(objs: list[dict[str, Any]]) -> list[str]:
    """Every command/args word of every container in the rendered objects."""
    words: list[str] = []

    def walk(o: Any) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                if k in ("command", "args") and isinstance(v, list):
                    words.extend(str(w) for w in v)
                else:
                    walk(v)
        elif isinstance(o, list):
            for x in o:
                walk(x)

    walk(objs)
    return words


def test_every_string_field_is_found() -> None:
    flat = {".".join(p) for p in FIELDS}
    for must in (
        "cluster.name",
        "storage.class_rwx",
        "image.ref",
        "image.build.git_uri",
        "nccl.env.*",
        "security.service_account",
        "nodes.gpu_nodes.[]",
    ):
        assert must in flat, must


@pytest.mark.parametrize("field", FIELDS, ids=[".".join(f) for f in FIELDS])
def test_hostile_value_in_field_is_refused_or_harmless(
    field: tuple[str, ...], tmp_path: Path
) -> None:
    accepted = 0
    for i, (value, base) in enumerate((v, b) for v in VALUES for b in BASES):
        cfg_file = tmp_path / f"c{i}.yaml"
        cfg_file.write_text(json.dumps(inject(field, value, base)))  # JSON is YAML
        cluster, diags = check_file(cfg_file)  # must not raise
        if cluster is None:
            assert any(d.severity == "error" for d in diags)
            continue
        accepted += 1
        for mode in ("tcp",) if base == "local" else ("rdma",):  # barcelona's own mode
            try:
                objs = render_cluster(cluster, mode, None)
            except InputError:
                continue  # a located exit-2 error at render time is fine
            words = _commands(objs)
            if SHELL_META.search(value) and len(value) > 1:
                # accepted text may be data (an annotation, an env value), never a command word
                assert not any(value in w for w in words), (field, value)
    # free-text fields (description, notes) accept most of the corpus; names accept none
    if field[-1] in (
        "name",
        "namespace",
        "service_account",
        "class_rwx",
        "class_rwo",
        "ref",
        "git_uri",
        "git_ref",
        "dockerfile_path",
    ):
        assert accepted <= 4, f"{'.'.join(field)} accepted {accepted} hostile values (2 bases)"


def _cli_sample() -> list[tuple[tuple[str, ...], str]]:
    """Every field once and every value once, deterministically (the full product runs
    through the library above; this proves the CLI boundary too)."""
    n = max(len(FIELDS), len(VALUES))
    return [(FIELDS[i % len(FIELDS)], VALUES[i % len(VALUES)]) for i in range(n)]


def test_hostile_values_through_mlenv_validate_exit_0_or_2(tmp_path: Path) -> None:
    """`mlenv validate` itself: exit 0 or 2, never a traceback or exit 3; what it accepts
    `mlenv render` writes (or refuses with 2) without a traceback either."""
    from typer.testing import CliRunner

    from mlenv.cli.app import app

    runner = CliRunner()
    seen_fields, seen_values = set(), set()
    for i, (field, value) in enumerate(_cli_sample()):
        cfg_file = tmp_path / f"c{i}.yaml"
        cfg_file.write_text(json.dumps(inject(field, value)))
        r = runner.invoke(app, ["validate", str(cfg_file)], env={"MLENV_ROOT": str(ROOT)})
        assert r.exit_code in (0, 2), (field, value, r.output)
        assert (
            "Traceback" not in r.output
            and r.exception is None
            or isinstance(r.exception, SystemExit)
        ), (field, value, r.exception)
        if r.exit_code == 0:
            r = runner.invoke(
                app,
                ["render", str(cfg_file), "--out", str(tmp_path / "k8s")],
                env={"MLENV_ROOT": str(ROOT)},
            )
            assert r.exit_code in (0, 2) and "Traceback" not in r.output, (field, value, r.output)
        seen_fields.add(field)
        seen_values.add(value)
    assert seen_fields == set(FIELDS) and seen_values == set(VALUES)
