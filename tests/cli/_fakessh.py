"""A fake ``ssh`` on PATH for the hosts platform's tests, and the checkout it serves.

The fake behaves as OpenSSH does: a host listed in ``$FAKE_SSH_DOWN`` is refused (exit
255, ssh's message on stderr, or in the ``-E`` file when one is given); any other host
answers the probe, or runs the remote command line with ``sh -c`` (the words joined by
spaces, as sshd hands them to the login shell) in its own login directory,
``$FAKE_SSH_HOMES/<host>``: each host is a separate machine, none sees this one's files
but through the command. A torchrun is a "rank" that runs until stopped, or, with
``$FAKE_SSH_RANKS=real``, the command itself.

Used by ``tests/cli/test_hosts_verbs.py`` (the verbs in process) and
``tests/integration/test_hosts_fake_ssh_runs.py`` (whole runs: real processes, signals).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "tests" / "data" / "platforms" / "site-baremetal-lab.yaml"
HOSTS = ["Lab-WS-01", "Lab-WS-02", "lab_ws_03.lan"]

FAKE_SSH = r"""#!/bin/sh
echo "$*" >> "$FAKE_SSH_CALLS"
log=""; host=""
while [ $# -gt 0 ]; do
  case "$1" in
    -E) log="$2"; shift 2 ;;
    -p|-l|-i|-F) shift 2 ;;
    --) host="$2"; shift 2; break ;;
    *) shift ;;
  esac
done
if [ -n "$FAKE_SSH_HOMES" ]; then mkdir -p "$FAKE_SSH_HOMES/$host" && cd "$FAKE_SSH_HOMES/$host" || exit 1; fi
for d in $FAKE_SSH_DOWN; do
  if [ "$d" = "$host" ]; then
    msg="ssh: connect to host $host port 2222: Connection refused"
    if [ -n "$log" ]; then echo "$msg" >> "$log"; else echo "$msg" >&2; fi
    exit 255
  fi
done
case "$*" in
  *torch.distributed.run*)
    if [ "$FAKE_SSH_RANKS" = real ]; then exec sh -c "$*"; fi
    # a "rank" that outlives this ssh unless the host is told to stop it
    sh -c 'while :; do sleep 1; done' "rank $*" & wait ;;
  *"import json, platform"*) echo '{"python": "3.11.7", "torch": "2.13.0", "gpus": 2, "deepspeed": "0.19.8"}' ;;
  *tar\ -c*) sh -c "$*"; rc=$?; exit "${FAKE_SSH_TAR_EXIT:-$rc}" ;;  # GNU tar's 1: a file changed while read
  *) exec sh -c "$*" ;;
esac
"""


def fake_ssh_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout at ``tmp_path`` holding the site-lab hosts config, the fake ssh first on
    PATH, each host's login directory under ``hosts/``; ``MLENV_ROOT`` points at it."""
    (tmp_path / "clusters").mkdir()
    shutil.copy(SITE, tmp_path / "clusters" / "site-lab.yaml")
    ssh = tmp_path / "bin" / "ssh"
    ssh.parent.mkdir()
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{ssh.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("FAKE_SSH_DOWN", "")
    monkeypatch.setenv("FAKE_SSH_HOMES", str(tmp_path / "hosts"))
    monkeypatch.delenv("FAKE_SSH_RANKS", raising=False)
    monkeypatch.delenv("FAKE_SSH_TAR_EXIT", raising=False)
    monkeypatch.delenv("MLENV_HISTORY_DIR", raising=False)  # the control host's history: reports/
    monkeypatch.delenv("MLENV_OPTIONS", raising=False)
    monkeypatch.delenv("MLENV_BASELINE", raising=False)
    monkeypatch.setenv("MLENV_ROOT", str(tmp_path))
    return tmp_path
