"""i10.5: the dev loop's verbs on the fake cluster: url, gpu-info, port-forward --debug,
shell -- CMD."""

from __future__ import annotations

from _fakeenv import fake_state, run

from mlenv.cluster.devloop import GPU_QUERY
from mlenv.testing.fakecluster import FakeCluster


def deployed(tmp_path, monkeypatch):
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    return state


def test_i10_5_url_prints_the_route_and_how_to_sign_in(tmp_path, monkeypatch) -> None:
    state = deployed(tmp_path, monkeypatch)
    fake = FakeCluster.load(str(state))
    route = fake.get("Route", "ml-dev-env-vscode", "ml-dev-env")
    assert route is not None
    route["spec"]["host"] = "vscode-ml-dev-env.apps.example.com"
    fake.apply(route, "ml-dev-env", field_manager="openshift-router", force_conflicts=True)
    fake.save(str(state))
    r = run(["url", "barcelona", "vscode"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "vscode: https://vscode-ml-dev-env.apps.example.com" in r.output
    assert "OpenShift account" in r.output
    r = run(["url", "barcelona", "nope"], state, monkeypatch)
    assert r.exit_code == 2 and "unknown dev tool 'nope'" in r.output


def test_i10_5_gpu_info_is_one_table_for_every_pod(tmp_path, monkeypatch) -> None:
    state = deployed(tmp_path, monkeypatch)
    fake = FakeCluster.load(str(state))
    line = " ".join(GPU_QUERY)
    fake.pod_exec_responses["ml-dev-env-0"] = {line: {"rc": 0, "stdout": (
        "0, NVIDIA H100 80GB HBM3, 1024, 81559, 3\n1, NVIDIA H100 80GB HBM3, 0, 81559, 0\n")}}
    fake.pod_exec_responses["ml-dev-env-1"] = {line: {"rc": 9, "stderr": (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver\n")}}
    fake.save(str(state))
    r = run(["gpu-info", "barcelona"], state, monkeypatch)
    assert r.exit_code == 3, r.output  # one pod could not be read: say so, not 0
    rows = r.output.splitlines()
    assert any(x.split()[:2] == ["ml-dev-env-0", "0"] and "1024/81559" in x for x in rows)
    assert any(x.startswith("ml-dev-env-1") and "couldn't communicate" in x for x in rows)


def test_i10_5_port_forward_debug_and_shell_command(tmp_path, monkeypatch) -> None:
    state = deployed(tmp_path, monkeypatch)
    r = run(["port-forward", "barcelona", "--debug", "--pod", "1", "--port", "6006"], state,
            monkeypatch)
    assert r.exit_code == 0, r.output
    assert "127.0.0.1:5678 -> ml-dev-env-1:5678" in r.output
    r = run(["shell", "barcelona", "--", "nvidia-smi", "topo", "-m"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    calls = FakeCluster.load(str(state)).calls
    assert ["port-forward", "ml-dev-env-1", "6006:6006", "5678:5678"] in calls
    assert ["interactive", "ml-dev-env-0", "nvidia-smi", "topo", "-m"] in calls
    r = run(["port-forward", "barcelona", "--port", "x:1"], state, monkeypatch)
    assert r.exit_code == 2 and "expected PORT or LOCAL:REMOTE" in r.output
