"""mlenv/contract.py: the verdict→exit rule and reading a run's results.json."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from mlenv import contract


@pytest.mark.parametrize(
    ("verdict", "code"),
    [
        ("PASS", 0),
        ("FAIL", 1),
        ("ERROR", 3),
        (None, 3),
        ("pass", 3),
        ("", 3),
        (1, 3),
        (["PASS"], 3),
    ],
)
def test_only_pass_is_0_and_only_fail_is_1(verdict: object, code: int) -> None:
    assert contract.exit_for_verdict(verdict) == code


def test_read_results(tmp_path: Path) -> None:
    assert contract.read_results(tmp_path) is None  # absent
    p = tmp_path / contract.RESULTS_JSON
    p.write_text("{not json")
    assert contract.read_results(tmp_path) is None
    p.write_text("[1, 2]")
    assert contract.read_results(tmp_path) is None  # not an object
    p.write_text(json.dumps({"verdict": "PASS"}))
    assert contract.read_results(tmp_path) == {"verdict": "PASS"}


def test_an_earlier_runs_report_is_not_this_ones(tmp_path: Path) -> None:
    p = tmp_path / contract.RESULTS_JSON
    p.write_text(json.dumps({"verdict": "PASS"}))
    old = time.time() - 3600
    os.utime(p, (old, old))
    assert contract.read_results(tmp_path, since=time.time()) is None
    assert contract.read_results(tmp_path, since=old) == {"verdict": "PASS"}


def test_shown_escapes_what_a_terminal_would_act_on() -> None:
    from mlenv.contract import shown

    assert shown("rank 5 (h1, GPU 1) µs ✓") == "rank 5 (h1, GPU 1) µs ✓"  # printable text as it is
    assert (
        shown("a\x1b]0;t\x07b\rc\x9bd\u202ee\x7f\n") == "a\\x1b]0;t\\x07b\\rc\\x9bd\\u202ee\\x7f\\n"
    )
    assert shown("one\ntwo\tx\r", keep="\n\t") == "one\ntwo\tx\\r"
    assert shown(3) == "3"
