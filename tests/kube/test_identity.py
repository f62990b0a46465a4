"""A pod's processes run as the pod would on a real node (mlenv/testing/kube/identity.py):
its runAsUser (else, on the OpenShift flavour, its namespace's uid-range), GID 0 unless
runAsGroup says otherwise, fsGroup and supplementalGroups as groups, the runtime's
capabilities (none effective for a non-root UID), no_new_privs; its volumes handed to the
fsGroup as a kubelet does. The product's random-UID path end to end is in
test_flows.py's launch test (an annotated namespace)."""

from __future__ import annotations

import pytest
from _kubeenv import Plane

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py

UID_RANGE = "openshift.io/sa.scc.uid-range"
SUPPLEMENTAL = "openshift.io/sa.scc.supplemental-groups"
# id, groups, the capability sets and no_new_privs, and a file written into each volume
PROBE = (
    "id -u; id -g; id -G; grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status; "
    'echo "HOME=$HOME"; '
    "for d in /claim /scratch; do touch $d/probe-$(id -u) && stat -c '%g %a' $d/probe-$(id -u) $d; done"
)
CAP_NET_BIND_SERVICE = 10
# CRI-O's default capabilities (the OpenShift flavour's runtime): chown dac_override fowner
# fsetid kill setgid setuid setpcap net_bind_service
CRIO_DEFAULT_MASK = sum(1 << b for b in (0, 1, 3, 4, 5, 6, 7, 8, 10))


def _wait_running(p: Plane, ns: str, name: str) -> None:
    import time

    deadline = time.monotonic() + 90
    phase = ""
    while time.monotonic() < deadline:
        phase = p.run("get", "pod", "-n", ns, name, "-o", "jsonpath={.status.phase}").stdout
        if phase == "Running":
            return
        time.sleep(0.5)
    raise AssertionError(f"{ns}/{name}: {phase!r}, not Running within 90 s")


def _pod(ns: str, name: str, pod_sc: dict, containers: dict[str, dict]) -> list[dict]:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{name}-claim", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    mounts = [
        {"name": "claim", "mountPath": "/claim"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "securityContext": pod_sc,
            "containers": [
                {
                    "name": c,
                    "image": "registry.access.redhat.com/ubi9/ubi-minimal:latest",
                    "command": ["sleep", "infinity"],
                    "securityContext": sc,
                    "volumeMounts": mounts,
                }
                for c, sc in containers.items()
            ],
            "volumes": [
                {"name": "claim", "persistentVolumeClaim": {"claimName": f"{name}-claim"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        },
    }
    return [claim, pod]


def _probe(p: Plane, ns: str, pod: str, container: str) -> dict[str, str]:
    res = p.run("exec", "-n", ns, pod, "-c", container, "--", "sh", "-c", PROBE)
    assert res.returncode == 0, res.stderr + res.stdout
    lines = res.stdout.splitlines()
    out = {"uid": lines[0], "gid": lines[1], "groups": lines[2]}
    for line in lines[3:7]:
        k, _, v = line.partition("=" if line.startswith("HOME=") else ":")
        out[k] = v.strip()
    out["claim"], out["claim_dir"], out["scratch"], out["scratch_dir"] = lines[7:11]
    return out


def test_exec_runs_as_run_as_user_with_its_groups_and_no_extra_capabilities(
    openshift: Plane,
) -> None:
    """runAsUser/runAsGroup/fsGroup/supplementalGroups and a container that drops ALL and
    adds NET_BIND_SERVICE: `id` shows them, CapEff is empty (a non-root UID keeps no
    capability: CRI-O sets no ambient ones) and the bounding set holds only the added
    one; the claim and the emptyDir are the fsGroup's (setgid, group-writable), so the
    UID writes both. The second container, with no securityContext, is the image's root
    with CRI-O's default capabilities in the same pod: UID 1234 is outside the namespace's
    range, so restricted-v2 refuses the pod and privileged (RunAsAny) admits it, writing
    no UID."""
    ns = openshift.namespace("ident")
    restricted = {
        "runAsUser": 1234,
        "runAsGroup": 2345,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
    }
    pod_sc = {"fsGroup": 3456, "supplementalGroups": [4567]}
    openshift.apply(*_pod(ns, "p0", pod_sc, {"main": restricted, "rootful": {}}))
    _wait_running(openshift, ns, "p0")
    scc = openshift.run(
        "get", "pod", "-n", ns, "p0", "-o", "jsonpath={.metadata.annotations.openshift\\.io/scc}"
    )
    assert scc.stdout == "privileged", scc.stdout + scc.stderr
    seen = _probe(openshift, ns, "p0", "main")
    assert (seen["uid"], seen["gid"]) == ("1234", "2345"), seen
    assert set(seen["groups"].split()) == {"2345", "3456", "4567"}, seen
    assert int(seen["CapEff"], 16) == 0, seen
    assert int(seen["CapBnd"], 16) == 1 << CAP_NET_BIND_SERVICE, seen
    assert seen["NoNewPrivs"] == "1" and seen["HOME"] == "/", seen
    # files the UID makes in the volumes belong to the fsGroup (the folders are setgid)
    assert seen["claim"].split()[0] == "3456" and seen["scratch"].split()[0] == "3456", seen
    assert seen["claim_dir"] == "3456 2775", seen
    root = _probe(openshift, ns, "p0", "rootful")
    assert (root["uid"], root["gid"]) == ("0", "0"), root
    assert int(root["CapEff"], 16) == CRIO_DEFAULT_MASK == int(root["CapBnd"], 16), root
    assert root["NoNewPrivs"] == "0" and root["HOME"] == "/root", root


def test_a_pod_in_an_annotated_namespace_runs_as_the_ranges_first_uid(openshift: Plane) -> None:
    """What restricted-v2 writes on OpenShift: a pod that names no UID runs as the first
    of the namespace's uid-range, GID 0, with the first of its supplemental-groups as the
    fsGroup; the pod's claim is that group's and writable by the UID, where without an
    fsGroup a random UID could not write it (a kubelet leaves the folder root's)."""
    ns = openshift.namespace("ident-range")
    openshift.ok(
        "annotate",
        "--overwrite",  # the plane gave the namespace a block at its creation, as OpenShift does
        "namespace",
        ns,
        f"{UID_RANGE}=1000680000/10000",
        f"{SUPPLEMENTAL}=1000690000/10000",
    )
    openshift.apply(*_pod(ns, "p0", {}, {"main": {"capabilities": {"drop": ["ALL"]}}}))
    _wait_running(openshift, ns, "p0")
    seen = _probe(openshift, ns, "p0", "main")
    assert (seen["uid"], seen["gid"]) == ("1000680000", "0"), seen
    assert set(seen["groups"].split()) == {"0", "1000690000"}, seen
    assert int(seen["CapEff"], 16) == 0 == int(seen["CapBnd"], 16), seen
    assert seen["claim"].split()[0] == "1000690000", seen
    # an explicit runAsUser still wins over the range, and no fsGroup means the claim
    # stays root's: the UID cannot write it
    ns2 = openshift.namespace("ident-nofs")
    openshift.apply(*_pod(ns2, "p1", {"runAsUser": 1000680005}, {"main": {}}))
    _wait_running(openshift, ns2, "p1")
    res = openshift.run(
        "exec", "-n", ns2, "p1", "--", "sh", "-c", "id -u; touch /claim/x 2>&1; echo rc=$?"
    )
    assert res.stdout.splitlines()[0] == "1000680005", res.stdout
    assert "Permission denied" in res.stdout and "rc=1" in res.stdout, res.stdout
