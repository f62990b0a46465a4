"""Issue 26 §5 on the real control plane: racks from a Node label. The kwok nodes the two
pods run on carry a rack label each; `mlenv launch --torchrun` reads those Nodes and
fabric.localize's racks are the label's values (as rack names). The refused `get nodes`
is the fake's (tests/cli/test_launch.py): the tier's developer may read Nodes, as
OpenShift's cluster-reader may."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _kubeenv import Plane, mlenv
from test_flows import _config, _ok, _setup

pytestmark = [pytest.mark.kube, pytest.mark.xdist_group("kube")]
LABEL = "example.com/rack"


def test_launch_reads_the_racks_from_a_node_label(openshift: Plane, tmp_path: Path) -> None:
    root, name, ns = _setup(openshift, tmp_path, "topo", user=False)
    _config(root, name, nodes__topology_label=LABEL)
    _ok(mlenv(root, openshift, "deploy", name, "--mode", "tcp"), "deploy")
    on = {p: openshift.ok("get", "pod", "-n", ns, p, "-o", "jsonpath={.spec.nodeName}").strip()
          for p in ("ml-dev-env-0", "ml-dev-env-1")}
    assert len(set(on.values())) == 2, on  # one pod per node (the StatefulSet's anti-affinity)
    values = {on["ml-dev-env-0"]: "Rack_A", on["ml-dev-env-1"]: "rack-b"}  # the first is no DNS label
    for n, v in values.items():
        openshift.ok("label", "node", n, f"{LABEL}={v}", "--overwrite")
    try:
        for i in (0, 1):  # kwok runs no container command: the entry point's work, by hand
            _ok(openshift.run("exec", "-n", ns, f"ml-dev-env-{i}", "--", "python", "-m", "mlenv.pod", "init",
                              timeout=120), f"pod init in pod {i}")
        res = mlenv(root, openshift, "launch", name, "--torchrun", "--", "--checks", "fabric.localize",
                    "--localize", timeout=600)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-4000:]
        assert f"topology: 2 of 2 node(s) in 2 rack(s) from the Node label {LABEL}" in out, out[-3000:]
        assert "label value 'Rack_A' used as rack rack-a" in res.stderr
        results = list((openshift.volume_dir(ns, "workspace-ml-dev-env-0") / "results").glob("*/results.json"))
        assert len(results) == 1, results
        doc = json.loads(results[0].read_text())
        (entry,) = [c for c in doc["checks"] if c["name"] == "fabric.localize"]
        assert entry["details"].get("racks") == {"ml-dev-env-0": "rack-a", "ml-dev-env-1": "rack-b"}, entry
        print(f"\n[measured] kube tier: pods on {on}; localize {entry['status']}, racks {entry['details']['racks']}")
    finally:
        for n in values:
            openshift.run("label", "node", n, f"{LABEL}-")
