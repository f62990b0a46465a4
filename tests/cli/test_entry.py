"""The two ways in that are not a verb: ``python -m mlenv`` outside an install, and the exit
line a failing verb ends with under make."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mlenv.cli.app as cli_app

ROOT = Path(__file__).resolve().parents[2]


def test_python_m_mlenv_outside_an_install_says_what_to_run_in_one_line() -> None:
    """`python3 -m mlenv` in a checkout with a Python that lacks the dependencies printed a
    ModuleNotFoundError traceback; now one line naming the two installs, exit 2."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # -S: no site-packages, so typer and the rest are missing, as in a bare system Python
    r = subprocess.run(
        [sys.executable, "-S", "-m", "mlenv", "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "mlenv: typer is missing from this Python: `make cli` installs mlenv into "
        ".venv-cli/bin, or `pipx install .`"
    ]


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
