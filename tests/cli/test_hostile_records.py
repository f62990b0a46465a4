"""Readers that one bad record cannot break: a bad history line is skipped and counted, a
results.json that cannot be read is a located exit 2, only regular files are opened, and
numbers are bounded where they are parsed (never NaN in JSON output)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_run_folders import A, B, _history, _rec, _run_folder
from typer.testing import CliRunner

from mlenv.acceptance.records import history
from mlenv.cli.app import app
from mlenv.contract import MAX_JSON_DEPTH, dumps_safe, loads_bounded, read_regular

HUGE = "1" + "0" * 4000  # 10**4000: Python's own int limit (4300 digits) lets it through
DEEP = "[" * 100_000 + "]" * 100_000


def _strict(text: str) -> Any:
    def refuse(name: str) -> object:
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "text",
    [
        HUGE,
        "-" + HUGE,
        "1e400",
        "NaN",
        "-Infinity",
        DEEP,
        "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
    ],
    ids=["huge", "-huge", "1e400", "nan", "-inf", "bomb", "deep"],
)
def test_bounded_loader_refuses_with_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        loads_bounded(text)


def test_bounded_loader_reads_what_runs_write() -> None:
    doc = {"n": 18446744073709551615, "x": -1.5e300, "l": [[{"a": None}]] * 3}
    assert loads_bounded(json.dumps(doc)) == doc


def test_non_finite_floats_are_written_as_null() -> None:
    assert _strict(dumps_safe({"a": float("nan"), "b": [float("inf"), 1.0]})) == {
        "a": None,
        "b": [None, 1.0],
    }


def _history_with_bad_lines(tmp_path: Path) -> Path:
    root = tmp_path / "h"
    _history(root, _rec(A, tmp_path / A, "PASS"))
    path = root / "local" / history.HISTORY_FILE
    with path.open("a") as f:
        f.write('{"run_id": "20260101-000100-cccccc", "world": {"ranks": ' + HUGE + "}}\n")
        f.write('{"run_id": "x", "n": ' + DEEP + "}\n")
        f.write('{"run_id": "20260101-000200-dddddd", "metrics": {"c": {"m": "fast"}}}\n')
    _history(root, _rec(B, tmp_path / B, "FAIL"))
    return root


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_one_bad_history_line_is_skipped_and_counted_once(tmp_path: Path, fmt: str) -> None:
    root = _history_with_bad_lines(tmp_path)
    # no terminal width: rows are not cut, so the one note is the skipped lines'
    argv = ["history", "local", "--history-dir", str(root), "-o", fmt]
    r = CliRunner().invoke(app, argv, env={"COLUMNS": None})
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        "note: history.jsonl: 3 unreadable line(s) skipped (line 2, 3, 4)"
    ]
    assert A in r.stdout and B in r.stdout
    if fmt == "json":
        assert [x["run_id"] for x in _strict(r.stdout)] == [B, A]


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_history_that_is_no_regular_file_is_refused_in_one_line(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "h" / "local" / history.HISTORY_FILE
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer for ever
    else:
        real = tmp_path / "elsewhere.jsonl"
        real.write_text(json.dumps(_rec(A, tmp_path, "PASS")) + "\n")
        path.symlink_to(real)
    r = CliRunner().invoke(app, ["history", "local", "--history-dir", str(tmp_path / "h")])
    assert r.exit_code == 2, r.output
    why = "a FIFO, not a regular file" if kind == "fifo" else "a symbolic link"
    assert r.stderr.splitlines() == [
        f"error: {path}: cannot read history: {why}: refused"
        + ("" if kind == "fifo" else " (never followed)")
    ]


@pytest.mark.parametrize("bad", [HUGE, DEEP, "NaN"], ids=["huge", "bomb", "nan"])
def test_an_unreadable_results_json_is_a_located_exit_2(tmp_path: Path, bad: str) -> None:
    _run_folder(tmp_path / "a", A, "PASS")
    _run_folder(tmp_path / "b", B, "PASS")
    results = tmp_path / "b" / "results.json"
    doc = json.loads(results.read_text())
    results.write_text(json.dumps(doc)[:-1] + ', "extra": ' + bad + "}")
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"error: {results}: not a results document: ")
    assert len(r.stderr.splitlines()) == 1


def test_a_fifo_results_json_is_refused_not_waited_on(tmp_path: Path) -> None:
    _run_folder(tmp_path / "a", A, "PASS")
    d = tmp_path / "b"
    d.mkdir()
    os.mkfifo(d / "results.json")
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(d)])
    assert r.exit_code == 2, r.output
    assert r.stderr == f"error: {d}: no results.json in this folder (not a report folder)\n"
    (d / "run.json").write_text("{}")
    r = CliRunner().invoke(app, ["finalize", str(d), "--history-dir", str(tmp_path / "h")])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [
        f"error: {d}: results.json is not a regular file (a FIFO, a device or a folder); not finalised"
    ]


def test_read_regular_never_follows_a_link_nor_reads_past_its_cap(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"x" * 10)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError, match="symbolic link"):
        read_regular(tmp_path / "link")
    with pytest.raises(OSError, match="more than 9"):
        read_regular(tmp_path / "real", max_bytes=9)
    assert read_regular(tmp_path / "real") == b"x" * 10


def test_compare_json_output_holds_no_nan(tmp_path: Path) -> None:
    """A metric that is not a number (``"inf"`` reads as infinity) used to reach -o json as
    ``Infinity``/``NaN``, which no JSON parser takes."""
    for name, rid, v in (("a", A, "inf"), ("b", B, "inf")):
        _run_folder(tmp_path / name, rid, "PASS")
        p = tmp_path / name / "results.json"
        doc = json.loads(p.read_text())
        doc["checks"][0]["metrics"]["tflops_fp32"] = v
        p.write_text(json.dumps(doc))
    r = CliRunner().invoke(
        app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "-o", "json", "--all"]
    )
    assert r.exit_code in (0, 1), r.output
    assert "NaN" not in r.stdout and "Infinity" not in r.stdout
    _strict(r.stdout)
