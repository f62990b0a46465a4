"""Error types shared by every layer, each carrying the exit code of the contract.

Exit codes (docs/contracts.md): 0 success/PASS, 1 acceptance FAIL, 2 invalid input,
3 ERROR (infrastructure unreachable, timeout, tool failure). Only ``mlenv.cli`` turns
these into messages and exit codes; every other layer raises them.

Stdlib only: ``mlenv.pod`` and ``mlenv.acceptance`` import this inside pods.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_INPUT = 2
EXIT_ERROR = 3
# A run someone stopped (verdict INTERRUPTED): 128 + the signal, as shells report it; a
# SIGHUP is reported as a SIGTERM (both mean "the session asked us to stop").
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a mistyped choice, or "": the same word in other case
    (``RDMA``), then the only choice it begins (``comput`` → ``compute``), then the closest
    by spelling."""
    known = list(dict.fromkeys(choices))
    folded = [c for c in known if c.lower() == value.lower()]
    starts = [c for c in known if value and c.startswith(value)]
    close = difflib.get_close_matches(value, known, n=1)
    pick = folded or (starts if len(starts) == 1 else []) or close
    return f" (did you mean {pick[0]!r}?)" if pick else ""


@dataclass(frozen=True)
class Diagnostic:
    """One problem in an input file, located as precisely as we can.

    ``line`` and ``col`` are 1-based; 0 means unknown. ``path`` is a JSON path such as
    ``network.rdma.devices[1]`` ("" for the document root).
    """

    file: str
    line: int
    col: int
    path: str
    message: str
    hint: str = ""
    severity: str = "error"  # "error" | "warning"

    def format(self) -> str:
        """Render as ``file:line:col: path: message (hint)``, the format editors jump to."""
        where = f"{self.file}:{self.line}:{self.col}"
        what = f"{self.path}: {self.message}" if self.path else self.message
        if self.severity == "warning":
            what = f"warning: {what}"
        return f"{where}: {what}" + (f" ({self.hint})" if self.hint else "")


class MlenvError(Exception):
    """Base of every error the CLI knows how to report. Default: infrastructure (3)."""

    exit_code = EXIT_ERROR


class InputError(MlenvError):
    """Bad config, flags or files: the user can fix it (exit 2)."""

    exit_code = EXIT_INPUT


class ConfigError(InputError):
    """One or more diagnostics for one or more config files; all are reported at once."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        super().__init__("\n".join(d.format() for d in diagnostics))


class InfraError(MlenvError):
    """Something outside the user's input failed: API unreachable, timeout, tool missing (3)."""

    exit_code = EXIT_ERROR


class Interrupted(KeyboardInterrupt):
    """Someone stopped this process with a signal (SIGINT, SIGTERM, SIGHUP): handled like
    Ctrl-C (a KeyboardInterrupt), with the signal's name and exit code (130 / 143)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.exit_code = EXIT_SIGINT if signal_name == "SIGINT" else EXIT_SIGTERM
