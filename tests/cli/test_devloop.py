"""the dev loop's verbs on the fake cluster: url, gpu-info, port-forward --debug,
shell -- CMD."""

from __future__ import annotations

from _fakeenv import ROOT, fake_state, run

from mlenv.cluster.devloop import GPU_QUERY
from mlenv.testing.fakecluster import FakeCluster


def deployed(tmp_path, monkeypatch):
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    return state


def test_url_prints_the_route_and_how_to_sign_in(tmp_path, monkeypatch) -> None:
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


def test_gpu_info_is_one_table_for_every_pod(tmp_path, monkeypatch) -> None:
    state = deployed(tmp_path, monkeypatch)
    fake = FakeCluster.load(str(state))
    line = " ".join(GPU_QUERY)
    fake.pod_exec_responses["ml-dev-env-0"] = {
        line: {
            "rc": 0,
            "stdout": (
                "0, NVIDIA H100 80GB HBM3, 1024, 81559, 3\n1, NVIDIA H100 80GB HBM3, 0, 81559, 0\n"
            ),
        }
    }
    fake.pod_exec_responses["ml-dev-env-1"] = {
        line: {
            "rc": 9,
            "stderr": (
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver\n"
            ),
        }
    }
    fake.save(str(state))
    r = run(["gpu-info", "barcelona"], state, monkeypatch)
    assert r.exit_code == 3, r.output  # one pod could not be read: say so, not 0
    rows = r.output.splitlines()
    assert any(x.split()[:2] == ["ml-dev-env-0", "0"] and "1024/81559" in x for x in rows)
    assert any(x.startswith("ml-dev-env-1") and "couldn't communicate" in x for x in rows)
    # the same rows as one document (gpu-info printed data with no -o json|yaml)
    r = run(["gpu-info", "barcelona", "-o", "json"], state, monkeypatch)
    assert r.exit_code == 3, r.output
    import json

    gpus = json.loads(r.stdout)["gpus"]
    assert {"pod": "ml-dev-env-0", "index": "0"}.items() <= gpus[0].items(), gpus[0]
    assert any(g["pod"] == "ml-dev-env-1" and "couldn't communicate" in g["error"] for g in gpus)


def test_port_forward_debug_and_shell_command(tmp_path, monkeypatch) -> None:
    state = deployed(tmp_path, monkeypatch)
    r = run(
        ["port-forward", "barcelona", "--debug", "--pod", "1", "--port", "6006"], state, monkeypatch
    )
    assert r.exit_code == 0, r.output
    assert "127.0.0.1:5678 -> ml-dev-env-1:5678" in r.output
    r = run(["shell", "barcelona", "--", "nvidia-smi", "topo", "-m"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    calls = FakeCluster.load(str(state)).calls
    assert ["port-forward", "ml-dev-env-1", "6006:6006", "5678:5678"] in calls
    assert ["interactive", "ml-dev-env-0", "nvidia-smi", "topo", "-m"] in calls
    r = run(["port-forward", "barcelona", "--port", "x:1"], state, monkeypatch)
    assert r.exit_code == 2 and "expected PORT or LOCAL:REMOTE" in r.output


def test_url_on_a_config_without_the_tool_says_how_to_enable_it(tmp_path, monkeypatch) -> None:
    """Upstream's configs have no dev_tools: `make vscode` on one is one line saying what to
    add where, and needs no cluster (no state: not even a client is built)."""
    upstream = ROOT / "tests" / "data" / "upstream" / "barcelona.yaml"
    for tool in ("vscode", "jupyter"):
        r = run(["url", str(upstream), tool], None, monkeypatch)
        assert r.exit_code == 2, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1, lines
        assert f"add 'dev_tools: {{{tool}: true}}' to {upstream}" in lines[0]
        assert "make deploy-cluster CLUSTER=barcelona" in lines[0]


TOPO_OUT = """\
\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tPXB\t0-55\t0\t\tN/A
GPU1\tNV18\t X \tPXB\t0-55\t0\t\tN/A
NIC0\tPXB\tPXB\t X \t\t\t\t

NIC Legend:

  NIC0: mlx5_6"""
IBSTAT_OUT = """\
CA 'mlx5_6'
\tCA type: MT4129
\tNumber of ports: 1
\t\tState: Active
\t\tRate: 400"""


def test_gpu_info_shows_topology_and_ibstat_when_present(tmp_path, monkeypatch) -> None:
    """Upstream's `make gpu-info` showed `nvidia-smi topo -m` and `ibstat`; ours dropped both."""
    state = deployed(tmp_path, monkeypatch)
    fake = FakeCluster.load(str(state))
    ok = {
        " ".join(GPU_QUERY): {"rc": 0, "stdout": "0, NVIDIA H100 80GB HBM3, 0, 81559, 0\n"},
        "nvidia-smi topo -m": {"rc": 0, "stdout": TOPO_OUT + "\n"},
    }
    fake.pod_exec_responses["ml-dev-env-0"] = {
        **ok,
        "ibstat": {"rc": 0, "stdout": IBSTAT_OUT + "\n"},
    }
    fake.pod_exec_responses["ml-dev-env-1"] = ok  # no ibstat in this image: exec says 127
    fake.save(str(state))
    r = run(["gpu-info", "barcelona"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert f"== ml-dev-env-0: nvidia-smi topo -m\n{TOPO_OUT}\n" in r.output
    assert f"== ml-dev-env-0: ibstat\n{IBSTAT_OUT}\n" in r.output
    assert f"== ml-dev-env-1: nvidia-smi topo -m\n{TOPO_OUT}\n" in r.output
    assert "== ml-dev-env-1: ibstat: not in the image (no InfiniBand tools)" in r.output


def test_gpu_info_asks_each_pod_once(tmp_path, monkeypatch) -> None:
    """The query, topo -m and ibstat in one exec per pod (three were three client processes
    and API streams per pod: 3.5x kubectl's one exec per pod at 32 pods)."""
    state = deployed(tmp_path, monkeypatch)
    before = len(FakeCluster.load(str(state)).calls)
    r = run(["gpu-info", "barcelona"], state, monkeypatch)
    assert r.exit_code == 3, r.output  # the fake's pods have no nvidia-smi
    calls = FakeCluster.load(str(state)).calls[before:]
    execs = [c[1] for c in calls if c[0] == "exec"]
    assert sorted(execs) == ["ml-dev-env-0", "ml-dev-env-1"], calls
    # each pod's three commands are still three answers, each saying why
    assert r.output.count("executable file not found") == 4, r.output  # query, topo -m
    assert r.output.count("ibstat: not in the image") == 2, r.output
