"""The Makefile's cluster targets: which cluster they act on and the flags they pass
(``make -n`` in a scratch checkout, so nothing runs and the repo is not touched)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _makeenv import make_env, scratch_checkout

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return scratch_checkout(tmp_path)


def dry(checkout: Path, *args: str) -> list[str]:
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "-C",
            str(checkout),
            "-n",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        env=make_env(checkout),
    )
    # every mlenv call carries MLENV_EXIT_LINE=1 (test_every_mlenv_call_reports_its_exit_code)
    lines = [" ".join(line.split()) for line in out.stdout.splitlines() if "mlenv" in line]
    return [line.replace("MLENV_EXIT_LINE=1 ", "") for line in lines]


def dry_fails(checkout: Path, *args: str) -> str:
    """``make -n`` that must stop: its stderr."""
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "-C",
            str(checkout),
            "-n",
            *args,
        ],
        capture_output=True,
        text=True,
        env=make_env(checkout),
    )
    assert out.returncode != 0 and "mlenv" not in out.stdout, out.stdout
    return out.stderr


NO_CLUSTER = (
    "no cluster was deployed from this checkout (no .mlenv/current-cluster) and "
    "CLUSTER is not set: pick one with `make {target} CLUSTER=<name>`"
)


@pytest.mark.parametrize(
    "target",
    [
        "shell",
        "sync-multi-node",
        "status-cluster",
        "logs",
        "port-forward",
        "launch",
        "clean-cluster",
        "build-image",
        "deploy-cluster",
        "deploy",
        "dev-session",
        "gpu-info",
        "vscode",
        "status",
        "shell-multi-node",
    ],
)
def test_no_cluster_deployed_and_none_given_stops_and_says_how(checkout: Path, target: str) -> None:
    """Before any deploy, with no CLUSTER: a cluster target says so instead of acting on
    `local` (it did: `make shell` opened a shell in local's namespace)."""
    (checkout / "clusters").mkdir()
    for name in ("barcelona", "local"):
        (checkout / "clusters" / f"{name}.yaml").write_text("")
    err = dry_fails(checkout, target)
    # the target typed, an alias too: that is the command to repeat with CLUSTER=
    assert NO_CLUSTER.format(target=target) + " (clusters/: barcelona local)" in err
    assert dry_fails(checkout, target, "CLUSTER=")  # an empty CLUSTER is none too


@pytest.mark.parametrize("target", ["deploy", "status", "shell", "sync-once", "vscode"])
def test_no_cluster_stops_before_any_install_is_built(checkout: Path, target: str) -> None:
    """On a fresh clone (no venv at all) the one-line stop came after a 5 GB build of the
    full venv; now it comes first, and the cluster targets build only the light install."""
    shutil.rmtree(checkout / ".venv")
    shutil.rmtree(checkout / ".venv-cli")
    out = subprocess.run(
        ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C", str(checkout)]
        + ["-n", target],
        capture_output=True,
        text=True,
        env=make_env(checkout),
    )
    assert out.returncode != 0 and out.stdout == "", out.stdout
    assert "no cluster was deployed from this checkout" in out.stderr
    plan = subprocess.run(
        ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C", str(checkout)]
        + ["-n", target, "CLUSTER=local"],
        capture_output=True,
        text=True,
        check=True,
        env=make_env(checkout),
    ).stdout
    assert "install -q" in plan and "-e ." in plan  # the light one: mlenv itself
    for heavy in ("torch", "deepspeed", "[dev]", "NEED_CXX", "c++", " .venv/bin/"):
        assert heavy not in plan, heavy


def test_render_still_defaults_to_local(checkout: Path) -> None:
    assert dry(checkout, "render") == [".venv-cli/bin/mlenv render 'local'"]


def test_cluster_targets_follow_the_last_deploy(checkout: Path) -> None:
    assert NO_CLUSTER.format(target="sync-multi-node") in dry_fails(checkout, "sync-multi-node")
    (checkout / ".mlenv").mkdir()
    (checkout / ".mlenv" / "current-cluster").write_text("barcelona\n")
    assert dry(checkout, "sync-multi-node") == [".venv-cli/bin/mlenv sync 'barcelona'"]
    assert dry(checkout, "status-cluster") == [".venv-cli/bin/mlenv status 'barcelona'"]
    assert dry(checkout, "sync-multi-node", "CLUSTER=nerc-tcp") == [
        ".venv-cli/bin/mlenv sync 'nerc-tcp'"
    ]


def test_watch_and_torchrun_variables(checkout: Path) -> None:
    assert dry(checkout, "sync-multi-node", "WATCH=1", "CLUSTER=local") == [
        ".venv-cli/bin/mlenv sync 'local' --watch"
    ]
    assert dry(checkout, "launch", "TORCHRUN=1", "SCRIPT=train.py", "CLUSTER=local") == [
        ".venv-cli/bin/mlenv launch 'local' --torchrun 'train.py'"
    ]


HOSTILE_MAKE_VALUES = [
    "x; touch PWNED",
    "$(touch PWNED)",
    "`touch PWNED`",
    "a'b; touch PWNED",
    "x && touch PWNED",
    "--kubeconfig=/tmp/k",
]


@pytest.mark.parametrize("value", HOSTILE_MAKE_VALUES)
def test_makefile_passes_cluster_as_one_word(checkout: Path, value: str) -> None:
    """Real make, a recording stand-in for mlenv: the value arrives as one argv word and
    no command in it runs (before the fix `$(CLUSTER)` was pasted into bash unquoted)."""
    import json
    import sys

    log = checkout / "argv.jsonl"
    fake = checkout / ".venv-cli" / "bin" / "mlenv"
    fake.parent.mkdir(parents=True, exist_ok=True)
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    for target, extra in (
        ("sync-multi-node", []),
        ("shell", [f"POD={value}"]),
        ("launch", [f"SCRIPT={value}"]),
        ("deploy-cluster", [f"MODE={value}"]),
        ("shell", ["POD=0", f"CMD={value}"]),
    ):
        subprocess.run(
            [
                "make",
                "--no-print-directory",
                "-f",
                str(ROOT / "Makefile"),
                "-C",
                str(checkout),
                target,
                f"CLUSTER={value}",
                *extra,
            ],
            capture_output=True,
            text=True,
            check=False,
            env=make_env(checkout),
        )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert not list(checkout.rglob("PWNED"))
    if value.startswith("$("):  # make expands it to an empty CLUSTER: every target stops
        assert calls == []
        return
    assert len(calls) == 5
    # make expands `$(...)` on its own command line as a make variable (empty here): still
    # one word, and nothing reaches the shell as code
    want = value
    assert [c[1] for c in calls] == [want] * 5
    assert calls[1][-1] == want and calls[2][-1] == want and calls[3][3] == want
    # CMD is code, but the pod's: one word for the pod's `sh -c`, never this machine's shell
    assert calls[4][-4:] == ["--", "sh", "-c", want]
    assert not list(checkout.rglob("PWNED"))


def _targets() -> list[str]:
    import re

    text = (ROOT / "Makefile").read_text()
    return sorted({m.group(1) for m in re.finditer(r"^([a-z][a-z0-9-]*):", text, re.M)})


def test_make_help_lists_every_target(checkout: Path) -> None:
    out = subprocess.run(
        ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C", str(checkout), "help"],
        capture_output=True,
        text=True,
        check=True,
        env=make_env(checkout),
    ).stdout
    listed = {line.split()[1] for line in out.splitlines() if line.strip().startswith("make ")}
    targets = set(_targets())
    assert {"unit", "test", "demo", "dev-session", "gpu-info"} <= targets
    assert targets == listed, f"not in make help: {sorted(targets - listed)}"


@pytest.mark.parametrize(
    "target,extra,want",
    [
        ("deploy", [], [".venv-cli/bin/mlenv deploy 'local' --nodes 1"]),
        ("deploy", ["SCALE_DOWN=1"], [".venv-cli/bin/mlenv deploy 'local' --nodes 1 --scale-down"]),
        ("deploy-cluster-dry-run", [], [".venv-cli/bin/mlenv deploy 'local' --dry-run client"]),
        ("sync-once", [], [".venv-cli/bin/mlenv sync 'local'"]),
        (
            "sync-once",
            ["DELETE=1", "SYNC_DRY_RUN=1"],
            [".venv-cli/bin/mlenv sync 'local' --delete --dry-run"],
        ),
        ("sync-code", [], [".venv-cli/bin/mlenv sync 'local' --watch"]),
        ("vscode", [], [".venv-cli/bin/mlenv url 'local' vscode"]),
        ("jupyter", [], [".venv-cli/bin/mlenv url 'local' jupyter"]),
        ("gpu-info", [], [".venv-cli/bin/mlenv gpu-info 'local'"]),
        ("shell-multi-node", [], [".venv-cli/bin/mlenv shell 'local' --pod '0'"]),
        (
            "shell",
            ["POD=1", "CMD=nvidia-smi -L; id -u"],
            [".venv-cli/bin/mlenv shell 'local' --pod '1' -- sh -c 'nvidia-smi -L; id -u'"],
        ),
        ("build", [], [".venv-cli/bin/mlenv build 'local'"]),
        ("status", [], [".venv-cli/bin/mlenv status 'local'"]),
        ("deploy-multi-node", [], [".venv-cli/bin/mlenv deploy 'local'"]),
        ("deploy-multi-node", ["MODE=tcp"], [".venv-cli/bin/mlenv deploy 'local' --mode 'tcp'"]),
        # the rest of upstream's targets
        ("deploy-multi-node-rdma", [], [".venv-cli/bin/mlenv deploy 'local' --mode rdma"]),
        (
            "deploy-multi-node-tcp",
            ["NODES=3"],
            [".venv-cli/bin/mlenv deploy 'local' --mode tcp --nodes '3'"],
        ),
        ("list-projects", [], [".venv-cli/bin/mlenv list-clusters"]),
        (
            "discover-cluster",
            ["NAME=mine", "NAMESPACE=team-a"],
            [".venv-cli/bin/mlenv discover 'mine' --namespace 'team-a'"],
        ),
        ("wizard", [], [".venv-cli/bin/mlenv wizard"]),
        ("wizard", ["NAME=mine"], [".venv-cli/bin/mlenv wizard 'mine'"]),
        (
            "wizard-load",
            ["CONFIG=saved/mine.yaml"],
            [".venv-cli/bin/mlenv deploy 'saved/mine.yaml'"],
        ),
        (
            "debug-remote",
            ["FILE=train.py"],
            [
                ".venv-cli/bin/mlenv shell 'local' --pod '0' -- sh -c 'nohup python -m debugpy --listen "
                '"127.0.0.1:$2" --wait-for-client "/workspace/$1" >/tmp/mlenv-debugpy.log 2>&1 &\' '
                "debugpy 'train.py' '5678'",
                ".venv-cli/bin/mlenv port-forward 'local' --debug --pod '0'",
            ],
        ),
        # upstream's variables, honoured
        (
            "deploy",
            ["NAMESPACE=ml-prod"],
            [".venv-cli/bin/mlenv deploy 'local' --namespace 'ml-prod' --nodes 1"],
        ),
        ("sync-once", ["LOCAL_DIR=./src"], [".venv-cli/bin/mlenv sync 'local' --dir './src'"]),
        (
            "sync-code",
            ["LOCAL_DIR=./src", "REMOTE_DIR=/workspace"],
            [".venv-cli/bin/mlenv sync 'local' --watch --dir './src'"],
        ),
        (
            "port-forward",
            ["DEBUG_PORT=5679"],
            [".venv-cli/bin/mlenv port-forward 'local' --port '5679:5679' --pod '0'"],
        ),
        ("clean-multi-node", [], [".venv-cli/bin/mlenv teardown 'local'"]),
        ("clean-multi-node", ["PURGE=1"], [".venv-cli/bin/mlenv teardown 'local' --purge"]),
    ],
)
def test_upstream_targets_map_to_mlenv_verbs(
    checkout: Path, target: str, extra: list[str], want: list[str]
) -> None:
    assert dry(checkout, target, "CLUSTER=local", *extra) == want


def test_dev_session_syncs_watches_and_forwards_the_debug_port(checkout: Path) -> None:
    lines = dry(checkout, "dev-session", "FILE=train.py", "CLUSTER=local")
    assert lines[0] == ".venv-cli/bin/mlenv sync 'local'"
    assert lines[1].startswith(
        ".venv-cli/bin/mlenv shell 'local' --pod '0' -- sh -c 'nohup python -m "
        'debugpy --listen "127.0.0.1:$2" --wait-for-client'
    )
    assert lines[1].endswith("debugpy 'train.py' '5678'")
    assert any("mlenv sync 'local' --watch &" in x for x in lines)
    assert lines[-1] == ".venv-cli/bin/mlenv port-forward 'local' --debug --pod '0'"


@pytest.mark.parametrize(
    "content",
    [
        "x; touch PWNED\n",
        "$(touch PWNED)\n",
        "../clusters/a\n",
        "Barcelona\n",
        "/abs/path/barcelona.yaml\n",
        "\n",
    ],
)
def test_corrupt_current_cluster_file_is_ignored_with_a_warning(
    checkout: Path, content: str
) -> None:
    """The state file is read back as untrusted: only a DNS-1123 label is used (before the
    fix make pasted whatever it held, e.g. the raw path argument, into every recipe)."""
    (checkout / ".mlenv").mkdir()
    (checkout / ".mlenv" / "current-cluster").write_text(content)
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "-C",
            str(checkout),
            "-n",
            "status-cluster",
        ],
        capture_output=True,
        text=True,
        check=False,
        env=make_env(checkout),
    )
    assert out.returncode != 0 and "mlenv" not in out.stdout  # no fallback to local
    assert "ignoring .mlenv/current-cluster: not a cluster name" in out.stderr
    assert NO_CLUSTER.format(target="status-cluster") in out.stderr
    assert not (checkout / "PWNED").exists()


