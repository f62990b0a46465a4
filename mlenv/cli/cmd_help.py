"""``mlenv help [VERB]`` and ``mlenv completion bash|zsh|fish`` (kubectl habits)."""

from __future__ import annotations

import difflib
from typing import Annotated

import typer

from mlenv.cli._common import guarded
from mlenv.errors import InputError

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_MLENV_COMPLETE"


@guarded
def help_(
    ctx: typer.Context,
    verb: Annotated[
        str | None, typer.Argument(help="The verb to explain (default: all verbs).")
    ] = None,
) -> None:
    """Show the help of mlenv, or of one verb (the same as `mlenv VERB --help`)."""
    root = ctx.parent
    assert root is not None
    if verb is None:
        typer.echo(root.get_help())
        return
    group = root.command
    cmd = group.get_command(root, verb) if hasattr(group, "get_command") else None
    if cmd is None:
        names = sorted(group.list_commands(root)) if hasattr(group, "list_commands") else []
        close = difflib.get_close_matches(verb, names, n=1)
        raise InputError(
            f"no verb {verb!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; verbs: {', '.join(names)}"
        )
    sub = cmd.make_context(verb, [], parent=root, resilient_parsing=True)
    typer.echo(cmd.get_help(sub))


@guarded
def completion(
    shell: Annotated[str, typer.Argument(help="bash, zsh or fish.")],
) -> None:
    """Print the shell completion script: `source <(mlenv completion bash)`, or for zsh
    `mlenv completion zsh > "${fpath[1]}/_mlenv"`, for fish
    `mlenv completion fish > ~/.config/fish/completions/mlenv.fish`."""
    from typer._completion_shared import get_completion_script

    if shell not in SHELLS:
        raise InputError(f"completion: shell {shell!r} is not one of {', '.join(SHELLS)}")
    typer.echo(get_completion_script(prog_name="mlenv", complete_var=COMPLETE_VAR, shell=shell))


def register(app: typer.Typer) -> None:
    """Add ``help`` and ``completion`` to the app (and the completion classes the scripts
    call back into: ``_MLENV_COMPLETE=complete_bash mlenv``)."""
    from typer._completion_classes import completion_init

    completion_init()
    app.command("help")(help_)
    app.command("completion")(completion)
