"""The exit line a failing verb ends with under make (the entry point in process; ``python
-m mlenv`` outside an install, a process of its own, is
``tests/integration/test_cli_processes.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import mlenv.cli.app as cli_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "code,line",
    [(1, "mlenv-exit: 1 (FAIL)"), (2, "mlenv-exit: 2 (bad input)"), (3, "mlenv-exit: 3 (ERROR)")],
)
def test_under_make_a_failing_verb_ends_with_its_exit_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int, line: str
) -> None:
    def verb() -> None:
        print("error: something", file=sys.stderr)
        raise SystemExit(code)

    monkeypatch.setattr(cli_app, "app", verb)
    monkeypatch.setenv("MLENV_EXIT_LINE", "1")
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    assert info.value.code == code  # the code itself is unchanged
    assert capsys.readouterr().err.splitlines() == ["error: something", line]


def test_the_exit_line_only_under_make_and_only_on_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    codes = iter([0, 3])

    def verb() -> None:
        raise SystemExit(next(codes))

    monkeypatch.setattr(cli_app, "app", verb)
    monkeypatch.setenv("MLENV_EXIT_LINE", "1")
    with pytest.raises(SystemExit):
        cli_app.main()  # success: nothing added
    monkeypatch.delenv("MLENV_EXIT_LINE")
    with pytest.raises(SystemExit):
        cli_app.main()  # not under make: nothing added
    assert capsys.readouterr().err == ""
