"""The unit tier starts no ``mlenv`` CLI process: a rule read from the tests' source.

A ``python -m mlenv`` process (or the ``mlenv`` console script, or the fake-cluster CLI
``mlenv.testing.fake_mlenv``) pays a Python start-up and the CLI's imports before it does
anything: 0.26 s of CPU for ``--help``, 0.6-0.8 s for ``list-clusters``, ``validate`` or
``render``, and two to three times that in wall time on the loaded 2-core sandbox. Such
processes made most of the unit tier's tests over a second (docs/architecture.md, "Tests
by tier"). A test whose subject is the process boundary (a signal, a pipe, the shell's
completion, make running mlenv) belongs in tests/integration; one about what a verb
prints or decides calls it in process (CliRunner, or the function itself). Other entry
points stay allowed where their process is the subject: ``python -m mlenv.pod`` (the
pod-side entry, stdlib only by design: 0.1 s) and ``python -m mlenv.acceptance`` refusing
bad input before it imports torch (0.2 s).

The wall-clock side (tests over a second, CPU or waiting) is reported at the end of every
run of the tier by tests/conftest.py, not failed: on a shared 2-core machine a test's
wall time is not its own.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
UNIT_TIERS = ("unit", "cli")
# The modules whose process imports the CLI.
HEAVY = ("mlenv", "mlenv.cli", "mlenv.cli.app", "mlenv.testing.fake_mlenv")
# The same as words of a command line in a string (a shell line, a script written out).
_IN_TEXT = re.compile(r"-m\s+(" + "|".join(re.escape(m) for m in HEAVY) + r")(?![\w.])")


def _is_sys_executable(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "executable"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _mentions_sys_executable(node: ast.AST) -> bool:
    return any(_is_sys_executable(n) for n in ast.walk(node))


def _text(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def mlenv_processes(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """(line, what) for each place ``source`` starts a heavy mlenv process: an argv with
    ``sys.executable, ..., "-m", MODULE``; a command line in a string (an f-string's text
    included) with ``-m MODULE``; the console script next to ``sys.executable``."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(source, filename)
    # a docstring that names a command line runs nothing
    docs = {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if id(node) in docs:
            continue
        if isinstance(node, (ast.List, ast.Tuple)) and any(
            _is_sys_executable(e) for e in node.elts
        ):
            words = [_text(e) for e in node.elts]
            for a, b in zip(words, words[1:], strict=False):
                if a == "-m" and b in HEAVY:
                    found.append((node.lineno, f"sys.executable -m {b}"))
        elif isinstance(node, ast.Constant) and (m := _IN_TEXT.search(_text(node) or "")):
            found.append((node.lineno, f"a command line with `-m {m.group(1)}`"))
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and _text(node.right) == "mlenv"
            and _mentions_sys_executable(node.left)
        ):
            found.append((node.lineno, "the mlenv console script beside sys.executable"))
    return sorted(found)


def _may_start_one(text: str) -> bool:
    """Cheap first look: every form names ``sys.executable`` or has ``-m MODULE`` in a
    string, so only such a file is parsed."""
    return "sys.executable" in text or _IN_TEXT.search(text) is not None


def test_no_unit_tier_test_starts_an_mlenv_process() -> None:
    offenders = []
    for tier in UNIT_TIERS:
        for path in sorted((TESTS / tier).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if path == Path(__file__).resolve() or not _may_start_one(text):
                continue  # this file plants offenders in its self-test
            offenders += [
                f"{path.relative_to(TESTS.parent)}:{line}: {what}"
                for line, what in mlenv_processes(text, str(path))
            ]
    assert not offenders, (
        "the unit tier starts mlenv processes (call the verb in process with CliRunner, "
        "or move a test of the process boundary to tests/integration):\n" + "\n".join(offenders)
    )


def test_the_rule_catches_each_way_of_starting_one_and_spares_the_pod_entry() -> None:
    planted = """
import subprocess, sys
from pathlib import Path
subprocess.run([sys.executable, "-m", "mlenv", "status", "x"])
subprocess.run([sys.executable, "-S", "-m", "mlenv", "--help"])
subprocess.Popen((sys.executable, "-m", "mlenv.testing.fake_mlenv", "s", "--"))
subprocess.run(["sh", "-c", f'"{sys.executable}" -m mlenv render --all | head -1'])
script = f"#!/bin/sh\\nexec {sys.executable} -m mlenv.cli.app \\"$@\\"\\n"
exe = Path(sys.executable).parent / "mlenv"
"""
    assert [line for line, _ in mlenv_processes(planted)] == [4, 5, 6, 7, 8, 9]
    spared = """
import subprocess, sys
def test_x():
    \'\'\'Runs `python -m mlenv status` (a docstring runs nothing).\'\'\'
subprocess.run([sys.executable, "-m", "mlenv.pod", "launch"])
subprocess.run([sys.executable, "-m", "mlenv.acceptance", "--options", "bad.yaml"])
argv = ["python", "-m", "mlenv.pod", "run-torchrun"]
control = ("/usr/bin/python3", "-m", "mlenv")
hint = "regenerate: python -m mlenv.config.docs > docs/config-reference.md"
stub = tmp_path / "bin" / "mlenv"
"""
    assert mlenv_processes(spared) == []