@pytest.mark.parametrize(
    "content,want",
    [
        ("barcelona\n", "barcelona"),
        ("nerc-tcp", "nerc-tcp"),
        ("x; rm -rf ~\n", None),
        ("a\nb\n", None),
        ("a" * 64 + "\n", None),
        ("\xff\xfe", None),
    ],
)
def test_current_cluster_is_read_back_validated(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: str,
    want: str | None,
) -> None:
    from mlenv.cli._clusterctx import current_cluster

    monkeypatch.setenv("MLENV_STATE_DIR", str(tmp_path))
    assert current_cluster() is None  # no file: nothing recorded, no warning
    (tmp_path / "current-cluster").write_bytes(content.encode("latin-1"))
    assert current_cluster() == want
    assert ("warning: ignoring" in capsys.readouterr().err) == (want is None)


def test_venv_builds_deepspeeds_op_before_anything_times_it(checkout: Path) -> None:
    """Built by torch's JIT inside a timed check on a fresh machine it overran the deadline
    and left a lock (CI, stop 28): make venv installs DeepSpeed with the op compiled in."""
    assert not [line for line in dry(checkout, "venv") if "dsops" in line]  # done: nothing to do
    (checkout / ".venv" / ".ds-ops").unlink()
    for target in ("venv", "test", "demo"):
        line = next(x for x in dry(checkout, target) if "dsops" in x)
        assert line.startswith(
            ".venv/bin/python -m mlenv.acceptance.checks.dsops --installed || "
        ), line
        assert (
            "DS_BUILD_SHM_COMM=1" in line
            and "--no-cache-dir" in line
            and "--force-reinstall" in line
        ), line
    (checkout / ".venv" / ".installed").unlink()
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "-C",
            str(checkout),
            "-n",
            "venv",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=make_env(checkout),
    ).stdout
    first = [x for x in out.splitlines() if "deepspeed==" in x and "dsops" not in x][0]
    assert first == 'bash scripts/dev/install-deepspeed.sh .venv/bin/python "deepspeed==0.19.8"', (
        first
    )


