"""Client calls killed at their deadline, on the wall clock: the API timeout bounds every
``oc``/``kubectl`` call but exec and rsync.

Against a fake ``kubectl`` that never answers (it sleeps a minute): each call carries
``--request-timeout`` = the client's ``api_timeout`` and its process is killed
:data:`~mlenv.cluster.oc.CALL_SLACK_S` later, the probe exactly at its limit; the error
is one line naming the server; exec keeps its own limit. And ``OcCluster._call`` itself:
a process past its deadline is killed there, with its output so far.

Integration tier: real client processes, waited for and killed on the wall clock. The
argv, stdin and retry decisions without a wait are ``tests/unit/cluster/test_oc_runner.py``
and ``tests/unit/cluster/test_api_timeout.py``; the CLI end to end through the real
kubectl is ``tests/integration/test_unreachable_client.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from mlenv.cluster.api import Unreachable
from mlenv.cluster.oc import CALL_SLACK_S, OcCluster

# The cluster tests' fake client on PATH (FakeBin), from their conftest.
_spec = importlib.util.spec_from_file_location(
    "cluster_conftest", Path(__file__).resolve().parents[1] / "unit" / "cluster" / "conftest.py"
)
assert _spec and _spec.loader
_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cluster)


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """A PATH with nothing but the fake client tools a test installs (and tar)."""
    return _cluster.FakeBin(tmp_path / "fakebin", monkeypatch)


SERVER = "https://api.example.test:6443"
HANG = 60  # what the fake would wait: a test that waits for it has failed
# How late a kill may come on the wall clock: the fake kubectl is a Python process
# starting on a possibly overloaded machine (load 8 on 2 cores measured 3 s late). The
# exact deadline each call is given is checked through `deadlines`; the wall clock only
# shows it is enforced.
LATE = 5.0


@pytest.fixture
def deadlines(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds each client process is given before it is killed (OcCluster._call)."""
    seen: list[float] = []
    real = OcCluster._call

    def spy(line: list[str], stdin: str | None, timeout: float) -> tuple[int, str, str, bool]:
        if math.isfinite(timeout):  # inf: a call without a kill deadline
            seen.append(timeout)
        return real(line, stdin, timeout)

    monkeypatch.setattr(OcCluster, "_call", staticmethod(spy))
    return seen


@pytest.fixture
def silent(fake_bin) -> OcCluster:
    """kubectl whose every server call hangs; config view answers the server's URL."""
    fake_bin.install("kubectl")
    fake_bin.respond(
        [
            {"match": ["config", "view"], "stdout": SERVER},
            {"match": ["exec"], "sleep": 2 + CALL_SLACK_S, "stdout": "done\n"},
            {"match": [], "sleep": HANG},
        ]
    )
    return OcCluster(api_timeout=0.5)


def test_a_call_that_never_answers_is_killed_past_the_api_timeout_and_names_the_server(
    silent: OcCluster, fake_bin, deadlines: list[float]
) -> None:
    silent.server_url = SERVER  # what the probe found
    t0 = time.monotonic()
    with pytest.raises(Unreachable) as e:
        silent.get("Pod", "p", "ns")
    wall = time.monotonic() - t0
    assert deadlines == [0.5 + CALL_SLACK_S]
    assert wall < 0.5 + CALL_SLACK_S + LATE, wall
    assert str(e.value) == (
        f"cannot reach the API server {SERVER}: no answer within 0.5 s "
        "(raise the limit with MLENV_API_TIMEOUT_S or --request-timeout)"
    )
    assert "--request-timeout=500ms" in fake_bin.calls()[0]


@pytest.mark.parametrize("call", ["list", "apply", "delete", "can_i", "logs"])
def test_every_api_call_is_bounded(silent: OcCluster, call: str, deadlines: list[float]) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    run = {
        "list": lambda: silent.list("Pod", "ns", {"a": "b"}),
        "apply": lambda: silent.apply(cm, "ns"),
        "delete": lambda: silent.delete("Pod", "p", "ns"),
        "can_i": lambda: silent.can_i("create", "pods", "ns", subresource="exec"),
        "logs": lambda: silent.logs("p", "ns"),
    }[call]
    t0 = time.monotonic()
    with pytest.raises(Unreachable, match="no answer within 0.5 s"):
        run()
    assert time.monotonic() - t0 < 0.5 + CALL_SLACK_S + LATE
    assert deadlines == [0.5 + CALL_SLACK_S]  # one call (apply's first read), not retried


def test_the_probe_is_bounded_by_exactly_the_limit_it_names(
    silent: OcCluster, deadlines: list[float]
) -> None:
    """Once the probe's process had its limit plus 5 s (and kubectl retried inside)."""
    t0 = time.monotonic()
    with pytest.raises(Unreachable) as e:
        silent.probe(1.0)
    wall = time.monotonic() - t0
    assert deadlines[-1] == 1.0  # the /version request (after config view's own bound)
    assert wall < 1.0 + LATE + 1.0, wall
    assert str(e.value).startswith(f"cannot reach the API server {SERVER}: no answer within 1 s")


def test_exec_keeps_its_own_limit_not_the_api_timeout(
    silent: OcCluster, deadlines: list[float]
) -> None:
    """exec and rsync run user code for minutes: MLENV_EXEC_TIMEOUT bounds them, not the
    API timeout (this exec takes longer than api_timeout + CALL_SLACK_S and succeeds)."""
    assert silent.exec("p", "ns", ["true"], timeout=30).stdout == "done\n"
    assert deadlines == [30]


def test_a_process_past_its_deadline_is_killed_there_with_its_output_so_far() -> None:
    """Exit -1 and timed_out, as invoke reported it. A child it left holding the output
    (an exec credential plugin) does not keep the call waiting: the output goes to files."""
    script = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    t0 = time.monotonic()
    rc, out, _err, timed_out = OcCluster._call([sys.executable, "-c", script], None, 1.5)
    wall = time.monotonic() - t0
    with contextlib.suppress(ValueError, ProcessLookupError):
        os.kill(int(out), signal.SIGKILL)  # the orphan, ours
    assert (rc, timed_out) == (-1, True) and out.strip().isdigit(), out
    assert 1.5 <= wall < 1.5 + LATE, wall


def test_a_killed_call_is_unreachable_naming_the_server(fake_bin) -> None:
    """The error a timed-out call becomes is what it was (test_api_timeout pins the rest)."""
    fake_bin.install("kubectl")
    fake_bin.respond([{"match": [], "sleep": 60}])
    c = OcCluster(api_timeout=0.5)
    c.server_url = "https://api.example.test:6443"
    t0 = time.monotonic()
    with pytest.raises(
        Unreachable,
        match="^cannot reach the API server https://api.example.test:6443: no answer within 0.5 s",
    ):
        c.get("Pod", "p", "ns")
    assert time.monotonic() - t0 < 0.5 + CALL_SLACK_S + LATE
