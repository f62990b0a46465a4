"""the harness's bounded run never hangs on a pipe a grandchild still holds."""

from __future__ import annotations

import subprocess
import sys
import time

from harness.netns import run_bounded

# The child leaves a grandchild that keeps stdout open and sleeps; the grandchild moves to
# its own session, so killing the child's group does not reach it: only abandoning the
# pipe ends the wait.
SCRIPT = r"""
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(60)"])
print("started", flush=True)
time.sleep(60)
"""


def test_harness_run_returns_after_its_timeout_despite_a_grandchild() -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    t = time.monotonic()
    res = run_bounded(p, timeout=1.0)
    took = time.monotonic() - t
    assert res.returncode == 124
    assert took < 10, f"run blocked {took:.1f} s on the grandchild's pipe"


def test_run_bounded_returns_output_of_a_quick_command() -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", "print('hi')"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    res = run_bounded(p, timeout=10)
    assert res.returncode == 0 and res.stdout == "hi\n"
