"""The scale benchmark's smoke row: ``benchmarks/bench_scale.py``'s every verb beside its
kubectl floor at 32 pods, on this worker's plane with 32 scale nodes added for the test
(tainted, so no other test's pod lands on them, and removed after it). The seconds are
printed, not judged (a loaded plane's timings say nothing here); what is judged is what
does not depend on the load: every verb ran, the fan-outs held their bound, and the
kubectl processes each verb starts are a constant or one per pod, never more."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from _kubeenv import ROOT, Plane

from mlenv.testing.kube import manifests

PODS = 32
BOUND = 16


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_scale", ROOT / "benchmarks" / "bench_scale.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_verb_at_32_pods_beside_its_floor_holds_its_bound(
    plain: Plane, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("MLENV_FANOUT", str(BOUND))
    nodes = []
    for i in range(PODS):
        node = manifests.scale_node(i)
        node["spec"]["taints"] = [{"key": manifests.SCALE_NODE_LABEL, "effect": "NoSchedule"}]
        nodes.append(node)
    plain.apply(*nodes)
    try:
        module = _bench()
        bench = module.Bench(
            PODS, plain.tier, tmp_path, BOUND, manifests.SCALE_NODE_LABEL, platform="kubernetes"
        )
        bench.checkout(files=50)
        bench.run()
        # pinned by the pool label (the pods ran only where deploy put it), and teardown
        # took it off every node
        pool = bench.pool()
        still = plain.ok("get", "nodes", "-l", pool, "-o", "name").split()
    finally:
        plain.run(
            "delete", "node", *(n["metadata"]["name"] for n in nodes), "--wait=false", timeout=120
        )
    rows = {r["verb"]: r for r in bench.rows}
    print("\n" + "\n".join(json.dumps(r) for r in bench.rows))
    assert not bench.failed, [r for r in bench.rows if "error" in r]
    assert set(rows) == set(module.VERBS)
    for row in rows.values():
        assert row["peak_concurrent"] <= BOUND, row
        if row["floor_seconds"] is not None:
            assert row["floor_processes"] >= 1 and row["seconds"] > 0, row
    # one exec per pod, plus the server probe (two) and the workload and its pods (two
    # lists at once)
    assert rows["sync"]["processes"] <= PODS + 4, rows["sync"]
    assert rows["exec"]["processes"] <= PODS + 4, rows["exec"]
    assert rows["sync"]["peak_concurrent"] >= 2, rows["sync"]  # the pool ran them at once
    # a constant, whatever the pod count
    assert rows["status"]["processes"] <= 5, rows["status"]  # the probe, three lists
    # (the pool label: one read of the nodes by it and one label call, past the 11 of
    # the workload's objects)
    assert rows["teardown"]["processes"] <= 13, rows["teardown"]
    assert bench.pin_by == "label" and still == [], still
    # the probe, the rights, one read of the nodes, three calls choosing them by hostname,
    # one read back (a selector says nothing of a node it passed over), the Events
    assert rows["quarantine"]["processes"] <= 10 and rows["release"]["processes"] <= 10
    assert rows["quarantine-dry-run"]["processes"] == 0
