"""deploy and teardown on a plane where deletes take a grace period and admission
refuses: the verbs as a user runs them, against the real apiserver's Pod Security,
ResourceQuota and LimitRange admission and its garbage collector."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from _kubeenv import Plane, checkout, mlenv

from mlenv.testing.kube.podroots import GRACE_CAP_ANNOTATION

pytestmark = [pytest.mark.kube]


def _ok(res, what: str) -> str:
    assert res.returncode == 0, (
        f"{what}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    )
    return res.stdout


def _setup(p: Plane, tmp_path: Path, prefix: str, role: str | None = "admin"):
    ns = p.namespace(prefix, user_role=role)
    name = f"{prefix}-{ns.rsplit('-', 1)[1]}"
    return checkout(tmp_path, name, "local", ns, "tcp", p.flavor), name, ns


def _edit(root: Path, name: str, change) -> None:
    f = root / "clusters" / f"{name}.yaml"
    data = yaml.safe_load(f.read_text())
    change(data)
    f.write_text(yaml.safe_dump(data, sort_keys=False))


def _ours(p: Plane, ns: str, kinds: str) -> list[str]:
    return p.ok("get", kinds, "-n", ns, "-o", "name").split()


def test_deploy_teardown_deploy_ten_times_converges_through_grace_periods(
    plain: Plane, tmp_path: Path
) -> None:
    root, name, ns = _setup(plain, tmp_path, "loop")
    # deletes here take 8 s (the plane's default cap is 3 s): longer than a teardown's
    # tail and the next deploy's checks, so every deploy meets the last teardown's objects
    plain.ok("annotate", "namespace", ns, f"{GRACE_CAP_ANNOTATION}=8")
    waited = 0
    for i in range(10):
        out = _ok(mlenv(root, plain, "deploy", name, "--mode", "tcp", "--timeout", "120"), "deploy")
        assert f"deployed {name}: 2/2 pods Ready" in out, out
        assert "statefulset/ml-dev-env unchanged" not in out, out
        waited += "Terminating" in out
        _ok(mlenv(root, plain, "teardown", name), f"teardown {i}")
        if i == 0:
            # the tier keeps a deleted pod for its grace period, and the StatefulSet with
            # it (foreground delete), as a kubelet and the garbage collector do
            sts = plain.json("get", "statefulset", "-n", ns, "ml-dev-env")
            assert "deletionTimestamp" in sts["metadata"]
    assert waited >= 5  # the deploys met the previous teardown's Terminating objects
    out = _ok(mlenv(root, plain, "deploy", name, "--mode", "tcp", "--timeout", "120"), "deploy")
    time.sleep(10)  # past every grace period: nothing of the deployment may vanish now
    sts = plain.json("get", "statefulset", "-n", ns, "ml-dev-env")
    assert "deletionTimestamp" not in sts["metadata"]
    pods = plain.json("get", "pods", "-n", ns)["items"]
    ready = [
        p["metadata"]["name"]
        for p in pods
        if "deletionTimestamp" not in p["metadata"]
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p.get("status", {}).get("conditions", [])
        )
    ]
    assert sorted(ready) == ["ml-dev-env-0", "ml-dev-env-1", "ml-dev-env-dev"], ready


def test_a_limitrange_refusal_is_reported_within_15_s_not_at_the_timeout(
    plain: Plane, tmp_path: Path
) -> None:
    root, name, ns = _setup(plain, tmp_path, "limit", role=None)
    _edit(root, name, lambda d: d["resources"]["limits"].update(memory="8Gi"))
    plain.apply(
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "max", "namespace": ns},
            "spec": {"limits": [{"type": "Container", "max": {"memory": "4Gi"}}]},
        }
    )
    t0 = time.monotonic()
    res = mlenv(root, plain, "deploy", name, "--mode", "tcp", "--timeout", "600")
    took = time.monotonic() - t0
    said = res.stdout + res.stderr
    assert res.returncode == 3, said
    assert "a LimitRange refused pods of statefulset/ml-dev-env" in said, said
    assert "maximum memory usage per Container is 4Gi" in said, said
    assert "0/2 pods created" in said, said
    assert took < 60, f"said after {took:.0f} s"


def test_a_full_quota_is_refused_by_preflight_with_nothing_applied(
    plain: Plane, tmp_path: Path
) -> None:
    root, name, ns = _setup(plain, tmp_path, "quota", role=None)
    plain.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "small", "namespace": ns},
            "spec": {"hard": {"pods": "2", "limits.memory": "64Gi"}},
        }
    )
    deadline = time.monotonic() + 30  # the quota controller fills in status.used
    while not plain.json("get", "resourcequota", "-n", ns, "small").get("status", {}).get("used"):
        assert time.monotonic() < deadline, "the quota's status was never filled in"
        time.sleep(0.5)
    res = mlenv(root, plain, "deploy", name, "--mode", "tcp")
    said = res.stdout + res.stderr
    assert res.returncode == 3, said
    assert "ResourceQuota small: the pods need 3 pods, 2 of 2 is free" in said, said
    assert _ours(plain, ns, "statefulsets,pods,secrets,services") == []


def test_an_openshift_config_on_a_plain_server_is_one_line_exit_2(
    plain: Plane, tmp_path: Path
) -> None:
    root, name, ns = _setup(plain, tmp_path, "notocp", role=None)
    _edit(root, name, lambda d: d.update(platform="openshift"))
    res = mlenv(root, plain, "deploy", name, "--mode", "tcp")
    said = res.stdout + res.stderr
    assert res.returncode == 2, said
    assert "this server is not OpenShift (no route/security.openshift.io APIs)" in said, said
    assert "doesn't have a resource type" not in said, said
    assert _ours(plain, ns, "statefulsets,pods,secrets,serviceaccounts") == [
        "serviceaccount/default"
    ]


def test_a_namespace_edit_user_tears_down_what_it_deployed(plain: Plane, tmp_path: Path) -> None:
    root, name, ns = _setup(plain, tmp_path, "edit", role="edit")
    _ok(mlenv(root, plain, "deploy", name, "--mode", "tcp", user=True), "deploy as edit")
    res = mlenv(root, plain, "teardown", name, user=True)
    _ok(res, "teardown as edit")
    assert "rolebinding" not in (res.stdout + res.stderr).lower()
    left = [
        o
        for o in json.loads(
            plain.ok("get", "all,secrets,serviceaccounts,networkpolicies", "-n", ns, "-o", "json")
        )["items"]
        if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == name
        and "deletionTimestamp" not in o["metadata"]
    ]
    assert left == [], [f"{o['kind']}/{o['metadata']['name']}" for o in left]
