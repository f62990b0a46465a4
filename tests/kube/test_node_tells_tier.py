"""What ``mlenv quarantine`` / ``mlenv release`` tell a Node, on the real control plane:
the Event about the Node (``kubectl describe node`` shows it) and the ``MlenvAcceptance``
condition in the Node's status, on the FAILED node only, set back on release; a user who
may mark nodes but not patch ``nodes/status`` is refused in one line before anything is
written. Run as processes, with the plane's kubeconfig and the tier's kubectl on PATH."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from _kubeenv import Plane, checkout, mlenv

from mlenv.contract import LABEL_HEALTH
from mlenv.testing.kube import pki

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py
RUN1 = "20261125-090000-aaaaaa"
MARKER_ROLE = "mlenv-test-node-marker"


def _ok(res: subprocess.CompletedProcess[str], what: str) -> str:
    assert res.returncode == 0, (
        f"{what}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    )
    return res.stdout


def _report(tmp: Path, cluster: str, bad: str, good: str) -> Path:
    """A finished run on ``cluster``: ``bad`` FAILED compute.matmul, ``good`` passed."""

    def verdict(node: str, pod: str, status: str) -> dict:
        findings = (
            [{"status": "FAIL", "check": "compute.matmul", "figure": "tflops_fp32 = 0.2"}]
            if status == "FAIL"
            else []
        )
        return {
            "node": node,
            "hosts": [pod],
            "node_from": "kubernetes",
            "status": status,
            "findings": findings,
        }

    d = tmp / "run1"
    d.mkdir()
    doc = {
        "schema_version": 1,
        "run_id": RUN1,
        "started": "2026-11-25T09:00:00+00:00",
        "verdict": "FAIL",
        "node_verdicts": {
            "nodes": [verdict(bad, "ml-dev-env-0", "FAIL"), verdict(good, "ml-dev-env-1", "PASS")]
        },
        "checks": [],
    }
    (d / "results.json").write_text(json.dumps(doc))
    (d / "record.json").write_text(json.dumps({"run_id": RUN1, "cluster": cluster}))
    return d


def _mlenv_events(p: Plane, node: str) -> list[dict]:
    items = p.json(
        "get",
        "events",
        "-n",
        "default",
        f"--field-selector=involvedObject.kind=Node,involvedObject.name={node}",
    )["items"]
    return [e for e in items if str(e.get("reason", "")).startswith("MlenvAcceptance")]


def _condition(p: Plane, node: str) -> dict | None:
    conds = p.json("get", "node", node).get("status", {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "MlenvAcceptance"), None)


def _grant_marking_but_not_status(p: Plane) -> None:
    """The non-admin user may label, annotate and taint nodes and write Events, but not
    patch ``nodes/status``: a node operator's role without the status subresource."""
    p.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": MARKER_ROLE},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": MARKER_ROLE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": MARKER_ROLE,
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": pki.USER_NAME}
            ],
        },
    )


def test_events_and_the_condition_land_on_the_failed_node_and_go_on_release(
    openshift: Plane, tmp_path: Path
) -> None:
    p = openshift
    ns = p.namespace("tells", user_role=None)
    name = f"tells-{uuid.uuid4().hex[:6]}"
    root = checkout(tmp_path / "co", name, "local", ns, "tcp", p.flavor)
    nodes = sorted(n["metadata"]["name"] for n in p.json("get", "nodes")["items"])
    bad, good = nodes[0], nodes[1]
    rep = _report(tmp_path, name, bad, good)
    hist = str(tmp_path / "history")
    try:
        # a user who may mark nodes but not patch their status: refused before anything
        _grant_marking_but_not_status(p)
        res = mlenv(
            root, p, "quarantine", str(rep), "--confirm", "1/1", "--apply", "--condition", "--history-dir", hist,
            user=True,
        )  # fmt: skip
        assert res.returncode == 3, res.stdout + res.stderr
        # one error line (the client's "oc not found: using kubectl" notice aside)
        err = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("notice:")]
        assert len(err) == 1 and "may not patch nodes/status" in err[0], res.stderr
        assert "patch nodes (" not in err[0] and "create events" not in err[0]  # those it may
        node = p.json("get", "node", bad)
        assert LABEL_HEALTH not in node["metadata"].get("labels", {})
        assert _condition(p, bad) is None and _mlenv_events(p, bad) == []
        assert not (rep / "quarantine.json").exists()

        # the admin: label, taint, Event and condition on the failed node, nothing on the other
        _ok(
            mlenv(
                root,
                p,
                "quarantine",
                str(rep),
                "--confirm",
                "1/1",
                "--apply",
                "--condition",
                "--history-dir",
                hist,
            ),
            "quarantine --apply --condition",
        )
        [ev] = _mlenv_events(p, bad)
        assert (ev["type"], ev["reason"]) == ("Warning", "MlenvAcceptanceFailed")
        assert ev["message"].startswith(f"mlenv run {RUN1}: quarantined (")
        assert "compute.matmul" in ev["message"]
        described = p.ok("describe", "node", bad)
        assert "MlenvAcceptanceFailed" in described, described[-2000:]
        c = _condition(p, bad)
        assert c is not None and (c["status"], c["reason"]) == ("False", "MlenvAcceptanceFailed")
        assert c["message"].startswith(f"mlenv run {RUN1}:")
        ready = [
            x for x in p.json("get", "node", bad)["status"]["conditions"] if x["type"] == "Ready"
        ]
        assert ready and ready[0]["status"] == "True"  # the node's own conditions stay
        assert _mlenv_events(p, good) == [] and _condition(p, good) is None

        # release puts the condition back to True, with an Event of its own
        _ok(
            mlenv(root, p, "release", str(rep), "--force", "--history-dir", hist),
            "release --force",
        )
        c = _condition(p, bad)
        assert c is not None and (c["status"], c["reason"]) == ("True", "MlenvAcceptanceReleased")
        assert sorted(e["reason"] for e in _mlenv_events(p, bad)) == [
            "MlenvAcceptanceFailed",
            "MlenvAcceptanceReleased",
        ]
        node = p.json("get", "node", bad)
        assert LABEL_HEALTH not in node["metadata"].get("labels", {})
        assert not any(t.get("key") == LABEL_HEALTH for t in node["spec"].get("taints") or [])
    finally:
        p.run("delete", "clusterrolebinding,clusterrole", MARKER_ROLE, "--ignore-not-found")
        p.run("taint", "node", bad, f"{LABEL_HEALTH}=fail:NoSchedule-")
        p.run("label", "node", bad, f"{LABEL_HEALTH}-")