# A python for install-deepspeed.sh: the key script (stdin) answers a fixed key, `pip wheel`
# writes a wheel and notes the build flags it saw, `pip install` notes what it installed.
FAKE_PY = """#!/bin/sh
if [ "$1" = - ]; then cat >/dev/null; echo "deepspeed-0.19.8-torch2.13.0-cpython-311-shm"; exit 0; fi
echo "$* | shm=$DS_BUILD_SHM_COMM ops=$DS_BUILD_OPS acc=$DS_ACCELERATOR" >> "$CALLS"
case "$*" in
  *"pip wheel"*) [ -n "$FAIL_BUILD" ] && exit 1
                 while [ $# -gt 1 ]; do [ "$1" = -w ] && touch "$2/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"; shift; done ;;
esac
"""


def test_deepspeed_is_built_with_its_op_once_per_machine_and_installed_from_there(
    tmp_path: Path,
) -> None:
    """scripts/dev/install-deepspeed.sh: the first venv builds the wheel (the op's flags set,
    pip's cache off) into the cache, a second venv installs that wheel without a build; a
    build that fails leaves no folder a later run would take for a wheel."""
    py = tmp_path / "python"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    calls, cache = tmp_path / "calls", tmp_path / "wheels"
    env = {**os.environ, "CALLS": str(calls), "MLENV_WHEEL_CACHE": str(cache)}
    script = ROOT / "scripts" / "dev" / "install-deepspeed.sh"

    bad = subprocess.run(
        ["bash", str(script), str(py), "deepspeed==0.19.8"],
        capture_output=True,
        text=True,
        env={**env, "FAIL_BUILD": "1"},
        check=False,
    )
    assert bad.returncode != 0 and not list(cache.iterdir()), list(cache.iterdir())
    calls.unlink()
    for _ in range(2):
        r = subprocess.run(
            ["bash", str(script), str(py), "deepspeed==0.19.8"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert r.returncode == 0, r.stderr
    built, first, second = calls.read_text().splitlines()
    assert "-m pip wheel -q --no-cache-dir --no-build-isolation --no-deps -w" in built
    assert built.endswith("deepspeed==0.19.8 | shm=1 ops=0 acc=cpu"), built
    wheel = (
        cache
        / "deepspeed-0.19.8-torch2.13.0-cpython-311-shm"
        / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"
    )
    assert first == second == f"-m pip install -q {wheel} | shm=1 ops=0 acc=cpu"


@pytest.mark.parametrize(
    "target", ["deploy-cluster", "deploy", "sync-multi-node", "shell", "dev-session"]
)
@pytest.mark.parametrize(
    "var,want",
    [
        (
            "POD_NAME=my-pod",
            "POD_NAME is upstream ml-dev-env's: the pods here are ml-dev-env-0..N-1; "
            "pick one with POD=<index> (e.g. POD=1)",
        ),
        (
            "REMOTE_DIR=/app",
            "REMOTE_DIR=/app: the code folder in the pods is always /workspace (the "
            "workspace volume); unset REMOTE_DIR",
        ),
    ],
)
def test_upstream_variables_without_meaning_here_stop_with_one_line(
    checkout: Path, target: str, var: str, want: str
) -> None:
    """`POD_NAME=my-pod make dev-session` used to act on ml-dev-env-0 without a word."""
    err = dry_fails(checkout, target, "CLUSTER=local", var)
    lines = [x for x in err.splitlines() if "***" in x]  # make's clock-skew warnings aside
    assert len(lines) == 1 and want in lines[0], err


def test_upstream_variables_reach_the_environment_form_too(checkout: Path) -> None:
    """`NAMESPACE=ml-prod make deploy` (upstream's examples set them in the environment)."""
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "-C",
            str(checkout),
            "-n",
            "deploy",
            "CLUSTER=local",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**make_env(checkout), "NAMESPACE": "ml-prod", "DEBUG_PORT": "6000"},
    )
    assert ".venv-cli/bin/mlenv deploy 'local' --namespace 'ml-prod' --nodes 1" in " ".join(
        out.stdout.split()
    )
    lines = dry(checkout, "dev-session", "CLUSTER=local", "FILE=t.py", "DEBUG_PORT=6000")
    assert lines[1].endswith("debugpy 't.py' '6000'")
    assert lines[-1] == ".venv-cli/bin/mlenv port-forward 'local' --port '6000:6000' --pod '0'"


