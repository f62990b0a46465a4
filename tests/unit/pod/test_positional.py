"""upstream ml-dev-env's ``launch_deepspeed.sh SCRIPT [DS_CONFIG] [HOSTFILE] [ARGS…]``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from mlenv.pod import positional

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('x')\n")
    (tmp_path / "ds_config.json").write_text("{}\n")
    (tmp_path / "data.json").write_text("{}\n")
    (tmp_path / "hosts").write_text("a.svc slots=1\nb.svc slots=1\n")
    (tmp_path / "notes.txt").write_text("not a hostfile\n")
    return tmp_path


def test_upstream_positional_form(ws: Path) -> None:
    f = positional.parse(["train.py", "ds_config.json"])
    assert f.words == ["train.py", "--deepspeed", "--deepspeed_config", "ds_config.json"]
    assert f.ds_config == "ds_config.json" and f.hostfile is None
    f = positional.parse(["train.py", "ds_config.json", "hosts", "--steps", "3"])
    assert f.words == [
        "train.py",
        "--steps",
        "3",
        "--deepspeed",
        "--deepspeed_config",
        "ds_config.json",
    ]
    assert f.hostfile == "hosts"


def test_current_form_is_unchanged(ws: Path) -> None:
    for words in (
        [],
        ["train.py"],
        ["train.py", "--steps", "3"],
        ["--checks", "x"],
        ["train.py", "notes.txt"],
    ):
        f = positional.parse(words)
        assert f.words == words and f.ds_config is None and f.hostfile is None, words


def test_ambiguous_cases(ws: Path) -> None:
    # A hostfile without a config; a non-hostfile file after the config stays an argument.
    assert positional.parse(["train.py", "hosts", "-v"]) == positional.Positional(
        ["train.py", "-v"], None, "hosts"
    )
    f = positional.parse(["train.py", "ds_config.json", "notes.txt"])
    assert f.words == [
        "train.py",
        "notes.txt",
        "--deepspeed",
        "--deepspeed_config",
        "ds_config.json",
    ]
    # A missing .json is an argument, not a config; only the word right after SCRIPT counts.
    assert positional.parse(["train.py", "missing.json"]).words == ["train.py", "missing.json"]
    assert positional.parse(["train.py", "--x", "data.json"]).words == [
        "train.py",
        "--x",
        "data.json",
    ]
    # Any existing .json right after SCRIPT is the config (documented; pod-launch.sh passes it through).
    assert positional.parse(["train.py", "data.json"]).ds_config == "data.json"
    # A .py second word is never a hostfile.
    assert positional.parse(["train.py", "train.py"]).hostfile is None


def test_flags_already_given_are_not_doubled(ws: Path) -> None:
    f = positional.parse(
        ["train.py", "ds_config.json", "--deepspeed", "--deepspeed_config=other.json"]
    )
    assert f.words == ["train.py", "--deepspeed", "--deepspeed_config=other.json"]
    f = positional.parse(["train.py", "ds_config.json", "--deepspeed_config", "x.json"])
    assert f.words == ["train.py", "--deepspeed_config", "x.json", "--deepspeed"]


def test_example_script_accepts_the_upstream_flags() -> None:
    spec = importlib.util.spec_from_file_location(
        "train_multi_node", ROOT / "workspace" / "train_multi_node.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = mod.parse_args(["--local_rank=0", "--deepspeed", "--deepspeed_config", "cfg.json"])
    assert args.ds_config == "cfg.json" and args.deepspeed


def test_launch_script_sets_the_upstream_form_flag(tmp_path: Path) -> None:
    # The wrapper must hand its words to 'launch --upstream-form'; a fake python records them.
    rec = tmp_path / "argv"
    fake = tmp_path / "py"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {rec}\n')
    fake.chmod(0o755)
    r = subprocess.run(
        [str(ROOT / "workspace" / "launch_deepspeed.sh"), "train_multi_node.py", "ds_config.json"],
        env={**os.environ, "MLENV_PYTHON": str(fake)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert rec.read_text().split() == [
        "-m",
        "mlenv.pod",
        "launch",
        "--upstream-form",
        "train_multi_node.py",
        "ds_config.json",
    ]
