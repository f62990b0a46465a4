"""``mlenv`` as a real process, where the process boundary is what is tested: bash
completion through the console script, the checkout found from any folder, ``python -m
mlenv`` outside an install, a reader that leaves the pipe early (SIGPIPE), and the exit
line a failing verb gives real make.

Integration tier: each test starts ``mlenv`` as its own process (a Python start-up and
the CLI's imports each: about half a second of CPU). What these verbs print and decide is
tested in process under ``tests/cli``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlenv.acceptance.records import history

ROOT = Path(__file__).resolve().parents[2]
# A scratch checkout for make and make's environment, shared with tests/cli/test_make_targets.py.
_spec = importlib.util.spec_from_file_location("makeenv", ROOT / "tests" / "cli" / "_makeenv.py")
assert _spec and _spec.loader
_makeenv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_makeenv)
make_env = _makeenv.make_env


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    path: Path = _makeenv.scratch_checkout(tmp_path)
    return path


def _mlenv_bin() -> str:
    exe = Path(sys.executable).parent / "mlenv"
    if not exe.exists():
        pytest.skip("the mlenv console script is not installed next to this python")
    return str(exe)


# -- bash completion, as the shell runs it


def test_bash_completion_completes_verbs_and_options(tmp_path) -> None:
    """The script as bash runs it: source it, call its function, read COMPREPLY."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    exe = _mlenv_bin()
    env = {
        **os.environ,
        "PATH": f"{Path(exe).parent}:{os.environ.get('PATH', '')}",
        "MLENV_ROOT": str(ROOT),
    }
    script = subprocess.run(
        [exe, "completion", "bash"], capture_output=True, text=True, env=env, check=True
    ).stdout

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        prog = (
            f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
            '_mlenv_completion mlenv; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        out = subprocess.run(
            ["bash", "-c", prog], capture_output=True, text=True, env=env, timeout=60
        )
        return out.stdout.split()

    assert "status" in complete("mlenv", "sta")
    assert {"--namespace", "--output"} <= set(complete("mlenv", "status", "x", "--"))
    assert complete("mlenv", "status", "b") == ["barcelona"]  # cluster names from clusters/
    assert complete("mlenv", "status", "clusters/") == []  # a path: the shell's file names
    assert set(complete("mlenv", "shell", "''")) == {
        p.stem for p in (ROOT / "clusters").glob("*.yaml")
    }