@pytest.mark.parametrize(
    "target,need",
    [("discover-cluster", "NAME="), ("wizard-load", "CONFIG="), ("debug-remote", "FILE=")],
)
def test_upstream_targets_say_what_they_need(checkout: Path, target: str, need: str) -> None:
    assert f"{target} needs {need}" in dry_fails(checkout, target, "CLUSTER=local")


def test_every_upstream_target_exists_or_help_names_its_replacement(checkout: Path) -> None:
    """Upstream ml-dev-env's 36 make targets (all its Makefile versions): each is a target
    here (same meaning or an alias). `test` and `clean` keep this project's meaning; the
    README's "Coming from ml-dev-env" table names what replaced them."""
    upstream = {
        "help",
        "build",
        "deploy",
        "clean",
        "test",
        "shell",
        "vscode",
        "jupyter",
        "logs",
        "status",
        "gpu-info",
        "dev-session",
        "sync-code",
        "debug-remote",
        "port-forward",
        "sync-once",
        "deploy-multi-node",
        "deploy-multi-node-rdma",
        "deploy-multi-node-tcp",
        "sync-multi-node",
        "shell-multi-node",
        "status-multi-node",
        "clean-multi-node",
        "deploy-cluster",
        "deploy-cluster-dry-run",
        "clean-cluster",
        "status-cluster",
        "list-clusters",
        "discover-cluster",
        "wizard",
        "wizard-load",
        "list-projects",
        "dev-setup",
        "format",
        "lint",
        "pre-commit",
    }
    assert len(upstream) == 36
    assert upstream <= set(_targets()), sorted(upstream - set(_targets()))
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Coming from ml-dev-env") :]
    table = table[: table.index("\n## ", 5)]
    for t in sorted(upstream):
        assert f"`make {t}" in table, f"README's Coming from ml-dev-env table lacks make {t}"
    for var in ("NAMESPACE", "POD_NAME", "LOCAL_DIR", "REMOTE_DIR", "DEBUG_PORT", "MODE"):
        assert f"`{var}" in table, var
    for path in ("/workspace/.deepspeed/hostfile", "discover_cluster.py", "deployments/"):
        assert path in table, path


