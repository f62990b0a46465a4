"""Through the CLI: a pod someone else in the namespace made with our labels
is not ours. Each verb that reaches pods (shell, logs, port-forward, launch, status,
teardown, gpu-info) leaves it alone; status and teardown name it. The cluster-layer
twin (sync, deploy's warning, the ownership rule itself) is
tests/unit/cluster/test_neighbour.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from _fakeenv import fake_state, run

from mlenv.testing.fakecluster import FakeCluster
from mlenv.workload import workload_for

pod_name = workload_for().pod_name

NS = "ml-dev-env"  # barcelona's namespace
FREE = pod_name(5)  # an ordinal past replicas: a free name anyone may take
INTRUDER = "intruder"


def _plant(fake: FakeCluster, name: str) -> None:
    """A Running copy of pod-0 under ``name``, without the StatefulSet's ownerReference."""
    pod = copy.deepcopy(fake.get("Pod", pod_name(0), NS))
    assert pod is not None
    meta = pod["metadata"]
    for k in ("uid", "resourceVersion", "ownerReferences", "creationTimestamp", "generation"):
        meta.pop(k, None)
    meta["name"] = name
    meta["labels"]["statefulset.kubernetes.io/pod-name"] = name
    fake._store(pod, NS)


def _deployed_with_neighbours(tmp_path: Path, monkeypatch) -> Path:
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    fake = FakeCluster.load(str(state))
    _plant(fake, FREE)
    _plant(fake, INTRUDER)
    fake.save(str(state))
    return state


def _calls(state: Path) -> list[list[str]]:
    return FakeCluster.load(str(state)).calls


def _touched(state: Path, *pods: str) -> list[list[str]]:
    """exec / interactive / logs / port-forward calls that reached one of ``pods``."""
    return [c for c in _calls(state) if len(c) > 1 and c[1] in pods]


def test_shell_logs_and_port_forward_refuse_a_neighbours_pod(tmp_path, monkeypatch) -> None:
    state = _deployed_with_neighbours(tmp_path, monkeypatch)
    for args in (
        ["shell", "barcelona", "--pod", "5"],
        ["logs", "barcelona", "--pod", "5"],
        ["port-forward", "barcelona", "--debug", "--pod", "5"],
    ):
        r = run(args, state, monkeypatch)
        assert r.exit_code == 3, (args, r.output)
        assert r.stderr == (
            f"error: pod {FREE} in {NS} is not a pod of barcelona's "
            "StatefulSet (someone else made it): nothing was started "
            "(mlenv status barcelona)\n"
        ), args
        assert r.stdout == "", args
    assert _touched(state, FREE) == []
    # our own pods still work
    assert run(["shell", "barcelona", "--pod", "1"], state, monkeypatch).exit_code == 0
    assert run(["logs", "barcelona", "--pod", "1"], state, monkeypatch).exit_code == 0


def test_launch_never_runs_in_a_neighbours_pod(tmp_path, monkeypatch) -> None:
    state = _deployed_with_neighbours(tmp_path, monkeypatch)
    fake = FakeCluster.load(str(state))
    fake.exec_responses["python -m mlenv.pod run-torchrun"] = {"rc": 0}
    fake.save(str(state))
    r = run(["launch", "barcelona", "--torchrun"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    ran = sorted(c[1] for c in _calls(state) if c[0] == "exec" and "run-torchrun" in c)
    assert ran == [pod_name(0), pod_name(1)]
    assert _touched(state, FREE, INTRUDER) == []


def test_launch_refuses_a_pod_0_the_statefulset_does_not_control(tmp_path, monkeypatch) -> None:
    """Right name, right labels, another owner (made while the StatefulSet was away)."""
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    fake = FakeCluster.load(str(state))
    pod = fake.get("Pod", pod_name(0), NS)
    assert pod is not None
    pod["metadata"]["ownerReferences"][0]["uid"] = "someone-elses"
    fake._store(pod, NS)
    fake.save(str(state))
    r = run(["launch", "barcelona"], state, monkeypatch)
    assert r.exit_code == 3 and "is not a pod of barcelona's StatefulSet" in r.stderr, r.output
    assert not [c for c in _calls(state) if c[0] == "exec"]


def test_status_lists_only_ours_and_names_the_neighbours(tmp_path, monkeypatch) -> None:
    state = _deployed_with_neighbours(tmp_path, monkeypatch)
    r = run(["status", "barcelona"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    table = r.stdout.split("POD ", 1)[1].split("PVC ", 1)[0]
    listed = [line.split()[0] for line in table.splitlines()[1:] if line.strip()]
    assert listed == [pod_name(0), pod_name(1), "ml-dev-env-dev"]
    assert INTRUDER not in r.stdout
    assert r.stderr == (
        f"warning: pod(s) {INTRUDER}, {FREE} carry the labels of barcelona but "
        f"are not its StatefulSet's: ignored (someone else in namespace {NS} "
        "made them; see docs/security.md)\n"
    )
    doc = json.loads(run(["status", "barcelona", "-o", "json"], state, monkeypatch).stdout)
    assert doc["neighbours"] == [INTRUDER, FREE]
    assert INTRUDER not in [p["name"] for p in doc["pods"]]


def test_gpu_info_reads_only_our_pods(tmp_path, monkeypatch) -> None:
    state = _deployed_with_neighbours(tmp_path, monkeypatch)
    run(["gpu-info", "barcelona"], state, monkeypatch)
    assert [c[1] for c in _calls(state) if c[0] == "exec"]  # it did read ours
    assert _touched(state, FREE, INTRUDER) == []


def test_teardown_keeps_and_names_a_neighbours_pods(tmp_path, monkeypatch) -> None:
    state = _deployed_with_neighbours(tmp_path, monkeypatch)
    dry = run(["teardown", "barcelona", "--dry-run"], state, monkeypatch)
    assert dry.exit_code == 0, dry.output
    for name in (INTRUDER, FREE):
        assert f"would delete pod/{name}" not in dry.stdout
        assert f"would keep pod/{name}: kept: it carries the labels of barcelona" in dry.stdout
    r = run(["teardown", "barcelona"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "deleted statefulset/ml-dev-env" in r.stdout and "deleted pod/ml-dev-env-dev" in r.stdout
    for name in (INTRUDER, FREE):
        assert f"deleted pod/{name}" not in r.stdout
        assert f"warning: left behind: pod/{name}: kept" in r.stderr
    fake = FakeCluster.load(str(state))
    assert fake.get("Pod", INTRUDER, NS) is not None and fake.get("Pod", FREE, NS) is not None
    assert fake.get("StatefulSet", "ml-dev-env", NS) is None
