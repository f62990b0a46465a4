"""The local runner's console (i16): DeepSpeed's INFO chatter goes to launcher.log only,
CI logs get timestamps, and the one-time op build is announced before its silence."""

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


class _Out(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_chatter_goes_to_the_log_only() -> None:
    log, out = io.StringIO(), _Out(tty=True)
    local._pump(io.StringIO(REAL), log, out, verbose=False, stamp=False)
    assert log.getvalue() == REAL  # the log keeps everything, verbatim
    shown = out.getvalue().splitlines()
    assert [ln for ln in shown if "[INFO]" in ln] == []
    assert any("PASS  environment" in ln for ln in shown)
    # a real warning still reaches the console; the expected hostfile one does not
    assert any("Killing subprocess" in ln for ln in shown)
    assert not any("Unable to find hostfile" in ln for ln in shown)


def test_verbose_shows_everything_and_ci_lines_carry_a_time() -> None:
    out = _Out(tty=False)
    local._pump(io.StringIO(REAL), io.StringIO(), out, verbose=True, stamp=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(REAL.splitlines())
    assert all(ln[:8].count(":") == 2 and ln[8] == " " for ln in lines)


def test_first_run_notice_only_without_the_built_op(tmp_path: Path) -> None:
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path)}
    assert local.first_run_notice(0, env) is not None
    (tmp_path / "deepspeed_shm_comm").mkdir()
    (tmp_path / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").write_bytes(b"\x7fELF")
    assert local.first_run_notice(0, env) is None
    assert local.first_run_notice(8, {}) is None  # GPU runs build nothing at start
