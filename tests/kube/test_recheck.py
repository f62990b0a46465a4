"""Re-checks on a schedule on the real control plane: the CronJob and its
identity as deploy applies them, RBAC as the API server answers it, the CronJob's own
command run for real with its ServiceAccount's token, and `mlenv history --fetch`.

The tier's pods cannot reach the API server (nothing routes beyond the plane's bridge, and
Services get no ClusterIP routing), so the CronJob's pod could not run its command here: the
test takes the command from the live CronJob and runs it on this machine with the tier's kubectl
and a kubeconfig holding a token minted for the ServiceAccount, which is what the pod
would do with its mounted token. The exec lands in pod-0's confined root, where the pod
launcher runs the suite for real.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from _kubeenv import Plane, checkout, mlenv

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py
PULLABLE = "registry.access.redhat.com/ubi9/ubi-minimal:latest"
SA = "ml-dev-env-recheck"
# A time no test run reaches (Sundays 03:00): the real cronjob controller must not start a
# Job of its own meanwhile (kwok would "run" its pod and never end it).
SCHEDULE = "0 3 * * 0"
CHECKS = "environment"  # quick on two CPU ranks


def _ok(res: subprocess.CompletedProcess[str], what: str) -> str:
    assert res.returncode == 0, (
        f"{what}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    )
    return res.stdout


def _token_kubeconfig(p: Plane, ns: str, path: Path) -> Path:
    """A kubeconfig for the plane's server and CA with a token of the re-check's
    ServiceAccount: what its pod's mounted token gives the client there."""
    token = p.ok("create", "token", SA, "-n", ns, "--duration=10m").strip()
    view = json.loads(p.ok("config", "view", "--raw", "--minify", "-o", "json"))
    cluster = dict(view["clusters"][0]["cluster"])
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "sa",
                "clusters": [{"name": "plane", "cluster": cluster}],
                "users": [{"name": "sa", "user": {"token": token}}],
                "contexts": [
                    {"name": "sa", "context": {"cluster": "plane", "user": "sa", "namespace": ns}}
                ],
            }
        )
    )
    path.chmod(0o600)
    return path


def _can(p: Plane, ns: str, *args: str) -> str:
    res = p.run("auth", "can-i", *args, "-n", ns, f"--as=system:serviceaccount:{ns}:{SA}")
    return res.stdout.strip()


