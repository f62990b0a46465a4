"""Bad values on the command line, said in mlenv's words: one `error:` line, exit 2, with a
did-you-mean for a mistyped choice and the cluster names for a missing cluster."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from mlenv.cli._examples import EXAMPLES
from mlenv.cli.app import app
from mlenv.errors import did_you_mean

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str):
    return CliRunner().invoke(app, list(args), env={"MLENV_ROOT": str(ROOT)})


@pytest.mark.parametrize(
    "args,line",
    [
        (
            ["deploy", "local", "--mode", "RDMA", "--dry-run", "client"],
            "error: --mode must be one of rdma, tcp, got 'RDMA' (did you mean 'rdma'?)",
        ),
        (
            ["render", "local", "--mode", "Tcp"],
            "error: --mode must be one of rdma, tcp, got 'Tcp' (did you mean 'tcp'?)",
        ),
        (
            ["list-clusters", "-o", "jsn"],
            "error: -o/--output must be one of table, json, yaml, got 'jsn' (did you mean 'json'?)",
        ),
        (
            ["url", "local", "vscod"],
            "error: unknown dev tool 'vscod' (did you mean 'vscode'?): one of vscode, jupyter, "
            "tensorboard",
        ),
        (["logs", "local", "--pod", "x"], "error: --pod: expected an integer, got 'x'"),
        (["logs", "local", "--tail=abc"], "error: --tail: expected an integer, got 'abc'"),
        (
            ["deploy", "local", "--timeout", "soon"],
            "error: --timeout: expected a number, got 'soon'",
        ),
        (
            ["status"],
            "error: mlenv status needs a CLUSTER (clusters/<name>.yaml): barcelona, large-h200, "
            "local, nerc-tcp",
        ),
    ],
)
def test_a_bad_value_is_one_line_in_mlenvs_words(args: list[str], line: str) -> None:
    r = _run(*args)
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [line], r.stderr
    assert "Usage:" not in r.output and "Input should be" not in r.output


def test_acceptance_choices_get_a_did_you_mean() -> None:
    from mlenv.acceptance.core import profiles, registry
    from mlenv.errors import InputError

    registry.load()
    with pytest.raises(InputError, match=r"unknown check 'comput' \(did you mean 'compute'\?\)"):
        registry.select_checks("comput")
    with pytest.raises(InputError, match=r"'collectives.al_reduce' \(did you mean 'collectives"):
        registry.select_checks("collectives.al_reduce")
    with pytest.raises(InputError, match=r"unknown profile 'quik' \(did you mean 'quick'\?\)"):
        profiles.get("quik")


def test_did_you_mean_prefers_case_then_the_one_prefix_then_spelling() -> None:
    assert did_you_mean("RDMA", ["rdma", "tcp"]) == " (did you mean 'rdma'?)"
    assert did_you_mean("comput", ["compute", "compute.matmul"]) == " (did you mean 'compute'?)"
    assert did_you_mean("fabric.tr", ["fabric.transport"]) == " (did you mean 'fabric.transport'?)"
    assert did_you_mean("jsn", ["table", "json", "yaml"]) == " (did you mean 'json'?)"
    assert did_you_mean("zzz", ["table", "json"]) == ""


def test_every_verb_has_examples() -> None:
    """4 of 27 verbs' --help showed an example; now every one does (each checked below)."""
    verbs = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert len(verbs) >= 27 and sorted(EXAMPLES) == verbs


@pytest.mark.parametrize("verb", sorted(EXAMPLES))
def test_a_verbs_help_ends_with_examples_that_parse(verb: str) -> None:
    """Each example is a command line its verb accepts (parsed, not run)."""
    group = typer.main.get_command(app)
    r = _run(verb, "--help")
    assert r.exit_code == 0, r.output
    text = r.stdout[r.stdout.index("Examples:") :]
    for line in EXAMPLES[verb]:
        assert f"    {line}\n" in text, (verb, line)
        words = shlex.split(line)
        if words[0] != "mlenv":  # completion's: source <(mlenv completion bash)
            words = shlex.split(line[line.index("mlenv") :].rstrip(")"))
        assert words[:2] == ["mlenv", verb], line
        command = group.commands[verb]  # type: ignore[attr-defined]
        command.make_context(verb, words[2:])  # raises on an unknown option or value
