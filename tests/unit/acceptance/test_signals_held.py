"""A signal while the launcher starts is raised once it has started, so the code that stops
the run always knows the process it has to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from mlenv.acceptance.run.local import interrupts_held, signals_as_interrupts
from mlenv.errors import Interrupted


def test_a_signal_in_a_held_block_is_raised_when_the_block_ends() -> None:
    started = []
    with pytest.raises(Interrupted) as caught, signals_as_interrupts():
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            started.append("launcher")  # Popen returning: it must still happen
    assert started == ["launcher"]
    assert caught.value.signal_name == "SIGINT"


def test_a_signal_outside_a_held_block_is_raised_at_once() -> None:
    after = []
    with pytest.raises(Interrupted), signals_as_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        after.append("never")
    assert after == []


def test_a_held_block_without_a_signal_raises_nothing() -> None:
    with signals_as_interrupts(), interrupts_held():
        pass


def test_a_launcher_started_after_a_held_signal_can_still_be_stopped() -> None:
    """The stopping code sends SIGTERM to the launcher's group. A held signal once set the
    three signals to "ignore" before the fork, the launcher inherited that across exec,
    shrugged the SIGTERM off and ran to a PASS that a Ctrl-C had asked to stop."""
    probe = "import signal as s; print(int(s.getsignal(s.SIGTERM)), int(s.getsignal(s.SIGHUP)))"
    seen = []
    with pytest.raises(Interrupted), signals_as_interrupts():
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            seen.append(
                subprocess.run(
                    [sys.executable, "-c", probe], capture_output=True, text=True, check=True
                ).stdout.split()
            )
    assert seen == [[str(int(signal.SIG_DFL))] * 2]
