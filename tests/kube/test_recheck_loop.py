"""The node-health loop closed on the real control plane: a rank computing wrong answers
→ its node FAILs with ``drain`` → ``quarantine --apply`` taints it → the workers can no
longer be scheduled there → ``mlenv recheck RUN`` runs the suite on that node in a Pod
pinned to it and tolerating only our taint → with the fault kept the node FAILs and
``release --after`` keeps it; with the fault gone it PASSes and ``release --after`` frees
it. A human's label and someone else's taints on the node survive it all, and a
``NoSchedule`` taint of someone else's keeps the re-check out (exit 3, said).

The fault (``MLENV_FAULT``, the suite's own test hook) is put in the StatefulSet's pod
template, under ``OnDelete`` so the running workers keep theirs: the re-check Pod is built
from the live template (what the workers run), so it carries what is there at its start.
The pods' init is their container command (pod-init.sh), run by the tier's kubelet; Ready
is its readiness probe (sshd answers).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from _kubeenv import Plane, checkout, mlenv

from mlenv.contract import ANNOTATION_QUARANTINE, LABEL_HEALTH

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py
PODS = ("ml-dev-env-0", "ml-dev-env-1")
HUMAN_LABEL = "example.com/owner"
SOFT_TAINT = "example.com/maintenance"  # PreferNoSchedule: someone else's, and no barrier
HARD_TAINT = "example.com/drain"  # NoSchedule: someone else's, which keeps the re-check out
FAULT = "MLENV_FAULT"


def _ok(res: subprocess.CompletedProcess[str], what: str) -> str:
    assert res.returncode == 0, (
        f"{what}: exit {res.returncode}\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    )
    return res.stdout


def _fault(p: Plane, ns: str, value: str | None) -> None:
    """The fault in the workers' pod template (None: none)."""
    arg = f"{FAULT}-" if value is None else f"{FAULT}={value}"
    p.ok("set", "env", "-n", ns, "statefulset/ml-dev-env", arg)


def _node(p: Plane, name: str) -> tuple[dict[str, str], set[str]]:
    """(labels, taints as key=value:effect) of a Node."""
    n = p.json("get", "node", name)
    taints = {
        f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in n["spec"].get("taints") or []
    }
    return n["metadata"].get("labels") or {}, taints


def _recheck_run(out: str, node: str) -> str:
    m = re.search(
        rf"re-check of node {re.escape(node)} \(quarantined by run \S+\): run (\S+) in pod", out
    )
    assert m, out[-3000:]
    return m.group(1)


def _no_recheck_pods(p: Plane, ns: str) -> bool:
    items = p.json("get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=recheck-node")
    return not items["items"]


