"""The local runner's console: the terminal gets progress and the verdict,
launcher.log everything (with the wall time); the one-time op build is announced before
its silence."""

from __future__ import annotations

import io
from pathlib import Path

from mlenv.acceptance.run import local

# Real lines from a `mlenv acceptance --local` run (DeepSpeed 0.18 launcher, 2-core sandbox).
REAL = """\
[2026-11-24 00:06:38,232] [WARNING] [runner.py:214:fetch_hostfile] Unable to find hostfile, will proceed with training with local resources only.
[2026-11-24 00:06:38,233] [INFO] [runner.py:618:main] cmd = /work/main/.venv/bin/python -u -m deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMCwgMV19
[2026-11-24 00:06:44,185] [INFO] [launch.py:152:main] WORLD INFO DICT: {'localhost': [0, 1]}
[acceptance] 3 check(s), 2 rank(s) on 1 node(s), gloo/cpu, profile quick, deadline 120 s per check
[acceptance]   PASS  environment                  rank 0 (vm)              gpu_count=0  (0.0 s)
[2026-11-24 00:06:59,001] [WARNING] [launch.py:300:sigkill_handler] Killing subprocess 4242
[2026-11-24 00:06:58,505] [INFO] [launch.py:285:main] Process 23919 exits successfully.
"""


# What a quick CPU run printed before.8 (abridged from a real run on the 2-core
# sandbox): nccl-tests tables, FutureWarnings, DeepSpeed's argv and its sigkill_handler
# line after a FAIL, around the lines a person needs.
NOISY = (
    REAL
    + """\
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        1024           256     float     sum      -1    41.52    0.02    0.04      0    40.10    0.03    0.05      0
/work/main/.venv/lib/python3.11/site-packages/torch/functional.py:1: FutureWarning: `x` is deprecated
  warnings.warn(
[acceptance]   FAIL  collectives.all_reduce       world                    busbw_gbps=0.04  (3.1 s)
verdict: FAIL
  - collectives.all_reduce: rank 1 returned wrong data
reports: /tmp/r/ (results.json, results.jsonl, junit.xml, summary.md)
[acceptance] history: run 20261124-000658 recorded for cluster local
[2026-11-24 00:07:01,002] [ERROR] [launch.py:325:sigkill_handler] ['/work/main/.venv/bin/python', '-u', '-m', 'mlenv.acceptance'] exits with return code = 1
error: rank 1 (vm): RuntimeError: boom
"""
)


def _shown(level: str, text: str = NOISY) -> list[str]:
    log, out = io.StringIO(), io.StringIO()
    local._pump(io.StringIO(text), log, out, local.ConsoleFilter(level))  # type: ignore[arg-type]
    # the log keeps everything, each line behind the wall time (HH:MM:SS)
    logged = log.getvalue().splitlines()
    assert [ln[9:] for ln in logged] == text.splitlines()
    assert all(ln[:8].count(":") == 2 and ln[8] == " " for ln in logged)
    return out.getvalue().splitlines()


def test_terminal_shows_progress_and_the_verdict_only() -> None:
    shown = _shown("normal")
    assert shown == [
        "[acceptance] 3 check(s), 2 rank(s) on 1 node(s), gloo/cpu, profile quick, deadline 120 s per check",
        "[acceptance]   PASS  environment                  rank 0 (vm)              gpu_count=0  (0.0 s)",
        "[acceptance]   FAIL  collectives.all_reduce       world                    busbw_gbps=0.04  (3.1 s)",
        "verdict: FAIL",
        "  - collectives.all_reduce: rank 1 returned wrong data",
        "reports: /tmp/r/ (results.json, results.jsonl, junit.xml, summary.md)",
        "[acceptance] history: run 20261124-000658 recorded for cluster local",
        "error: rank 1 (vm): RuntimeError: boom",
    ]


