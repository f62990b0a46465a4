"""OcCluster's openshift-client contexts: one per thread, reused, and nothing of one call
leaks into the next (i22: a fresh Context per call walked the Python stack three times
per kubectl process, 15.7 s of a 55 s deploy on the kube tier)."""

from __future__ import annotations

import json
import math
import sys
import threading
from pathlib import Path

import pytest

from mlenv.cluster.oc import OcCluster

KUBECTL = r'''
import json, os, sys
with open(os.environ["ARGV_LOG"], "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
print(json.dumps({"kind": "ConfigMap", "metadata": {"name": "x", "resourceVersion": "1"}}))
'''


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[OcCluster, Path]:
    exe = tmp_path / "kubectl"
    exe.write_text(f"#!{sys.executable}\n{KUBECTL}")
    exe.chmod(0o755)
    log = tmp_path / "argv.log"
    monkeypatch.setenv("ARGV_LOG", str(log))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return OcCluster(str(exe)), log


def test_one_context_per_thread_reused_with_fresh_fields(client) -> None:
    c, _ = client
    first = c._context("ns-a", 5.0)
    again = c._context(None, math.inf)
    assert first is again
    assert again.project_name is None and again.timeout_datetime is None
    other: list[object] = []
    t = threading.Thread(target=lambda: other.append(c._context("ns-b", 5.0)))
    t.start()
    t.join()
    assert other[0] is not first


def test_a_namespace_never_leaks_into_the_next_call(client) -> None:
    c, log = client
    c.get("ConfigMap", "x", "ns-a")
    c.get("Node", "n1", None)  # cluster-scoped: no namespace
    c.get("ConfigMap", "x", "ns-b")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 3
    assert calls[0][:2] == ["get", "--namespace=ns-a"]
    assert not any(a.startswith("--namespace") for a in calls[1])
    assert calls[2][:2] == ["get", "--namespace=ns-b"] and "--namespace=ns-a" not in calls[2]