def test_pre_commit_hooks_are_local_and_run_the_venvs_tools() -> None:
    """Upstream's hooks cloned five repositories at run time; ours run the venv's ruff and
    mypy (`repo: local`), the same commands `make lint` / `make typecheck` run."""
    import yaml

    doc = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert [r["repo"] for r in doc["repos"]] == ["local"]
    hooks = doc["repos"][0]["hooks"]
    assert {h["id"] for h in hooks} == {"ruff", "ruff-format", "mypy", "mypy-tests"}
    assert all(h["language"] == "system" and "rev" not in h for h in hooks)
    makefile = (ROOT / "Makefile").read_text()
    for h in hooks:
        # .venv/bin/TOOL through scripts/dev/venv-tool.sh (a missing venv: one line, what to run)
        runner, tool, *_ = h["entry"].split()
        assert runner == "scripts/dev/venv-tool.sh", h
        assert f"$(VENV)/bin/{tool}" in makefile  # the tools make lint/typecheck run
    # the same command line, its own cache included (make typecheck runs both mypy at once)
    (tests_hook,) = [h for h in hooks if h["id"] == "mypy-tests"]
    command = tests_hook["entry"].replace("scripts/dev/venv-tool.sh ", "$(VENV)/bin/")
    assert command in makefile
    assert "--config-file tests/mypy.ini" in tests_hook["entry"]
    (format_hook,) = [h for h in hooks if h["id"] == "ruff-format"]
    assert "ruff format --check" in format_hook["entry"]
    assert "$(VENV)/bin/ruff format --check" in makefile
    assert re.search(r"^pre-commit: lint typecheck ##", makefile, re.M)