@pytest.mark.parametrize(
    ("flavor", "user"),
    [("openshift", False), ("plain", True)],
    ids=["openshift-admin", "plain-user"],
)
def test_the_scheduled_recheck_runs_through_pod_0_and_history_fetch_brings_it_home(
    flavor: str, user: bool, tmp_path: Path, request
) -> None:
    """As the namespace's admin on the plain flavour, the user without `bind` (RBAC's
    escalation rule: the RoleBinding is allowed because the user holds exec on pod-0;
    on a first deploy the Role does not exist yet, so the binding is not dry-run)."""
    p: Plane = request.getfixturevalue(flavor)
    t0 = time.monotonic()  # the plane is up: what follows is this test's own time
    marks: list[tuple[str, float]] = []

    def mark(what: str) -> None:
        marks.append((what, time.monotonic() - t0))

    ns = p.namespace("recheck", user_role="admin" if user else None)
    name = f"recheck-{ns.rsplit('-', 1)[1]}"
    root = checkout(tmp_path, name, "local", ns, "tcp", flavor)
    cfg = root / "clusters" / f"{name}.yaml"
    data = yaml.safe_load(cfg.read_text())
    data["gpus"]["default_nodes"] = 1  # one pod: the launcher's run needs no peer sshd
    data["acceptance"] = {"schedule": SCHEDULE, "profile": "quick"}
    if flavor == "openshift":
        data.setdefault("image", {})["ref"] = PULLABLE
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    if user:
        # why deploy leaves this binding out of its server-side dry run: RBAC's escalation
        # check reads the Role, and a user without `bind` is refused a binding to a Role
        # that does not exist yet, even in a dry run
        from mlenv.config import load
        from mlenv.render.recheck import role_binding

        rb = role_binding(load(name, root))
        res = p.run(
            "apply", "--dry-run=server", "--server-side", "-f", "-", user=True, stdin=json.dumps(rb)
        )
        assert res.returncode != 0 and "not found" in res.stderr, res.stderr
    out = _ok(mlenv(root, p, "deploy", name, "--mode", "tcp", user=user), "deploy")
    mark("deploy")
    if user:
        assert f"rolebinding/{SA}: not in the server-side dry run" in out, out[-3000:]
    assert f"cronjob.batch/{SA}" in out or f"cronjob/{SA} created" in out, out[-2000:]

    # the CronJob as the server holds it: Forbid, and a pod that asks for no GPU
    cj = p.json("get", "cronjob", SA, "-n", ns)
    assert cj["spec"]["concurrencyPolicy"] == "Forbid" and cj["spec"]["schedule"] == SCHEDULE
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert "nvidia.com/gpu" not in json.dumps(ctr["resources"]) and pod["serviceAccountName"] == SA

    # RBAC as the API server answers it for the ServiceAccount
    assert _can(p, ns, "create", "pods/ml-dev-env-0", "--subresource=exec") == "yes"
    assert _can(p, ns, "create", "pods/ml-dev-env-1", "--subresource=exec") == "no"
    assert _can(p, ns, "create", "pods/someone-else", "--subresource=exec") == "no"
    assert _can(p, ns, "create", "pods") == "no" and _can(p, ns, "get", "secrets") == "no"
    # nothing cluster-scoped of this deployment
    sel = f"app.kubernetes.io/instance={name}"
    assert (
        p.ok(
            "get", "clusterroles,clusterrolebindings,priorityclasses", "-l", sel, "-o", "name"
        ).strip()
        == ""
    )

    # the pod's entry point (pod-init.sh: hostfile, env files, sshd for the preflight) is its
    # container command, which the tier's kubelet ran: deploy waited for its readiness probe
    mark("rbac checks")
    kubeconfig = _token_kubeconfig(p, ns, tmp_path / "sa.kubeconfig")
    argv = [p.kubectl, f"--kubeconfig={kubeconfig}", *ctr["command"][1:], "--", "--checks", CHECKS]
    t_run = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    run_s = time.monotonic() - t_run
    mark("the CronJob's command")
    said = res.stdout + res.stderr
    assert res.returncode == 0 and "PASS" in said, said[-4000:]
    results = sorted(
        (p.volume_dir(ns, "workspace-ml-dev-env-0") / "results").glob("*/results.json")
    )
    assert len(results) == 1, results
    rid = results[0].parent.name
    record = json.loads((results[0].parent / "record.json").read_text())
    assert record["cluster"] == name and record["run_id"] == rid and record["profile"] == "quick"

    fetched = _ok(mlenv(root, p, "history", name, "--fetch", user=user), "history --fetch")
    assert f"fetched run {rid}: PASS" in fetched, fetched
    again = mlenv(root, p, "history", name, "--fetch", "-o", "json", user=user)
    _ok(again, "second fetch")
    assert "nothing new" in again.stderr and [r["run_id"] for r in json.loads(again.stdout)] == [
        rid
    ]
    assert (root / "reports" / name / rid / "results.json").is_file()
    mark("two fetches")

    _ok(mlenv(root, p, "teardown", name, user=user), "teardown")
    for kind in ("cronjob", "role", "rolebinding", "serviceaccount"):
        # gone, or Terminating while its Jobs' pods have their grace period (foreground)
        left = p.run("get", kind, SA, "-n", ns, "-o", "json")
        assert left.returncode != 0 or "deletionTimestamp" in json.loads(left.stdout)["metadata"]
    mark("teardown")
    print(
        f"\nrecheck tier test ({flavor}): the CronJob's command ran {run_s:.1f} s; at "
        + ", ".join(f"{w} {t:.1f} s" for w, t in marks)
    )