def test_bash_completion_completes_option_values(tmp_path) -> None:
    """Completion stopped at option values: now cluster names (argument and --cluster),
    modes, profiles, check names (a comma list) and run ids from the history."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    exe = _mlenv_bin()
    hist = tmp_path / "history"
    (hist / "barcelona").mkdir(parents=True)
    (hist / "barcelona" / "history.jsonl").write_text(
        '{"schema": 1, "run_id": "20261120-101010-aaaa", "cluster": "barcelona", "started": "2026-11-20T10:10:10Z"}\n'
        '{"schema": 1, "run_id": "20261121-111111-bbbb", "cluster": "barcelona", "started": "2026-11-21T11:11:11Z"}\n'
    )
    env = {
        **os.environ,
        "PATH": f"{Path(exe).parent}:{os.environ.get('PATH', '')}",
        "MLENV_ROOT": str(ROOT),
        "MLENV_HISTORY_DIR": str(hist),
    }
    script = subprocess.run(
        [exe, "completion", "bash"], capture_output=True, text=True, env=env, check=True
    ).stdout

    def complete(*words: str) -> list[str]:
        prog = (
            f"{script}\nCOMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; "
            '_mlenv_completion mlenv; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        out = subprocess.run(
            ["bash", "-c", prog], capture_output=True, text=True, env=env, timeout=60
        )
        return out.stdout.split()

    assert complete("mlenv", "deploy", "barcelona", "--mode", "''") == ["rdma", "tcp"]
    assert complete("mlenv", "render", "local", "--mode", "t") == ["tcp"]
    assert complete("mlenv", "acceptance", "--profile", "''") == ["full", "quick"]
    assert complete("mlenv", "acceptance", "--cluster", "b") == ["barcelona"]
    got = complete("mlenv", "acceptance", "--checks", "coll")
    assert "collectives" in got and all(x.startswith("collectives") for x in got)
    assert complete("mlenv", "acceptance", "--checks", "environment,envi") == []  # not twice
    assert "environment,compute" in complete("mlenv", "acceptance", "--checks", "environment,comp")
    assert complete("mlenv", "compare", "''") == ["20261121-111111-bbbb", "20261120-101010-aaaa"]
    assert complete("mlenv", "compare", "x", "20261120") == ["20261120-101010-aaaa"]
    # -o values, url's tools, help's verbs, completion's shells, bundle's run ids
    assert complete("mlenv", "status", "barcelona", "-o", "''") == ["table", "json", "yaml"]
    assert complete("mlenv", "history", "local", "--output", "j") == ["json"]
    assert complete("mlenv", "url", "barcelona", "''") == ["vscode", "jupyter", "tensorboard"]
    assert complete("mlenv", "help", "dep") == ["deploy"]
    assert complete("mlenv", "completion", "''") == ["bash", "zsh", "fish"]
    assert complete("mlenv", "bundle", "''") == [
        "20261121-111111-bbbb",
        "20261120-101010-aaaa",
        "verify",
    ]


# -- where mlenv looks for its checkout, and mlenv without its dependencies


def test_mlenv_is_found_from_any_folder_of_the_checkout(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MLENV_ROOT"}
    sub = ROOT / "workspace"
    r = subprocess.run(
        [sys.executable, "-m", "mlenv", "list-clusters", "-o", "json"],
        cwd=sub,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert {c["name"] for c in json.loads(r.stdout)} == {
        p.stem for p in (ROOT / "clusters").glob("*.yaml")
    }
    # MLENV_ROOT still wins
    other = tmp_path / "other"
    (other / "clusters").mkdir(parents=True)
    shutil.copy(ROOT / "clusters" / "local.yaml", other / "clusters" / "local.yaml")
    r = subprocess.run(
        [sys.executable, "-m", "mlenv", "list-clusters", "-o", "json"],
        cwd=sub,
        env={**env, "MLENV_ROOT": str(other)},
        capture_output=True,
        text=True,
    )
    assert [c["name"] for c in json.loads(r.stdout)] == ["local"]
    # outside any checkout: the current folder, as before
    r = subprocess.run(
        [sys.executable, "-m", "mlenv", "list-clusters"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "no cluster configs found" in r.stderr


def test_python_m_mlenv_outside_an_install_says_what_to_run_in_one_line() -> None:
    """`python3 -m mlenv` in a checkout with a Python that lacks the dependencies printed a
    ModuleNotFoundError traceback; now one line naming the two installs, exit 2."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # -S: no site-packages, so typer and the rest are missing, as in a bare system Python
    r = subprocess.run(
        [sys.executable, "-S", "-m", "mlenv", "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "mlenv: typer is missing from this Python: `make cli` installs mlenv into "
        ".venv-cli/bin, or `pipx install .`"
    ]


# -- a reader that leaves early


def test_a_verb_whose_reader_left_exits_141_quietly(tmp_path: Path) -> None:
    """`mlenv history local | head` with the reader gone: no BrokenPipe traceback,
    no "internal error", exit 128 + SIGPIPE. The pipe's read end is closed before the verb
    starts, so its first write fails whatever the timing."""
    root = tmp_path / "h"
    for i in range(3):
        history.append(
            root / "local" / history.HISTORY_FILE,
            {
                "schema_version": 1,
                "run_id": f"20260101-0000{i:02d}-aaaaaa",
                "cluster": "local",
                "started": "2026-01-01T00:00:00+00:00",
                "verdict": "PASS",
                "report_dir": str(tmp_path),
            },
        )
    rd, wr = os.pipe()
    os.close(rd)
    try:
        p = subprocess.run(
            [sys.executable, "-m", "mlenv", "history", "local", "--history-dir", str(root)],
            stdout=wr,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT), "MLENV_ROOT": str(ROOT)},
        )
    finally:
        os.close(wr)
    assert p.returncode == 141, p.stderr
    assert p.stderr == ""


def test_all_trees_are_written_when_the_reader_leaves_early(tmp_path: Path) -> None:
    """`mlenv render --all | head -1` stopped writing after the first tree (the next line
    hit the closed pipe): every tree is now written before the first line is printed."""
    shutil.copytree(ROOT / "clusters", tmp_path / "clusters")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLENV_ROOT": str(tmp_path)}
    r = subprocess.run(
        [
            "sh",
            "-c",
            f'"{sys.executable}" -m mlenv render --all --out "{out}" 2>/dev/null | head -1',
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.stdout.startswith("wrote ") and len(r.stdout.splitlines()) == 1
    names = sorted(p.stem for p in (tmp_path / "clusters").glob("*.yaml"))
    assert sorted(d.name for d in out.iterdir()) == names
    assert all(sorted(x.name for x in (out / n).iterdir()) == ["rdma", "tcp"] for n in names)


# -- real make


def test_a_failing_verb_says_its_code_through_real_make(checkout: Path) -> None:
    """Real make, real mlenv: `make render CLUSTER=nope` (bad input) ends, before make's own
    line, with mlenv's code; CI reads it back from the `mlenv-exit:` line."""
    shutil.copytree(ROOT / "clusters", checkout / "clusters")
    fake = checkout / ".venv-cli" / "bin" / "mlenv"
    fake.parent.mkdir(parents=True, exist_ok=True)
    fake.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m mlenv "$@"\n')
    fake.chmod(0o755)
    out = subprocess.run(
        ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C", str(checkout)]
        + ["render", "CLUSTER=nope"],
        capture_output=True,
        text=True,
        env=make_env(checkout),
    )
    assert out.returncode == 2  # make's, whatever mlenv said
    lines = out.stderr.strip().splitlines()
    assert lines[-2] == "mlenv-exit: 2 (bad input)", lines
    assert lines[-1].endswith("Error 2")
