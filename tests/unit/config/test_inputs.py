"""Hostile or malformed input: never a traceback, always a located diagnostic."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
import yaml

from mlenv.config import check_file
from mlenv.config.yamlpos import MAX_BYTES, MAX_NODES, format_path, parse

from .conftest import BASE, Check


def _one(raw: bytes) -> str:
    parsed = parse(raw, "f.yaml")
    assert parsed.data is None
    assert len(parsed.diagnostics) == 1
    return parsed.diagnostics[0].format()


def test_huge_file_refused_without_parsing() -> None:
    raw = BASE.encode() + b"notes: '" + b"x" * MAX_BYTES + b"'\n"
    assert _one(raw).startswith(f"f.yaml:1:1: file is too large ({len(raw)} bytes")


def test_just_under_the_cap_parses() -> None:
    pad = MAX_BYTES - len(BASE) - len("notes: ''\n")
    parsed = parse((BASE + "notes: '" + "x" * pad + "'\n").encode(), "f.yaml")
    assert parsed.diagnostics == []
    assert len(parsed.data["notes"]) == pad


def test_random_binary() -> None:
    raw = bytes(range(256)) * 4
    # 0x80 at offset 128 is the first invalid UTF-8 byte; 0x0a at offset 10 ends line 1.
    assert (
        _one(raw)
        == "f.yaml:2:118: not UTF-8 text (byte 0x80 at offset 128); is this a binary file?"
    )
    assert (
        _one(bytes(range(1, 128))[:5] + b"\x00")
        == "f.yaml:1:6: contains a NUL character; is this a binary file?"
    )


def test_utf8_bom_is_fine(check: Check, tmp_path: Path) -> None:
    f = tmp_path / "bom.yaml"
    f.write_bytes(b"\xef\xbb\xbf" + BASE.encode())
    cluster, diags = check_file(f)
    assert cluster is not None and cluster.name == "demo" and diags == []


def test_billion_laughs_is_bounded() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    msg = _one("\n".join(lines).encode())
    assert (
        msg
        == f"f.yaml:1:1: document expands to more than {MAX_NODES} values through aliases (an alias bomb?)"
    )


def test_recursive_alias() -> None:
    msg = _one(b"cluster: &c\n  name: demo\n  self: *c\n")
    assert "nested too deeply" in msg or "alias bomb" in msg


def test_deep_nesting() -> None:
    assert _one(b"a: " + b"[" * 2000 + b"]" * 2000) == (
        "f.yaml:1:1: document is nested too deeply for a cluster config"
    )


def test_aliases_and_merge_keys_work(check: Check) -> None:
    text = BASE + ("limits_base: &lim {cpu: '4', memory: 8Gi}\n")
    # An unknown top-level key is still an error; anchors elsewhere are fine:
    _, diags = check(text)
    assert [d.path for d in diags] == ["limits_base"]
    text = (
        BASE
        + "resources:\n  limits: &lim {cpu: '4', memory: 8Gi}\n  requests:\n    <<: *lim\n    memory: 4Gi\n"
    )
    cluster, diags = check(text)
    assert diags == []
    assert cluster is not None
    assert cluster.resources.requests.cpu == "4" and cluster.resources.requests.memory == "4Gi"


def test_duplicate_keys_all_reported(check: Check) -> None:
    _, diags = check(BASE + "gpus:\n  per_node: 4\n  per_node: 8\n  type: a\n  type: b\n")
    assert [(d.line, d.path) for d in diags] == [(6, "gpus.per_node"), (8, "gpus.type")]


def test_yaml11_bool_key_kept_as_written(check: Check) -> None:
    _, diags = check(BASE + "dev_tools:\n  yes: true\n")
    assert [d.message.split(" (")[0] for d in diags] == ["unknown key 'yes'"]


def test_non_string_key(check: Check) -> None:
    _, diags = check(BASE + "? [a, b]\n: 1\n")
    assert [d.message for d in diags] == ["a key must be a plain string, not a list or mapping"]


def test_unreadable_file(tmp_path: Path) -> None:
    cluster, diags = check_file(tmp_path / "missing.yaml")
    assert cluster is None and diags[0].message.startswith("cannot read:")


def test_format_path() -> None:
    assert format_path(()) == ""
    assert format_path(("network", "rdma", "devices", 1)) == "network.rdma.devices[1]"
    assert format_path(("r", "rdma/x")) == 'r["rdma/x"]'
    assert format_path(("nccl", "env", "NCCL_ALGO")) == "nccl.env.NCCL_ALGO"


def test_huge_file_is_refused_from_its_size_without_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    size = 64 * MAX_BYTES
    with big.open("wb") as f:
        f.truncate(size)  # sparse: costs no disk
    tracemalloc.start()
    try:
        cluster, diags = check_file(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert cluster is None
    assert [d.format() for d in diags] == [
        f"{big}:1:1: file is too large ({size} bytes; a cluster config is at most {MAX_BYTES} bytes) "
        "(is this the right file?)"
    ]
    assert peak < 2 * MAX_BYTES, f"read {peak} bytes of a {size}-byte file"


def test_format_path_keeps_one_line() -> None:
    assert format_path(("nccl", "env", "NCCL_ALGO\n")) == 'nccl.env["NCCL_ALGO\\n"]'
    assert format_path(("r", 'a"b')) == 'r["a\\"b"]'


def test_bad_explicit_tags_are_located(check: Check) -> None:
    _, diags = check(BASE + "notes: !!float x\n!!int 1.5: a\ngpus: {per_node: !!bool maybe}\n")
    assert [d.format().split(": ", 1)[1] for d in diags] == [
        "notes: cannot read this value: 'x' is not a valid !!float",
        "cannot read this key: '1.5' is not a valid !!int",
        "gpus.per_node: cannot read this value: 'maybe' is not a valid !!bool",
    ]


_TAGS = sorted("!!" + t.rsplit(":", 1)[-1] for t in yaml.SafeLoader.yaml_constructors if t)


@pytest.mark.parametrize("tag", _TAGS)
def test_every_safe_tag_with_junk_gives_diagnostics_not_exceptions(tag: str) -> None:
    for junk in ("abc", "-", "+", "maybe", "0x", "2001-13-45", "9" * 5000, "''"):
        for text in (f"notes: {tag} {junk}\n", f"{tag} {junk}: 1\n"):
            parsed = parse((BASE + text).encode(), "f.yaml")  # must not raise
            assert all(d.line >= 4 for d in parsed.diagnostics), parsed.diagnostics
