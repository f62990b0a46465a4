"""The tier's kubelet (mlenv/testing/kube/kubelet.py): a pod's container command runs inside
the pod, its output is the pod's log, its probes decide Ready and restarts, a command that
ends is restarted per restartPolicy with back-off (CrashLoopBackOff), and a restart of the
pod-root controller adopts running containers instead of starting them twice.

On the plain plane: the OpenShift one runs the DeepSpeed launches (conftest.py balances the
two workers).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from _kubeenv import Plane, until

from mlenv.testing.kube import build, plane
from mlenv.testing.kube.kubelet import BACKOFF_ANNOTATION

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py


def _pod(ns: str, name: str, command: list[str], **extra: Any) -> dict:
    policy = extra.pop("restartPolicy", None)
    container = {"name": "main", "image": "busybox", "command": command, **extra}
    spec: dict = {"containers": [container], "terminationGracePeriodSeconds": 1}
    if policy:
        spec["restartPolicy"] = policy
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def _until(what: str, check: Callable[[], Any], seconds: float = 60) -> Any:
    return until(what, check, seconds, step=0.3)


def _status(p: Plane, ns: str, name: str) -> dict:
    return p.json("get", "pod", "-n", ns, name).get("status") or {}


def _in_phase(p: Plane, ns: str, name: str, phase: str) -> dict | None:
    status = _status(p, ns, name)
    return status if status.get("phase") == phase else None


def _ready(status: dict) -> str:
    return next((c["status"] for c in status.get("conditions") or [] if c["type"] == "Ready"), "")


def _container(status: dict) -> dict:
    return (status.get("containerStatuses") or [{}])[0]


def _events(p: Plane, ns: str, name: str) -> list[tuple[str, str]]:
    items = p.json("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}")
    return [(e["reason"], e.get("message", "")) for e in items["items"]]


def test_a_command_that_ends_is_restarted_with_back_off_and_its_output_is_the_log(
    plain: Plane,
) -> None:
    ns = plain.namespace("crash", user_role=None)
    plain.ok("annotate", "namespace", ns, f"{BACKOFF_ANNOTATION}=1")
    plain.apply(_pod(ns, "crash", ["sh", "-c", 'echo "run as $(hostname)"; echo oops >&2; exit 3']))
    st = _until(
        "two restarts and CrashLoopBackOff",
        lambda: (
            (s := _status(plain, ns, "crash"))
            and _container(s).get("restartCount", 0) >= 2
            and "waiting" in _container(s).get("state", {})
            and s
        ),
    )
    cs = _container(st)
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff", cs
    assert cs["lastState"]["terminated"]["exitCode"] == 3, cs
    assert cs["lastState"]["terminated"]["reason"] == "Error", cs
    assert _ready(st) == "False" and st["phase"] == "Running", st
    # the pod's log is its command's output, this run's and the one before
    for args in ((), ("--previous",)):
        log = plain.ok("logs", "-n", ns, "crash", *args)
        assert "run as crash" in log and "oops" in log, (args, log)
    assert any(r == "BackOff" for r, _ in _events(plain, ns, "crash"))
    # back-off grows: the restarts come further apart (1 s, then 2 s, 4 s ...)
    before = cs["restartCount"]
    time.sleep(3)
    after = _container(_status(plain, ns, "crash"))["restartCount"]
    assert 1 <= after - before <= 3, (before, after)


def test_the_restart_policy_decides_what_an_ended_command_leaves(plain: Plane) -> None:
    ns = plain.namespace("policy", user_role=None)
    plain.apply(
        _pod(ns, "never-ok", ["sh", "-c", "echo done"], restartPolicy="Never"),
        _pod(ns, "never-bad", ["sh", "-c", "exit 7"], restartPolicy="Never"),
        _pod(ns, "onfailure-ok", ["true"], restartPolicy="OnFailure"),
    )
    for name, phase, code in (("never-ok", "Succeeded", 0), ("never-bad", "Failed", 7),
                              ("onfailure-ok", "Succeeded", 0)):  # fmt: skip
        st = _until(f"{name} {phase}", partial(_in_phase, plain, ns, name, phase))
        cs = _container(st)
        assert cs["state"]["terminated"]["exitCode"] == code and cs["restartCount"] == 0, cs
        assert _ready(st) == "False", st
    assert plain.ok("logs", "-n", ns, "never-ok").strip() == "done"


def test_the_readiness_probe_decides_ready(plain: Plane) -> None:
    ns = plain.namespace("ready", user_role=None)
    probe = {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1}
    plain.apply(
        _pod(ns, "slow", ["sh", "-c", "sleep 4; touch /tmp/ready; exec sleep infinity"],
             readinessProbe=probe),
        _pod(ns, "tcp", ["sleep", "infinity"],
             readinessProbe={"tcpSocket": {"port": 2222}, "periodSeconds": 1}),
    )  # fmt: skip
    _until("slow Running", lambda: _status(plain, ns, "slow").get("phase") == "Running")
    early = _status(plain, ns, "slow")
    assert _ready(early) == "False" and _container(early)["ready"] is False, early
    st = _until(
        "slow Ready", lambda: (s := _status(plain, ns, "slow")) and _ready(s) == "True" and s
    )
    assert _container(st)["ready"] is True and _container(st)["restartCount"] == 0, st
    # nothing listens on the probed port: running, never ready, never restarted
    tcp = _status(plain, ns, "tcp")
    assert tcp["phase"] == "Running" and _ready(tcp) == "False", tcp
    _until(
        "an Unhealthy event", lambda: any(r == "Unhealthy" for r, _ in _events(plain, ns, "tcp"))
    )
    assert _container(_status(plain, ns, "tcp"))["restartCount"] == 0


def test_a_failed_liveness_probe_restarts_the_container(plain: Plane) -> None:
    ns = plain.namespace("live", user_role=None)
    live = {"tcpSocket": {"port": 2222}, "periodSeconds": 1, "failureThreshold": 2}
    plain.apply(_pod(ns, "dead", ["sleep", "infinity"], livenessProbe=live))
    st = _until(
        "a restart",
        lambda: (
            (s := _status(plain, ns, "dead")) and _container(s).get("restartCount", 0) >= 1 and s
        ),
    )
    # killed by SIGTERM: 128 + 15, as runtimes report it
    assert _container(st)["lastState"]["terminated"]["exitCode"] == 143, st
    reasons = _events(plain, ns, "dead")
    assert any(r == "Unhealthy" and m.startswith("Liveness probe failed: ") for r, m in reasons)
    assert any(r == "Killing" and "failed liveness probe" in m for r, m in reasons), reasons


def test_a_restarted_controller_adopts_running_containers(plain: Plane) -> None:
    ns = plain.namespace("adopt", user_role=None)
    plain.apply(_pod(ns, "kept", ["sh", "-c", "echo started; exec sleep infinity"]))
    _until("kept Ready", lambda: _ready(_status(plain, ns, "kept")) == "True")
    record = plain.pod_dir(ns, "kept") / "containers" / "main.json"
    pid = _until(
        "the container's record", lambda: record.exists() and json.loads(record.read_text())["pid"]
    )
    assert plane._stop(plain.tier, "podroots")
    try:
        assert Path(f"/proc/{pid}").exists()  # the container outlives its controller
    finally:
        plane.start_podroots(plain.tier, build.paths().kube("kubectl"))
    time.sleep(3)  # the new controller's list, its adoption and a few ticks
    st = _status(plain, ns, "kept")
    assert _container(st)["restartCount"] == 0 and _ready(st) == "True", st
    assert json.loads(record.read_text())["pid"] == pid and Path(f"/proc/{pid}").exists()
    assert plain.ok("logs", "-n", ns, "kept").count("started") == 1
    # adopted, it is still watched: its end is seen and it is restarted
    os.kill(pid, signal.SIGKILL)
    st = _until(
        "a restart after the kill",
        lambda: (
            (s := _status(plain, ns, "kept")) and _container(s).get("restartCount", 0) == 1 and s
        ),
    )
    assert _container(st)["lastState"]["terminated"]["exitCode"] == 137, st
