"""The docs agree with the code: every command the README and docs/ show exists with
the flags shown, the ones that need no cluster run and succeed, and every config key they
name exists in the schema.

Docs drift silently (docs/rendering.md once named ``nccl.extra_env``, a key that never
existed); these tests make that drift a failure.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCHEMA = json.loads((ROOT / "mlenv" / "config" / "cluster.schema.json").read_text(encoding="utf-8"))
# config-reference.md is generated from the schema (its own freshness test covers it)
PROSE = [d for d in DOCS if d.name != "config-reference.md"]

# Verbs that run without a cluster, a GPU or a long measurement: these are executed.
RUN_OFFLINE = {"validate", "render", "list-clusters", "help", "completion", "history"}


def _shown_commands() -> list[tuple[str, int, str]]:
    """(doc, line, command) for every ``mlenv …``/``make …`` line in a fenced block."""
    out = []
    for doc in DOCS:
        in_block = False
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_block = not in_block
                continue
            text = line.strip().removeprefix("$ ")
            if in_block and text.startswith(("mlenv ", "make ")):
                text = re.split(r"\s+#\s", text, maxsplit=1)[0].strip()  # drop the trailing comment
                for part in re.split(
                    r"\s+(?:\||/)\s+", text
                ):  # "a | b" and "a / b" show two commands
                    if part.startswith(("mlenv ", "make ")):
                        out.append((doc.relative_to(ROOT).as_posix(), i, part))
    return out


COMMANDS = _shown_commands()
MLENV_LINES = [c for c in COMMANDS if c[2].startswith("mlenv ")]
MAKE_LINES = [c for c in COMMANDS if c[2].startswith("make ")]


def _ids(c: tuple[str, int, str]) -> str:
    return f"{c[0]}:{c[1]}"


def _verb_words(cmd: str) -> list[str]:
    """``mlenv bundle verify FILE`` → ["bundle", "verify"]: the leading lowercase words."""
    words = []
    for w in shlex.split(cmd)[1:]:
        if not re.fullmatch(r"[a-z][a-z-]*", w):
            break
        words.append(w)
    return words


def _help(words: list[str]) -> str:
    r = CliRunner().invoke(app, [*words, "--help"])
    return r.output if r.exit_code == 0 else ""


def test_the_docs_show_commands() -> None:
    # the extraction itself works: the README's quick start is in there
    assert any(c == "make demo" for _, _, c in COMMANDS)
    assert len(MLENV_LINES) >= 5 and len(MAKE_LINES) >= 5


@pytest.mark.parametrize("c", MLENV_LINES, ids=_ids)
def test_every_shown_mlenv_command_exists_with_its_flags(c: tuple[str, int, str]) -> None:
    doc, line, cmd = c
    words = _verb_words(cmd)
    assert words, f"{doc}:{line}: no verb in {cmd!r}"
    # the longest prefix of the words that is a command (the rest are arguments: `history local`)
    while words and not _help(words):
        words = words[:-1]
    assert words, f"{doc}:{line}: `{cmd}`: mlenv has no such verb"
    text = _help(words)
    own = cmd.split(" -- ", 1)[0]  # after `--` the flags are the script's, not mlenv's
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b", own))
    missing = sorted(f for f in flags if f not in text)
    assert not missing, (
        f"{doc}:{line}: `{cmd}`: `mlenv {' '.join(words)}` has no {', '.join(missing)}"
    )


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-zA-Z][\w.-]*)\s*:(?!=)", text, re.M))


@pytest.mark.parametrize("c", MAKE_LINES, ids=_ids)
def test_every_shown_make_target_exists(c: tuple[str, int, str]) -> None:
    doc, line, cmd = c
    targets = [w for w in shlex.split(cmd)[1:] if re.fullmatch(r"[a-z][\w-]*", w)]
    assert targets, f"{doc}:{line}: no target in {cmd!r}"
    missing = sorted(set(targets) - _make_targets())
    assert not missing, f"{doc}:{line}: `{cmd}`: the Makefile has no target {', '.join(missing)}"


def _runnable(cmd: str) -> bool:
    words = _verb_words(cmd)
    # placeholders (CLUSTER, RUN_A), alternatives ([--mode rdma|tcp]) and ellipses cannot run as shown
    return (
        bool(words) and words[0] in RUN_OFFLINE and not re.search(r"\b[A-Z][A-Z_]+\b|[\[\]|…]", cmd)
    )


RUNNABLE = [c for c in MLENV_LINES if _runnable(c[2])]


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clusters/ and k8s/ (and the other generated trees) copied: a shown `mlenv render --all`
    writes into the copy, never into the checkout."""
    root = tmp_path_factory.mktemp("repo")
    for d in ("clusters", "k8s", "slurm", "hosts"):
        if (ROOT / d).is_dir():
            shutil.copytree(ROOT / d, root / d)
    return root


def test_some_shown_commands_run() -> None:
    assert len(RUNNABLE) >= 3, [c[2] for c in RUNNABLE]


@pytest.mark.parametrize("c", RUNNABLE, ids=_ids)
def test_shown_offline_commands_succeed(
    c: tuple[str, int, str], repo_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, line, cmd = c
    monkeypatch.setenv("MLENV_ROOT", str(repo_copy))
    monkeypatch.chdir(repo_copy)
    r = CliRunner().invoke(app, shlex.split(cmd)[1:])
    assert r.exit_code == 0, f"{doc}:{line}: `{cmd}` exited {r.exit_code}:\n{r.output}"


def _schema_has(path: list[str], node: dict[str, object] = SCHEMA) -> bool:
    if not path:
        return True
    props = node.get("properties")
    if isinstance(props, dict) and path[0] in props:
        return _schema_has(path[1:], props[path[0]])
    # free-form maps (nccl.env.NCCL_ALGO, network.rdma.resources.<name>) accept any key
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) or node.get("patternProperties"):
        return True
    for alt in ("anyOf", "oneOf"):
        for sub in node.get(alt, []) or []:  # type: ignore[attr-defined]
            if isinstance(sub, dict) and _schema_has(path, sub):
                return True
    return False


def _documented_keys() -> list[tuple[str, int, str]]:
    tops = set(SCHEMA["properties"])
    out = []
    for doc in PROSE:
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for key in re.findall(r"`([a-z_]+(?:\.[a-zA-Z_0-9]+)+)`", line):
                first = key.split(".")[0]
                # `training.deepspeed` is a check, `results.json` and `slurm.conf` files: only schema
                # sections count
                if first in tops and not re.search(
                    r"\.(json|jsonl|yaml|md|py|sh|xml|conf|sbatch|scrontab)$", key
                ):
                    out.append((doc.relative_to(ROOT).as_posix(), i, key))
    return out


KEYS = _documented_keys()


def test_docs_name_config_keys() -> None:
    assert len(KEYS) >= 20


@pytest.mark.parametrize("k", KEYS, ids=lambda k: f"{k[0]}:{k[1]}:{k[2]}")
def test_every_documented_config_key_exists(k: tuple[str, int, str]) -> None:
    doc, line, key = k
    assert _schema_has(key.split(".")), (
        f"{doc}:{line}: `{key}` is not a key of the cluster config schema"
    )


def test_the_key_check_bites() -> None:
    assert not _schema_has(["nccl", "extra_env"])
    assert _schema_has(["nccl", "env", "NCCL_ALGO"]) and _schema_has(
        ["network", "rdma", "gid_index"]
    )
