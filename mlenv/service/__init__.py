"""The service layer: what a verb does, below the CLI that parses, checks and prints.

A service function takes checked arguments, raises the typed errors of
:mod:`mlenv.errors` and returns data or an exit code; its lines reach the user only through
the :class:`Notifier` its caller passes in (torchx's ``Runner`` under its CLI is the
model). A callback, not returned lines: ``acceptance --local`` runs for minutes and says
what it does as it does it (the launch, a stop, a timeout), and a stop or a failed write
midway must leave the lines said so far on the terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Line = Callable[[str], None]


def _drop(text: str) -> None:
    del text


@dataclass(frozen=True)
class Notifier:
    """Where a service's lines go. The CLI binds each to its stream (``out`` to stdout,
    the others to stderr, ``note`` dropped by ``--quiet``, ``debug`` shown by ``-v``); a
    test records them."""

    out: Line  # the result: a verdict block, a bundle's path, the trees written
    note: Line  # progress and notices
    err: Line  # problems and stop notices, always shown
    debug: Line = _drop  # details (the launcher's command line)
