"""`mlenv shell x -- cmd` from a script: a terminal is asked for only when there is one."""

from __future__ import annotations

import io

import pytest

from mlenv.cluster.oc import OcCluster


class _Stdin(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__("")
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize(
    "tool,tty,want",
    [
        ("kubectl", True, ["exec", "-it", "p", "--", "true"]),
        # a forced one made kubectl say "Unable to use a TTY - input is not a terminal"
        ("kubectl", False, ["exec", "-i", "p", "--", "true"]),
        ("oc", True, ["rsh", "p", "true"]),
        ("oc", False, ["rsh", "-T", "p", "true"]),
    ],
)
def test_interactive_asks_for_a_terminal_only_from_one(
    tool: str, tty: bool, want: list[str], fake_bin, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_bin.install(tool)
    monkeypatch.setattr("sys.stdin", _Stdin(tty))
    OcCluster().interactive("p", "ns", ["true"])
    (call,) = fake_bin.calls()
    assert call[:2] == ["-n", "ns"] and call[2:] == want, call
