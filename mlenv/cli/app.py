"""``mlenv``: one Typer app, one module per verb (``mlenv/cli/cmd_<verb>.py``).

Each verb module exposes ``register(app)``; heavy imports stay inside the command
functions so ``mlenv --help`` stays instant.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import typing
from typing import IO, Any

import typer
from typer import BadParameter
from typer._click.exceptions import ClickException, MissingParameter
from typer.core import TyperGroup

from mlenv.cli._common import err
from mlenv.cli._examples import help_with_examples
from mlenv.cli._globals import (
    ContextOpt,
    KubeconfigOpt,
    NamespaceOpt,
    QuietOpt,
    TimeoutOpt,
    VerboseOpt,
    reset,
    with_globals,
)
from mlenv.errors import EXIT_INPUT

# Order here is the order in `mlenv --help`.
VERB_MODULES = (
    "validate",
    "render",
    "list_clusters",
    "acceptance",
    "deploy",
    "status",
    "sync",
    "stage",  # mlenv and DeepSpeed onto Slurm/hosts nodes
    "shell",
    "logs",
    "port_forward",
    "launch",
    "teardown",
    "build",
    "devloop",
    "discover",
    "secrets",
    "bundle",
    "finalize",
    "history",
    "compare",
    "metrics",  # metrics RUN [--textfile DIR | --push URL]: the run's Prometheus series
    "quarantine",  # quarantine RUN, release RUN
    "help",  # help [VERB], completion bash|zsh|fish
)


class _Refused(ClickException):
    """A usage problem in mlenv's words: one ``error:`` line and exit 2, as for every other
    bad input (Click's own form is a usage block and a sentence from its type converter)."""

    exit_code = EXIT_INPUT

    def show(self, file: IO[Any] | None = None) -> None:
        err(f"error: {self.format_message()}")


def _given(args: list[str], opts: list[str]) -> str | None:
    """The value given on the command line to an option spelled one of ``opts``."""
    for i, word in enumerate(args):
        for opt in opts:
            if word == opt and i + 1 < len(args):
                return args[i + 1]
            if word.startswith(opt + "="):
                return word[len(opt) + 1 :]
    return None


def _kinds(annotation: Any) -> set[Any]:
    return {annotation, *typing.get_args(annotation)}


class _Group(TyperGroup):
    """The app's group: a verb's bad integer or missing cluster said the way mlenv says
    everything else."""

    def invoke(self, ctx: Any) -> Any:
        given = [*ctx._protected_args, *ctx.args]
        try:
            return super().invoke(ctx)
        except MissingParameter as e:
            if e.param is None or e.param.name != "cluster":
                raise
            from mlenv.cli._common import repo_root
            from mlenv.config import cluster_files

            verb = ctx.invoked_subcommand or "VERB"
            names = [f.stem for f in cluster_files(repo_root())]
            known = ", ".join(names) if names else "none: no clusters/*.yaml here"
            raise _Refused(
                f"mlenv {verb} needs a CLUSTER (clusters/<name>.yaml): {known}"
            ) from None
        except BadParameter as e:
            param = e.param
            kinds = _kinds(getattr(getattr(param, "type_descriptor", None), "annotation", None))
            wanted = "an integer" if int in kinds else "a number" if float in kinds else ""
            if param is None or not wanted or not getattr(param, "opts", None):
                raise
            value = _given(given, list(param.opts))
            got = f", got {value!r}" if value is not None else ""
            raise _Refused(f"{param.opts[0]}: expected {wanted}{got}") from None


app = typer.Typer(
    name="mlenv",
    cls=_Group,
    help="ml-dev-env: cluster YAML in, multi-node DeepSpeed on OpenShift and an acceptance verdict out.",
    add_completion=False,
    pretty_exceptions_show_locals=False,
    # Plain help formatting: rich markup costs ~0.1 s of start-up for `mlenv --help`.
    rich_markup_mode=None,
    # kubectl habit: -h is --help, for the app and every verb
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
    request_timeout: TimeoutOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """ml-dev-env: cluster YAML in, multi-node DeepSpeed on OpenShift and an acceptance verdict out.

    Global options go before or after the verb (`mlenv status x -n team-b`); see
    `mlenv help VERB`.
    """
    reset(
        namespace=namespace,
        context=context,
        kubeconfig=kubeconfig,
        request_timeout=request_timeout,
        quiet=quiet,
        verbose=verbose,
    )
    if version:
        from mlenv import __version__

        typer.echo(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


for _verb in VERB_MODULES:
    # no ModuleNotFoundError catch: a renamed or missing verb module must fail loudly
    # (tests/cli/test_verbs.py), not vanish from `mlenv --help`
    importlib.import_module(f"mlenv.cli.cmd_{_verb}").register(app)

# the global options after the verb too (defined once in mlenv/cli/_globals.py)
for _info in app.registered_commands:
    if _info.callback is not None:
        _name = _info.name or _info.callback.__name__.replace("_", "-")
        # every verb's help ends with examples (mlenv/cli/_examples.py)
        _doc = _info.help or inspect.getdoc(_info.callback) or ""
        _info.help = help_with_examples(_doc, _name)
        _info.callback = with_globals(_name, _info.callback)


# What each exit code means, for the line below (docs/contracts.md, "Exit codes").
EXIT_MEANINGS = {1: "FAIL", 2: "bad input", 3: "ERROR", 130: "INTERRUPTED", 143: "INTERRUPTED"}


def main() -> None:
    """Console-script entry point.

    Under make (the Makefile sets MLENV_EXIT_LINE=1 on its mlenv calls) a failing verb ends
    with one line giving its exit code: make itself exits 2 for any failed recipe, so FAIL
    (1) and ERROR (3) could not be told apart through a make target.
    """
    if os.environ.get("MLENV_EXIT_LINE") != "1":
        app()
        return
    try:
        app()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            meaning = EXIT_MEANINGS.get(code, "exit status")
            sys.stderr.write(f"mlenv-exit: {code} ({meaning})\n")
        raise


if __name__ == "__main__":
    main()