def test_make_venv_says_a_missing_compiler_first(checkout: Path, tmp_path: Path) -> None:
    """DeepSpeed's op is compiled at install: without a compiler `make venv` failed minutes
    in with pages of compiler output; now its first line stops with the package to install."""
    (checkout / ".venv" / ".installed").unlink()
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "-C",
            str(checkout),
            "-n",
            "venv",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=make_env(checkout),
    ).stdout.splitlines()
    check = out[0]
    assert check.startswith('command -v "${CXX:-c++}"'), out
    assert any("deepspeed==" in x for x in out[1:])
    bare = tmp_path / "no-compiler"
    bare.mkdir()
    env = {"PATH": str(bare), "HOME": str(tmp_path)}
    res = subprocess.run(["/bin/sh", "-c", check], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "no C++ compiler (c++ is not on PATH): DeepSpeed's CPU op is compiled when it is installed; "
        "install one (Debian/Ubuntu: apt-get install g++; Fedora/RHEL: dnf install gcc-c++; "
        "macOS: xcode-select --install) or set CXX"
    ]
    (bare / "g++").write_text("#!/bin/sh\n")
    (bare / "g++").chmod(0o755)
    assert subprocess.run(["/bin/sh", "-c", check], env={**env, "CXX": "g++"}).returncode == 0
    # a venv made before: the compiler is asked for only when DeepSpeed must be rebuilt
    line = next(x for x in out if "dsops --installed" in x)
    assert (
        line.index("dsops --installed")
        < line.index('command -v "${CXX:-c++}"')
        < line.index("deepspeed==")
    )