def test_quiet_shows_the_verdict_and_errors_verbose_everything() -> None:
    assert _shown("quiet") == [
        "verdict: FAIL",
        "  - collectives.all_reduce: rank 1 returned wrong data",
        "reports: /tmp/r/ (results.json, results.jsonl, junit.xml, summary.md)",
        "error: rank 1 (vm): RuntimeError: boom",
    ]
    assert _shown("verbose") == NOISY.splitlines()  # as written: no time in front
    # an indented line is a reason only right after the verdict
    assert _shown("quiet", "  - not a reason\nverdict: PASS\n  - r\nx\n  - no\n") == [
        "verdict: PASS",
        "  - r",
    ]


def test_first_run_notice_only_without_the_built_op(tmp_path: Path) -> None:
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path)}
    assert local.first_run_notice(0, env) is not None
    (tmp_path / "deepspeed_shm_comm").mkdir()
    (tmp_path / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").write_bytes(b"\x7fELF")
    assert local.first_run_notice(0, env) is None
    assert local.first_run_notice(8, {}) is None  # GPU runs build nothing at start


def test_no_compiler_is_one_line_naming_the_package(tmp_path: Path) -> None:
    """A missing C++ compiler ended the first CPU run in ERROR with a 700-character
    compiler line; now preflight says it before anything starts."""
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "PATH": str(tmp_path / "empty")}
    why = local.compiler_problem(0, env, installed=False)
    assert why is not None and "\n" not in why
    assert "no C++ compiler (c++ is not on PATH)" in why and "apt-get install g++" in why
    assert "dnf install gcc-c++" in why
    fake = tmp_path / "bin" / "clang++"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert (
        local.compiler_problem(
            0, {**env, "PATH": str(fake.parent), "CXX": "clang++"}, installed=False
        )
        is None
    )
    assert (
        local.compiler_problem(8, env, installed=False) is None
    )  # GPU runs build nothing at start
    # DeepSpeed installed with the op compiled in (make venv): nothing is built, no compiler needed
    assert local.compiler_problem(0, env, installed=True) is None
    built = tmp_path / "ext" / "deepspeed_shm_comm"
    built.mkdir(parents=True)
    (built / "deepspeed_shm_comm.so").write_bytes(b"\x7fELF")
    assert (
        local.compiler_problem(0, env, installed=False) is None
    )  # already built: no compiler needed


def test_ops_installed_reads_deepspeeds_record_without_importing_it(
    tmp_path: Path, monkeypatch
) -> None:
    import sys

    pkg = tmp_path / "deepspeed"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (pkg / "git_version_info_installed.py").write_text(
        "version='0.19.8'\ninstalled_ops={'cpu_adam': False, 'deepspeed_shm_comm': 1}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "deepspeed", raising=False)
    assert local.ops_installed() is True
    (pkg / "git_version_info_installed.py").write_text(
        "installed_ops={'deepspeed_shm_comm': False}\n"
    )
    assert local.ops_installed() is False
    (pkg / "git_version_info_installed.py").unlink()  # a source checkout: nothing recorded
    assert local.ops_installed() is False
    assert "deepspeed" not in sys.modules


def test_ranks_use_this_venvs_ninja(monkeypatch) -> None:
    """`make` (no .venv/bin on PATH) and an activated venv found different ninjas, and the
    op rebuilt at every switch; the ranks now get this interpreter's bin folder first."""
    import os
    import sys

    bindir = str(Path(sys.executable).parent)
    monkeypatch.setattr(sys, "base_prefix", "/the-interpreter-the-venv-was-made-from")
    for path in ("/usr/local/bin:/usr/bin", f"/usr/bin:{bindir}", f"{bindir}:/usr/bin"):
        monkeypatch.setenv("PATH", path)
        got = local.launch_env(2, 0)["PATH"].split(os.pathsep)
        assert got[0] == bindir and got.count(bindir) == 1 and "/usr/bin" in got
    # an interpreter outside a venv leaves PATH as it is (its bin is a system folder)
    monkeypatch.setattr(sys, "base_prefix", sys.prefix)
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin")
    assert local.launch_env(2, 0)["PATH"] == "/usr/local/bin:/usr/bin"
