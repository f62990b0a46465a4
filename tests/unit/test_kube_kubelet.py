"""The tier's kubelet decisions without a plane: back-off, restart policies, probe ports and
the status it reports (tests/kube/test_kubelet.py runs them for real)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlenv.testing.kube import kubelet
from mlenv.testing.kube.kubelet import BACKOFF_MAX_S, Ctr, Kubelet, PodRun


class Recording(Kubelet):
    def __init__(self, tmp: Path) -> None:
        notes = {kubelet.BACKOFF_ANNOTATION: "1"}  # the namespace's own back-off start
        super().__init__(tmp, self._kubectl, lambda line: None, lambda ns: 1.0, lambda ns: notes)
        self.launched: list[str] = []
        self.events: list[tuple[str, str]] = []

    def _kubectl(self, *args: str, stdin: str | None = None) -> Any:
        return subprocess.CompletedProcess(args, 0, "", "")

    def _launch(self, run: PodRun, ctr: Ctr) -> None:
        self.launched.append(ctr.name)
        # running, with no process whose end is looked for
        ctr.state, ctr.started, ctr.started_at, ctr.held = "running", True, 100.0, True

    def _event(self, run: PodRun, kind: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


def _run(tmp: Path, policy: str = "Always") -> tuple[PodRun, Ctr]:
    ctr = Ctr(spec={"name": "main", "image": "busybox"}, env={}, record=tmp / "r", log=tmp / "l")
    ctr.state, ctr.started_at = "running", 100.0
    obj = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    run = PodRun("ns", "p", "uid-1", tmp, "10.0.0.2", policy, 1.0, [ctr], obj)
    return run, ctr


def test_the_first_restart_is_at_once_then_the_back_off_doubles_to_its_cap(tmp_path: Path) -> None:
    k = Recording(tmp_path)
    run, ctr = _run(tmp_path)
    end = {"exit_code": 3, "started": 100.0, "finished": 101.0}
    k._ended(run, ctr, end, 101.0)
    assert k.launched == ["main"] and ctr.restarts == 1 and ctr.state == "running"
    waits = []
    for i in range(8):
        k._ended(run, ctr, end, 200.0 + i)
        assert ctr.state == "waiting" and ctr.reason == "CrashLoopBackOff"
        waits.append(ctr.restart_due - (200.0 + i))
        ctr.restart_due = 0.0
        k._step(run, ctr, 300.0)  # the back-off is over: started again
    assert waits[:4] == [1.0, 2.0, 4.0, 8.0] and max(waits) <= BACKOFF_MAX_S
    assert ctr.restarts == 9 and ("BackOff", k.events[0][1]) in k.events
    st = k.status(run)["containerStatuses"][0]
    assert st["restartCount"] == 9 and st["lastState"]["terminated"]["exitCode"] == 3


@pytest.mark.parametrize(
    "policy,code,restarted,phase",
    [
        ("Always", 0, True, "Running"),
        ("OnFailure", 0, False, "Succeeded"),
        ("OnFailure", 2, True, "Running"),
        ("Never", 2, False, "Failed"),
        ("Never", 0, False, "Succeeded"),
    ],
)
def test_the_restart_policy_decides(
    tmp_path: Path, policy: str, code: int, restarted: bool, phase: str
) -> None:
    k = Recording(tmp_path)
    run, ctr = _run(tmp_path, policy)
    k._ended(run, ctr, {"exit_code": code, "started": 100.0, "finished": 101.0}, 101.0)
    assert bool(k.launched) is restarted
    k._step(run, ctr, 102.0)  # the next tick: no probe, so a started container is ready
    st = k.status(run)
    assert st["phase"] == phase
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert ready["status"] == ("True" if restarted else "False")
    if phase != "Running":
        assert ready["reason"] == "PodCompleted"
        assert st["containerStatuses"][0]["state"]["terminated"]["exitCode"] == code


def test_a_probe_port_is_a_number_or_a_named_container_port() -> None:
    c = {"ports": [{"name": "ssh", "containerPort": 2222}]}
    assert kubelet.container_port(c, "ssh") == 2222
    assert kubelet.container_port(c, 8080) == 8080 and kubelet.container_port(c, "9090") == 9090
    assert kubelet.container_port(c, "http") is None


def test_readiness_needs_its_success_threshold_and_falls_at_its_failure_threshold(
    tmp_path: Path,
) -> None:
    k = Recording(tmp_path)
    run, ctr = _run(tmp_path)
    spec = {"tcpSocket": {"port": 1}, "successThreshold": 2, "failureThreshold": 2}
    p = kubelet.ProbeState("readiness", spec, 0.0)
    ctr.probes = [p]
    seen = []
    for ok in (True, True, False, False, True):
        k._judge(run, ctr, p, ok, "dial tcp: refused")
        seen.append(ctr.ready)
    assert seen == [False, True, True, False, False]
    assert [r for r, _ in k.events] == ["Unhealthy"]  # once, at the threshold
    # a liveness probe past its threshold kills the container (and says why)
    live = kubelet.ProbeState("liveness", {"failureThreshold": 1}, 0.0)
    k._judge(run, ctr, live, False, "dial tcp: refused")
    assert (
        ctr.killing
        and ("Killing", "Container main failed liveness probe, will be restarted") in k.events
    )