def test_every_mlenv_call_reports_its_exit_code() -> None:
    """make exits 2 for any failed recipe: each mlenv call runs with MLENV_EXIT_LINE=1, so a
    failing verb's last line says its own code (FAIL 1 and ERROR 3 stay apart)."""
    text = (ROOT / "Makefile").read_text()
    recipes = [line for line in text.splitlines() if line.startswith("\t")]
    calls = [line for line in recipes if re.search(r"\$\((MLENV|CLI)\) ", line)]
    assert len(calls) > 25
    assert re.search(r"^MLENV := MLENV_EXIT_LINE=1 \$\(VENV\)/bin/mlenv$", text, re.M)
    assert re.search(r"^CLI := MLENV_EXIT_LINE=1 \$\(CLI_VENV\)/bin/mlenv$", text, re.M)
    assert not [line for line in recipes if "/bin/mlenv" in line]  # none around them


def test_pre_commit_without_a_venv_says_what_to_run(tmp_path: Path) -> None:
    """In a clone without .venv every hook failed with "Executable not found" and no hint."""
    r = subprocess.run(
        [str(ROOT / "scripts" / "dev" / "venv-tool.sh"), "ruff", "check"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (
        "pre-commit: .venv/bin/ruff is missing: run `make venv` (the hooks use the venv's "
        "ruff and mypy)\n"
    )
    r = subprocess.run(
        [str(ROOT / "scripts" / "dev" / "venv-tool.sh"), "ruff", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0 and r.stdout.startswith("ruff "), r.stderr


def _make(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C", str(checkout), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=make_env(checkout),
    )


def test_clean_never_deletes_the_run_history_and_clean_reports_asks(checkout: Path) -> None:
    """`make clean` deleted reports/ (the run history) and every acceptance report without
    asking; now it keeps them, says so, and only clean-reports deletes them."""
    for folder in ("reports", "acceptance-report/run-1"):
        (checkout / folder).mkdir(parents=True)
        (checkout / folder / "results.json").write_text("{}")
    r = _make(checkout, "clean")
    assert r.returncode == 0, r.stderr
    assert not (checkout / ".venv").exists() and not (checkout / ".venv-cli").exists()
    assert (checkout / "reports" / "results.json").exists()
    assert (checkout / "acceptance-report" / "run-1" / "results.json").exists()
    assert "make clean-reports" in r.stdout.splitlines()[-1]
    # no terminal to ask on (CI, a pipe): nothing deleted, one line, exit 2 (make's own)
    r = _make(checkout, "clean-reports")
    assert r.returncode == 2
    assert (
        "clean-reports: no terminal to ask on; YES=1 deletes reports/ acceptance-report/\n"
        in r.stderr
    )
    assert (checkout / "reports" / "results.json").exists()
    r = _make(checkout, "clean-reports", "YES=1")
    assert r.returncode == 0, r.stderr
    assert not (checkout / "reports").exists() and not (checkout / "acceptance-report").exists()


@pytest.mark.parametrize(
    "var,says",
    [
        ("PROJECT=barcelona", "use CLUSTER=<name>"),
        ("IMAGE_TAG=v2", "the config's image.ref"),
        ("BUILD_CONFIG=x", "the config's image.build"),
        ("POD_CONFIG=pod.yaml", "set gpus and resources in clusters/<name>.yaml"),
    ],
)
def test_upstream_variables_that_would_be_ignored_stop_with_the_new_way(
    checkout: Path, var: str, says: str
) -> None:
    err = dry_fails(checkout, "deploy", "CLUSTER=local", var)
    name = var.split("=")[0]
    assert f"{name} is upstream ml-dev-env's and means nothing here: " in err and says in err


def test_dev_session_first_syncs_local_dir(checkout: Path) -> None:
    """`make dev-session LOCAL_DIR=dir` first synced workspace/, then watched dir."""
    lines = dry(checkout, "dev-session", "CLUSTER=local", "LOCAL_DIR=./src")
    assert lines[0] == ".venv-cli/bin/mlenv sync 'local' --dir './src'"
    assert any("sync 'local' --watch --dir './src'" in line for line in lines[1:])


def test_make_help_and_the_readme_give_make_unit_one_time() -> None:
    """make help said "about a minute", the README "2 min 37 s"."""
    makefile = (ROOT / "Makefile").read_text()
    (help_line,) = re.findall(r"^unit: .*## (.*)$", makefile, re.M)
    (figure,) = re.findall(r"\((\d+ min \d+ s) on a 2-core machine\)", help_line)
    readme = (ROOT / "README.md").read_text()
    sentence = readme[readme.index("`make unit` is the inner loop") :].split("\n")[0]
    assert f"{figure} on a 2-core machine" in sentence
