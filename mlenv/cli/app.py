"""``mlenv``: one Typer app, one module per verb (``mlenv/cli/cmd_<verb>.py``).

Each verb module exposes ``register(app)``; heavy imports stay inside the command
functions so ``mlenv --help`` stays instant.
"""

from __future__ import annotations

import importlib

import typer

# Order here is the order in `mlenv --help`.
VERB_MODULES = (
    "validate",
    "render",
    "list_clusters",
    "acceptance",
    "deploy",
    "status",
    "sync",
    "shell",
    "logs",
    "port_forward",
    "launch",
    "teardown",
    "build",
    "devloop",
    "discover",
    "bundle",
    "history",
    "compare",
)

app = typer.Typer(
    name="mlenv",
    help="ml-dev-env: cluster YAML in, multi-node DeepSpeed on OpenShift and an acceptance verdict out.",
    add_completion=False,
    pretty_exceptions_show_locals=False,
    # Plain help formatting: rich markup costs ~0.1 s of start-up for `mlenv --help`.
    rich_markup_mode=None,
)



@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    """ml-dev-env: cluster YAML in, multi-node DeepSpeed on OpenShift and an acceptance verdict out."""
    if version:
        from mlenv import __version__

        typer.echo(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


for _verb in VERB_MODULES:
    try:
        _mod = importlib.import_module(f"mlenv.cli.cmd_{_verb}")
    except ModuleNotFoundError as _e:  # a verb not written yet must not break the others
        if _e.name != f"mlenv.cli.cmd_{_verb}":
            raise
        continue
    _mod.register(app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
