"""Seconds from the environment: the one parser behind MLENV_EXEC_TIMEOUT and MLENV_API_TIMEOUT_S."""

from __future__ import annotations

import pytest

from mlenv.cluster.connect import exec_timeout, seconds_from_env
from mlenv.errors import InputError

VAR = "MLENV_TEST_SECONDS"


@pytest.mark.parametrize("raw", ["", None])
def test_unset_or_empty_is_the_default(raw: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if raw is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, raw)
    assert seconds_from_env(VAR, 7.5) == 7.5


@pytest.mark.parametrize("raw,want", [("30", 30.0), ("0.25", 0.25), ("1e3", 1000.0)])
def test_a_positive_number_is_taken(raw: str, want: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, raw)
    assert seconds_from_env(VAR, 1.0) == want


# inf would reach subprocess and select() as an unbounded timeout (OverflowError there),
# nan compares false with everything: both are refused with the variable named.
@pytest.mark.parametrize("raw", ["soon", "0", "-1", "inf", "nan", "--30"])
def test_anything_else_is_a_located_input_error(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(InputError) as e:
        seconds_from_env(VAR, 1.0)
    assert str(e.value) == f"{VAR}={raw}: expected a positive number of seconds"


def test_an_upper_bound_is_exclusive_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "86399")
    assert seconds_from_env(VAR, 1.0, below=86400) == 86399
    for raw in ("86400", "inf", "0"):
        monkeypatch.setenv(VAR, raw)
        with pytest.raises(
            InputError, match=f"^{VAR}={raw}: expected a number of seconds between 0 and 86400$"
        ):
            seconds_from_env(VAR, 1.0, below=86400)


def test_exec_timeout_reads_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLENV_EXEC_TIMEOUT", "12")
    assert exec_timeout() == 12.0
    monkeypatch.setenv("MLENV_EXEC_TIMEOUT", "inf")
    with pytest.raises(InputError, match="MLENV_EXEC_TIMEOUT=inf"):
        exec_timeout()
