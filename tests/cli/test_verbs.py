"""The verb list: every ``mlenv/cli/cmd_*.py`` is registered, every registered
module exists, and ``mlenv --help`` shows exactly the verbs users are told about."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.cli import app as app_module
from mlenv.cli.app import VERB_MODULES, app

CLI = Path(app_module.__file__).resolve().parent

# The verbs of `mlenv --help`, in order. Adding a verb means adding it here and to the docs.
EXPECTED = [
    "validate",
    "render",
    "list-clusters",
    "acceptance",
    "deploy",
    "status",
    "sync",
    "stage",
    "shell",
    "logs",
    "port-forward",
    "launch",
    "teardown",
    "build",
    "url",
    "gpu-info",
    "discover",
    "wizard",
    "secrets",
    "bundle",
    "finalize",
    "history",
    "compare",
    "metrics",
    "quarantine",
    "release",
    "recheck",
    "help",
    "completion",
]


def _registers(p: Path) -> bool:
    return any(
        isinstance(n, ast.FunctionDef) and n.name == "register"
        for n in ast.parse(p.read_text()).body
    )


def test_every_verb_module_is_registered() -> None:
    on_disk = sorted(p.stem.removeprefix("cmd_") for p in CLI.glob("cmd_*.py") if _registers(p))
    assert sorted(VERB_MODULES) == on_disk


def test_help_lists_every_verb_in_order() -> None:
    r = CliRunner().invoke(app, ["--help"])
    assert r.exit_code == 0, r.output
    shown = re.findall(r"^  ([a-z][a-z-]+)\s", r.output.split("Commands:", 1)[1], re.M)
    assert shown == EXPECTED


@pytest.mark.parametrize("verb", EXPECTED)
def test_each_verb_has_help(verb: str) -> None:
    r = CliRunner().invoke(app, [verb, "--help"])
    assert r.exit_code == 0 and "Usage:" in r.output, (verb, r.output)