def test_a_corrupting_node_is_quarantined_rechecked_where_it_stands_and_freed_only_on_a_pass(
    plain: Plane, tmp_path: Path
) -> None:
    p = plain
    t0 = time.monotonic()
    ns = p.namespace("loop", user_role=None)
    name = f"loop-{ns.rsplit('-', 1)[1]}"
    root = checkout(tmp_path, name, "local", ns, "tcp", p.flavor)
    hist = str(tmp_path / "history")
    _ok(mlenv(root, p, "deploy", name, "--mode", "tcp"), "deploy")
    p.ok(
        "patch", "statefulset", "-n", ns, "ml-dev-env", "--type=merge",
        "-p", json.dumps({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}}),
    )  # fmt: skip
    # pod 1's ranks (node rank 1): their quorum product is off by one
    _fault(p, ns, "corrupt:node=1,check=compute.quorum")
    p.ok("delete", "pod", "-n", ns, *PODS, "--wait=true")
    for pod in PODS:
        deadline = time.monotonic() + 120
        while p.run("get", "pod", "-n", ns, pod).returncode != 0:
            assert time.monotonic() < deadline, f"{pod} not recreated"
            time.sleep(0.5)
        p.ok("wait", "-n", ns, "--for=condition=Ready", f"pod/{pod}", "--timeout=120s")
    on = {
        pod: p.ok("get", "pod", "-n", ns, pod, "-o", "jsonpath={.spec.nodeName}").strip()
        for pod in PODS
    }
    bad, good = on[PODS[1]], on[PODS[0]]
    assert bad != good, on
    p.ok("label", "node", bad, f"{HUMAN_LABEL}=team-a", "--overwrite")
    p.ok("taint", "node", bad, f"{SOFT_TAINT}=planned:PreferNoSchedule")
    try:
        # 1. the run: the corrupting rank's node FAILs with drain, the other passes
        res = mlenv(
            root, p, "launch", name, "--torchrun", "--", "--checks", "compute.quorum", timeout=600
        )
        assert res.returncode == 1, (res.stdout + res.stderr)[-4000:]
        _ok(mlenv(root, p, "history", name, "--fetch", "--history-dir", hist), "history --fetch")
        [run1] = [d for d in (Path(hist) / name).iterdir() if (d / "results.json").is_file()]
        doc = json.loads((run1 / "results.json").read_text())
        verdicts = {n["node"]: n for n in doc["node_verdicts"]["nodes"]}
        assert verdicts[bad]["status"] == "FAIL" and verdicts[good]["status"] == "PASS", verdicts
        assert any(f.get("action") == "drain" for f in verdicts[bad]["findings"]), verdicts[bad]

        # 2. quarantine: wrong answers need this run alone
        out = _ok(
            mlenv(root, p, "quarantine", run1.name, "--apply", "--history-dir", hist),
            "quarantine --apply",
        )
        assert f"quarantined {bad}" in out, out
        labels, taints = _node(p, bad)
        assert labels[LABEL_HEALTH] == "fail" and f"{LABEL_HEALTH}=fail:NoSchedule" in taints

        # the workers never tolerate it: pod 1, deleted, is not scheduled back there
        p.ok("delete", "pod", "-n", ns, PODS[1], "--wait=true")
        time.sleep(3)
        assert p.ok("get", "pod", "-n", ns, PODS[1], "-o", "jsonpath={.spec.nodeName}").strip() in (
            "",
            good,
        )

        # 3. someone else's NoSchedule taint keeps the re-check out: said, exit 3, nothing left
        p.ok("taint", "node", bad, f"{HARD_TAINT}=ops:NoSchedule")
        res = mlenv(root, p, "recheck", run1.name, "--wait", "15", "--history-dir", hist)
        assert res.returncode == 3, res.stdout + res.stderr
        assert f"node {bad} not re-checked" in res.stderr and "untolerated taint" in res.stderr, (
            res.stderr
        )
        assert _no_recheck_pods(p, ns)
        p.ok("taint", "node", bad, f"{HARD_TAINT}=ops:NoSchedule-")

        # 4. the fault kept: the re-check on that node FAILs, release --after keeps it
        _fault(p, ns, "corrupt:node=0,check=compute.quorum")  # the re-check's world: node 0
        res = mlenv(
            root, p, "recheck", run1.name, "--history-dir", hist, "--", "--checks", "compute.quorum",
            timeout=600,
        )  # fmt: skip
        out = res.stdout + res.stderr
        assert res.returncode == 1, out[-4000:]
        kept_run = _recheck_run(out, bad)
        assert f"node {bad}: FAIL in re-check run {kept_run}; it stays quarantined" in out, out
        assert _no_recheck_pods(p, ns)
        res = mlenv(root, p, "release", run1.name, "--after", kept_run, "--history-dir", hist)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"kept: {bad}: run {kept_run} did not pass it (FAIL)" in res.stderr, res.stderr
        assert f"{LABEL_HEALTH}=fail:NoSchedule" in _node(p, bad)[1]

        # 5. the fault gone: it PASSes where it stands, and release --after frees it
        _fault(p, ns, None)
        res = mlenv(
            root, p, "recheck", run1.name, "--history-dir", hist, "--", "--checks", "compute.quorum",
            timeout=600,
        )  # fmt: skip
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-4000:]
        passed_run = _recheck_run(out, bad)
        assert f"mlenv release {run1.name} --after {passed_run}" in out, out
        rec = json.loads((Path(hist) / name / passed_run / "record.json").read_text())
        assert rec["cluster"] == name  # a later run of the same cluster: release's evidence
        rdoc = json.loads((Path(hist) / name / passed_run / "results.json").read_text())
        assert [n["node"] for n in rdoc["node_verdicts"]["nodes"]] == [bad]
        _ok(
            mlenv(root, p, "release", run1.name, "--after", passed_run, "--history-dir", hist),
            "release --after",
        )
        labels, taints = _node(p, bad)
        assert LABEL_HEALTH not in labels and not any(t.startswith(LABEL_HEALTH) for t in taints)
        assert ANNOTATION_QUARANTINE not in (
            p.json("get", "node", bad)["metadata"].get("annotations") or {}
        )
        # what others put there stays
        assert labels[HUMAN_LABEL] == "team-a"
        assert f"{SOFT_TAINT}=planned:PreferNoSchedule" in taints
        print(
            f"\n[measured] kube tier: the quarantine loop on {bad}: {time.monotonic() - t0:.0f} s"
        )
    finally:
        p.run("taint", "node", bad, f"{LABEL_HEALTH}=fail:NoSchedule-")
        p.run("taint", "node", bad, f"{HARD_TAINT}=ops:NoSchedule-")
        p.run("taint", "node", bad, f"{SOFT_TAINT}=planned:PreferNoSchedule-")
        p.run("label", "node", bad, f"{LABEL_HEALTH}-", f"{HUMAN_LABEL}-")
        p.run("annotate", "node", bad, f"{ANNOTATION_QUARANTINE}-")
        p.run("delete", "namespace", ns, "--wait=false")
