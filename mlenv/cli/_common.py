"""The CLI boundary: the only place exceptions become messages and exit codes."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

import typer

from mlenv.errors import (
    EXIT_ERROR,
    EXIT_INPUT,
    EXIT_SIGINT,
    ConfigError,
    InputError,
    MlenvError,
)

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader left

P = ParamSpec("P")
R = TypeVar("R")


def err(msg: str) -> None:
    """Print one line for humans on stderr. Control characters other than newline and tab
    are escaped: messages quote values from reports, history lines and configs, which
    must not drive the terminal."""
    from mlenv.contract import shown

    typer.echo(shown(msg, keep="\n\t"), err=True)


def quiet_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone (``| head``), so neither later
    output nor the interpreter's final flush raises BrokenPipeError again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):  # no real stdout (CliRunner): nothing to silence
        pass


def echo_out(text: str) -> bool:
    """Print ``text`` on stdout; False (and stdout silenced) when the reader has gone, so
    a verb can still exit by its own result rather than by the broken pipe."""
    try:
        typer.echo(text)
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
        return False
    return True


def error_line(message: str) -> str:
    """``error: MESSAGE``, once: a message that quotes oc/kubectl ("error: the server
    doesn't have a resource type ...") printed as ``error: error: ...``."""
    while message.lower().startswith("error: "):
        message = message[len("error: ") :]
    return f"error: {message}"


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
            err(error_line(str(e)))
            raise typer.Exit(e.exit_code) from None
        except (
            KeyboardInterrupt
        ) as e:  # Ctrl-C, or SIGTERM/SIGHUP where a verb turned them into one
            err("interrupted")
            raise typer.Exit(getattr(e, "exit_code", EXIT_SIGINT)) from None
        except BrokenPipeError:  # `mlenv … | head`: the reader left; say nothing more
            quiet_stdout()
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except Exception as e:  # the boundary: nothing unexpected may print a traceback
            if os.environ.get("MLENV_DEBUG") == "1":
                raise
            err(f"internal error: {type(e).__name__}: {e} (set MLENV_DEBUG=1 for a traceback)")
            raise typer.Exit(EXIT_ERROR) from None

    return wrapper


def repo_root() -> str:
    """Directory holding ``clusters/``: ``MLENV_ROOT`` when set, else the nearest folder
    from the current one upward that has a ``clusters/`` folder (as git finds ``.git``),
    else the current directory."""
    env = os.environ.get("MLENV_ROOT")
    if env:
        return env
    cwd = os.getcwd()
    here = cwd
    while True:
        if os.path.isdir(os.path.join(here, "clusters")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return cwd
        here = parent


@dataclass
class Settings:
    """The global options of one command (``mlenv [OPTIONS] VERB [OPTIONS]``): set by the
    root callback, then by the same options given after the verb (those win)."""

    namespace: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    request_timeout: float | None = None
    quiet: bool = False
    verbose: bool = False


SETTINGS = Settings()


def note(msg: str) -> None:
    """A notice or progress line on stderr; ``--quiet`` drops it (errors and warnings stay)."""
    if not SETTINGS.quiet:
        err(msg)


NOTICE_DIR_ENV = "MLENV_NOTICE_DIR"


def note_once(key: str, msg: str) -> None:
    """A notice that does not change between commands (kubectl instead of oc): on a terminal,
    once per terminal session (its session id, kept under ~/.cache/mlenv/notices/) and again
    under ``--verbose``; elsewhere (scripts, CI logs, where each command's output may be read
    alone) every time."""
    if SETTINGS.quiet:
        return
    if SETTINGS.verbose or not sys.stderr.isatty():
        err(msg)
        return
    folder = Path(
        os.environ.get(NOTICE_DIR_ENV)
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlenv" / "notices"
    )
    seen = folder / key
    session = str(os.getsid(0))
    try:
        if seen.read_text() == session:
            return
    except OSError:
        pass
    err(msg)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        seen.write_text(session)
    except OSError:
        pass  # an unwritable cache: the notice shows each time, nothing worse


def debug(msg: str) -> None:
    """A line only ``--verbose`` shows (the oc/kubectl command lines run)."""
    if SETTINGS.verbose and not SETTINGS.quiet:
        err(msg)


def run_folder(target: str) -> tuple[Path, str | None]:
    """(report folder, the run id it must hold) for a verb's RUN argument (bundle, metrics):
    a folder as given, or a run id's folder from the history (which must still hold that
    run: an old version reused one folder)."""
    from mlenv.acceptance.records.history import default_root, find_run
    from mlenv.contract import is_run_id

    report_dir = Path(target)
    if report_dir.is_dir():
        return report_dir, None
    if is_run_id(target):
        rec = find_run(default_root(repo_root()), target)
        if rec is not None and isinstance(rec.get("report_dir"), str):
            return Path(rec["report_dir"]), target
    raise InputError(f"{target}: no such report folder (nor a run id in the history)")
