"""The CLI boundary: the only place exceptions become messages and exit codes."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer

from mlenv.errors import EXIT_ERROR, EXIT_INPUT, ConfigError, MlenvError

P = ParamSpec("P")
R = TypeVar("R")


def err(msg: str) -> None:
    """Print one line for humans on stderr."""
    typer.echo(msg, err=True)


def guarded(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command: MlenvError → message + its exit code; anything else → exit 3.

    No traceback reaches the user unless MLENV_DEBUG=1 (and never locals: the app is
    created with ``pretty_exceptions_show_locals=False`` so tokens stay out of CI logs).
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except ConfigError as e:
            for d in e.diagnostics:
                err(d.format())
            n = sum(1 for d in e.diagnostics if d.severity == "error")
            err(f"{n} error(s)")
            raise typer.Exit(EXIT_INPUT) from None
        except MlenvError as e:
            err(f"error: {e}")
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err("interrupted")
            raise typer.Exit(130) from None
        except Exception as e:  # the boundary: nothing unexpected may print a traceback
            if os.environ.get("MLENV_DEBUG") == "1":
                raise
            err(f"internal error: {type(e).__name__}: {e} (set MLENV_DEBUG=1 for a traceback)")
            raise typer.Exit(EXIT_ERROR) from None

    return wrapper


def repo_root() -> str:
    """Directory holding ``clusters/`` (MLENV_ROOT, else the current directory)."""
    return os.environ.get("MLENV_ROOT", os.getcwd())


def stdout_is_tty() -> bool:
    """True when stdout is an interactive terminal (progress displays only then)."""
    return sys.stdout.isatty()
