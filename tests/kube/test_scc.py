"""SCC admission on the OpenShift flavour (mlenv/testing/kube/scc.py): a pod is admitted
only through an SCC that its creator or its service account may use, mutated and
annotated as OpenShift does; the product's RDMA pods pass through the SCC it renders, and
a deploy whose pods no SCC admits is told so within seconds, exit 3."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from _kubeenv import Plane, checkout, mlenv, networks_for

from mlenv.testing.kube import pki, scc

pytestmark = [pytest.mark.kube]
PULLABLE = "registry.access.redhat.com/ubi9/ubi-minimal:latest"


def _pod(ns: str, name: str, **container_sc) -> dict:
    c: dict = {"name": "main", "image": PULLABLE, "command": ["sleep", "infinity"]}
    if container_sc:
        c["securityContext"] = container_sc
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [c]},
    }


def _create(p: Plane, obj: dict, user: bool):
    return p.run("create", "-f", "-", user=user, stdin=json.dumps(obj))


def _rdma_checkout(
    p: Plane, tmp_path: Path, prefix: str, role: str | None
) -> tuple[Path, str, str]:
    ns = p.namespace(prefix, user_role=role)
    name = f"{prefix}-{ns.rsplit('-', 1)[1]}"
    root = checkout(tmp_path, name, "barcelona", ns, "rdma", p.flavor)
    f = root / "clusters" / f"{name}.yaml"
    data = yaml.safe_load(f.read_text())
    data.setdefault("image", {})["ref"] = PULLABLE  # no build on the tier
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    networks_for(p, root, name)
    return root, name, ns


def test_a_pod_is_admitted_only_through_an_scc_it_may_use_and_is_annotated(
    openshift: Plane,
) -> None:
    ns = openshift.namespace("scc", user_role="admin")
    # every new namespace gets a UID block of its own, as OpenShift's namespace controller
    # gives it
    ann = openshift.json("get", "namespace", ns)["metadata"]["annotations"]
    first, last = scc.parse_range(ann[scc.UID_RANGE]) or (0, 0)
    assert first >= scc.UID_BASE and last - first + 1 == scc.UID_BLOCK, ann

    # the namespace admin (no SCC but restricted-v2, through system:authenticated)
    res = _create(openshift, _pod(ns, "plain"), user=True)
    assert res.returncode == 0, res.stderr
    pod = openshift.json("get", "pod", "-n", ns, "plain")
    assert pod["metadata"]["annotations"][scc.SCC_ANNOTATION] == "restricted-v2"
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["runAsUser"] == first and sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["securityContext"]["fsGroup"] == first

    for name, ask, said in (
        (
            "ipclock",
            {"capabilities": {"add": ["IPC_LOCK"]}},
            '"IPC_LOCK": capability may not be added',
        ),
        ("priv", {"privileged": True}, "Privileged containers are not allowed"),
        ("root", {"runAsUser": 0}, f"must be in the ranges: [{first}, {last}]"),
    ):
        res = _create(openshift, _pod(ns, name, **ask), user=True)
        assert res.returncode != 0, f"{name} was admitted"
        assert "unable to validate against any security context constraint" in res.stderr
        assert said in res.stderr, res.stderr
        assert 'provider "privileged": Forbidden: not usable by user or serviceaccount' in (
            res.stderr
        )
    # a cluster admin may use every SCC: its privileged pod goes through the one SCC that
    # allows it (another test's SCC allowing IPC_LOCK may be there, and would be chosen
    # for an IPC_LOCK pod, being more restrictive: OpenShift's order)
    res = _create(openshift, _pod(ns, "admins", privileged=True), user=False)
    assert res.returncode == 0, res.stderr
    got = openshift.json("get", "pod", "-n", ns, "admins")["metadata"]["annotations"]
    assert got[scc.SCC_ANNOTATION] == "privileged"
    openshift.run("delete", "namespace", ns, "--wait=false")


def test_the_products_rdma_deploy_passes_through_its_own_scc(
    openshift: Plane, tmp_path: Path
) -> None:
    root, name, ns = _rdma_checkout(openshift, tmp_path, "rdmascc", role=None)
    # Pod Security's warn level at baseline: the real apiserver warns of IPC_LOCK in the
    # StatefulSet's pod template in the server-side dry run and refuses nothing; deploy says it
    openshift.ok("label", "namespace", ns, "pod-security.kubernetes.io/warn=baseline")
    res = mlenv(root, openshift, "deploy", name, "--mode", "rdma", "--timeout", "180")
    said = res.stdout + res.stderr
    warned = [ln for ln in said.splitlines() if "server warning (dry run): " in ln]
    assert len(warned) == 1 and 'would violate PodSecurity "baseline:latest"' in warned[0], said
    assert "IPC_LOCK" in warned[0], warned
    if res.returncode != 0:
        # admitted and started, pod init (the container) refuses the locked-memory limit
        # a container gets here: this machine's (8 MiB in the sandbox, which may not raise
        # it: no CAP_SYS_RESOURCE), not a RDMA node's unlimited one; deploy says so within
        # seconds, with the pod's own words
        assert res.returncode == 3, said
        assert "its container keeps exiting (CrashLoopBackOff, exit 3" in said, said
        assert "locked-memory limit (ulimit -l)" in said, said
    from mlenv.config import load
    from mlenv.render import names

    want = names.scc_name(load(name, root))
    uid = scc.parse_range(
        openshift.json("get", "namespace", ns)["metadata"]["annotations"][scc.UID_RANGE]
    )
    assert uid is not None
    for pod in ("ml-dev-env-0", "ml-dev-env-1"):
        got = openshift.json("get", "pod", "-n", ns, pod)
        assert got["metadata"]["annotations"][scc.SCC_ANNOTATION] == want, got["metadata"]
        sc = got["spec"]["containers"][0]["securityContext"]
        assert "IPC_LOCK" in sc["capabilities"]["add"] and sc["runAsUser"] == uid[0], sc
    res = mlenv(root, openshift, "teardown", name, "--purge")
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_deploy_whose_pods_no_scc_admits_is_exit_3_within_15_s_naming_the_scc(
    openshift: Plane, tmp_path: Path
) -> None:
    """A namespace admin whose cluster admin let it bind the RDMA SCC's role but has not
    applied the SCC yet (preflight cannot read SCCs as this user, and says it leaves them
    to an admin): the worker pods, with IPC_LOCK, meet restricted-v2 alone."""
    root, name, ns = _rdma_checkout(openshift, tmp_path, "sccno", role="admin")
    from mlenv.config import load
    from mlenv.render import names

    role = names.scc_role_name(load(name, root))
    openshift.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"bind-{ns}"},
            "rules": [
                {
                    "apiGroups": ["rbac.authorization.k8s.io"],
                    "resources": ["clusterroles"],
                    "resourceNames": [role],
                    "verbs": ["bind"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "may-bind-scc-role", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"bind-{ns}",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": pki.USER_NAME}
            ],
        },
    )
    res = mlenv(
        root,
        openshift,
        "deploy",
        name,
        "--mode",
        "rdma",
        "--no-fallback",
        "--timeout",
        "600",
        user=True,
    )
    ended = datetime.now(timezone.utc)
    said = res.stdout + res.stderr
    assert res.returncode == 3, said
    assert "SCC admission refused pods of statefulset/ml-dev-env" in said, said
    assert '"IPC_LOCK": capability may not be added' in said, said
    assert "the service account ml-dev-sa may use no" in said, said
    assert "--mode tcp" in said, said  # what to change
    events = openshift.json("get", "events", "-n", ns, "--field-selector", "reason=FailedCreate")
    first = min(
        datetime.fromisoformat(
            (e.get("firstTimestamp") or e.get("eventTime")).replace("Z", "+00:00")
        )
        for e in events["items"]
    )
    took = (ended - first).total_seconds()
    assert took < 15, f"said {took:.1f} s after the first refusal"
    openshift.run("delete", "namespace", ns, "--wait=false")
    openshift.run("delete", "clusterrole", f"bind-{ns}")
