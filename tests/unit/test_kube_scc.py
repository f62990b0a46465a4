"""The kube tier's SCC admission decision (mlenv/testing/kube/scc.py), pure: which SCC
admits a pod, how it mutates it, and OpenShift's words when none does. The webhook that
runs it against a real API server is proven in tests/kube/test_scc.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from mlenv.testing.kube import scc

ROOT = Path(__file__).resolve().parents[2]
NS = {scc.UID_RANGE: "1000680000/10000", scc.SUPPLEMENTAL_GROUPS: "1000680000/10000"}


def _shipped() -> list[dict]:
    return [o for o in scc.default_sccs() if o["kind"] == "SecurityContextConstraints"]


def _by_name(name: str) -> dict:
    return next(s for s in _shipped() if s["metadata"]["name"] == name)


def _pod(**container_sc) -> dict:
    c: dict = {"name": "main", "image": "x"}
    if container_sc:
        c["securityContext"] = container_sc
    return {"metadata": {"name": "p"}, "spec": {"containers": [c]}}


def _rdma_worker() -> dict:
    """The product's RDMA worker pod (IPC_LOCK) as rendered for barcelona."""
    sts = next(
        d
        for d in yaml.safe_load_all((ROOT / "k8s/barcelona/rdma/statefulset.yaml").read_text())
        if d
    )
    tmpl = sts["spec"]["template"]
    return {"metadata": {"name": "ml-dev-env-0", **tmpl["metadata"]}, "spec": tmpl["spec"]}


def _product_scc() -> dict:
    path = ROOT / "k8s/barcelona/rdma/securitycontextconstraints.yaml"
    return next(d for d in yaml.safe_load_all(path.read_text()) if d)


def test_restricted_v2_admits_a_plain_pod_and_gives_it_the_namespaces_uid() -> None:
    d = scc.admit(_pod(), _shipped(), NS, lambda s: s["metadata"]["name"] == "restricted-v2")
    assert d.scc == "restricted-v2" and d.pod is not None
    assert d.pod["metadata"]["annotations"] == {scc.SCC_ANNOTATION: "restricted-v2"}
    sc = d.pod["spec"]["containers"][0]["securityContext"]
    assert sc["runAsUser"] == 1000680000
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False
    psc = d.pod["spec"]["securityContext"]
    assert psc["fsGroup"] == 1000680000
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_an_ipc_lock_pod_under_restricted_v2_only_is_refused_in_openshifts_words() -> None:
    d = scc.admit(
        _rdma_worker(), _shipped(), NS, lambda s: s["metadata"]["name"] == "restricted-v2"
    )
    assert not d.admitted
    assert scc.refusal("ml-dev-env-0", d) == (
        'pods "ml-dev-env-0" is forbidden: unable to validate against any security context '
        "constraint: [provider restricted-v2: .containers[0].capabilities.add: Invalid value: "
        '"IPC_LOCK": capability may not be added, provider "privileged": Forbidden: not '
        "usable by user or serviceaccount]"
    )


def test_the_products_rdma_scc_admits_its_worker_when_the_service_account_may_use_it() -> None:
    product = _product_scc()
    d = scc.admit(
        _rdma_worker(),
        [*_shipped(), product],
        NS,
        lambda s: s["metadata"]["name"] != "privileged",
    )
    assert d.scc == product["metadata"]["name"] and d.pod is not None
    sc = d.pod["spec"]["containers"][0]["securityContext"]
    assert sc["capabilities"] == {"add": ["IPC_LOCK"], "drop": ["ALL"]}
    assert sc["runAsUser"] == 1000680000
    # the same SCC, not usable: refused
    assert not scc.admit(
        _rdma_worker(), [*_shipped(), product], NS, lambda s: s["metadata"]["name"] == "x"
    ).admitted


def test_each_host_access_uid_and_volume_is_checked() -> None:
    only_restricted = [_by_name("restricted-v2")]

    def why(pod: dict) -> str:
        d = scc.admit(pod, only_restricted, NS, lambda s: True)
        assert not d.admitted, pod
        return " ".join(d.reasons)

    assert "Privileged containers are not allowed" in why(_pod(privileged=True))
    assert "must be in the ranges: [1000680000, 1000689999]" in why(_pod(runAsUser=0))
    assert "Allowing privilege escalation" in why(_pod(allowPrivilegeEscalation=True))
    host = _pod()
    host["spec"]["hostNetwork"] = True
    assert "Host network is not allowed to be used" in why(host)
    vol = _pod()
    vol["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/"}}]
    assert "hostPath volumes are not allowed to be used" in why(vol)
    port = _pod()
    port["spec"]["containers"][0]["ports"] = [{"containerPort": 22, "hostPort": 22}]
    assert "Host ports are not allowed to be used" in why(port)
    unconfined = _pod()
    unconfined["spec"]["securityContext"] = {"seccompProfile": {"type": "Unconfined"}}
    assert "unconfined is not an allowed seccomp profile" in why(unconfined)
    # a UID inside the namespace's range is kept as asked
    ok = scc.admit(_pod(runAsUser=1000680005), only_restricted, NS, lambda s: True)
    assert ok.pod is not None
    assert ok.pod["spec"]["containers"][0]["securityContext"]["runAsUser"] == 1000680005


def test_a_namespace_without_a_uid_range_is_refused_by_must_run_as_range() -> None:
    d = scc.admit(_pod(), [_by_name("restricted-v2")], {}, lambda s: True)
    assert d.reasons == [
        "provider restricted-v2: unable to find annotation "
        "openshift.io/sa.scc.supplemental-groups, unable to find annotation "
        "openshift.io/sa.scc.uid-range"
    ]


def test_the_most_restrictive_usable_scc_wins_then_priority_overrides() -> None:
    d = scc.admit(_pod(), _shipped(), NS, lambda s: True)
    assert d.scc == "restricted-v2"  # privileged would admit it too, but is tried later
    priv = {**_by_name("privileged"), "priority": 10}
    d = scc.admit(_pod(), [_by_name("restricted-v2"), priv], NS, lambda s: True)
    assert d.scc == "privileged"
    assert "runAsUser" not in d.pod["spec"]["containers"][0].get("securityContext", {})  # type: ignore[index]


def test_required_scc_annotation_limits_the_choice() -> None:
    pod = _pod()
    pod["metadata"]["annotations"] = {scc.REQUIRED_SCC_ANNOTATION: "privileged"}
    assert scc.admit(pod, _shipped(), NS, lambda s: True).scc == "privileged"
    pod["metadata"]["annotations"] = {scc.REQUIRED_SCC_ANNOTATION: "nope"}
    assert scc.admit(pod, _shipped(), NS, lambda s: True).reasons == [
        'required scc "nope" not found'
    ]


def test_uid_blocks_are_handed_out_once_each() -> None:
    assert scc.next_block([]) == 1_000_000_000
    assert scc.next_block(["1000000000/10000", "", "junk"]) == 1_000_010_000
    assert scc.next_block(["1000000000/10000", "1000020000/10000"]) == 1_000_010_000
    assert scc.parse_range("1000680000/10000") == (1000680000, 1000689999)
    assert scc.parse_range("5-9") == (5, 9)
    assert scc.parse_range("x/1") is None


def test_the_patch_replaces_annotations_and_spec_only() -> None:
    pod = _pod()
    d = scc.admit(pod, _shipped(), NS, lambda s: True)
    assert d.pod is not None
    ops = scc.json_patch(pod, d.pod)
    assert [(o["op"], o["path"]) for o in ops] == [
        ("add", "/metadata/annotations"),
        ("replace", "/spec"),
    ]
