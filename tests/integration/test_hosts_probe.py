"""The hosts probe: a live host whose python is slow to import is not "no answer over ssh".

At 20 s, status on a loaded 2-core machine reported hosts that had answered as silent
(test_hosts_sync_status_teardown, full run): the time goes to the host's python importing
torch and DeepSpeed, after ssh connected (ssh's own ConnectTimeout tells a dead host).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlenv.config.loader import load
from mlenv.platforms import hosts

SITE = Path(__file__).resolve().parents[1] / "data" / "platforms" / "site-baremetal-lab.yaml"


@pytest.fixture
def slow_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ssh that connects and whose remote python takes 2 s to answer."""
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\nsleep 2\necho \'{"python": "3.11.7", "torch": "2.13.0", '
        '"gpus": 2, "deepspeed": "0.19.8"}\'\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")


def test_status_waits_for_a_slow_python_and_a_timeout_says_what_ran_out(
    slow_ssh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = load(SITE)
    assert hosts.PROBE_TIMEOUT_S >= 60  # a live host's imports, not ssh's connect (5 s)
    lines = hosts.status_lines(cluster)
    assert len(lines) == 3 and all(
        "up, python 3.11.7" in line and "2.13.0" in line for line in lines
    ), lines
    monkeypatch.setattr(hosts, "PROBE_TIMEOUT_S", 0.5)
    short = hosts.status_lines(cluster)
    assert all(
        "no answer within 0.5 s" in line and "imports torch and DeepSpeed" in line for line in short
    ), short
    assert not any("no answer over ssh" in line for line in short), short
