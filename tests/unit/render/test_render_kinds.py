"""Per-kind rules of render_cluster, on clusters built in code."""

from __future__ import annotations

from dataclasses import replace

import pytest
from render_fixtures import by_kind, env_of, one, rdma_cluster, tcp_cluster

from mlenv.config.model import DevTools, Gpus, Rdma, Security, Storage
from mlenv.errors import InputError
from mlenv.render import names
from mlenv.render.plan import render_cluster


def _worker(manifests: list[dict]) -> dict:
    return one(manifests, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    "make,mode", [(rdma_cluster, "rdma"), (rdma_cluster, "tcp"), (tcp_cluster, "tcp")]
)
def test_every_object_carries_the_labels(make, mode):
    c = make()
    for m in render_cluster(c, mode):
        lab = m["metadata"]["labels"]
        assert lab["app.kubernetes.io/name"] == "ml-dev-env"
        assert lab["app.kubernetes.io/instance"] == c.name
        assert lab["app.kubernetes.io/part-of"] == "ml-dev-env"
        assert lab["app.kubernetes.io/managed-by"] == "mlenv"
        assert lab["app.kubernetes.io/component"]
        if m["kind"] not in ("SecurityContextConstraints", "ClusterRole"):
            assert m["metadata"]["namespace"] == c.namespace


def test_statefulset_shape():
    c = rdma_cluster()
    sts = one(render_cluster(c, "rdma", nodes=3), "StatefulSet")
    spec = sts["spec"]
    assert sts["metadata"]["name"] == names.workload(c).name
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == names.HEADLESS_SERVICE
    pod = spec["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    assert spec["template"]["metadata"]["labels"].items() >= spec["selector"]["matchLabels"].items()
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == list(c.gpu_nodes)
    assert pod["serviceAccountName"] == c.security.service_account
    w = pod["containers"][0]
    assert w["command"] == [names.POD_INIT]
    assert w["readinessProbe"]["tcpSocket"]["port"] == "ssh"
    ports = {p["name"]: p["containerPort"] for p in w["ports"]}
    assert ports == {"ssh": c.ssh_port, "master": c.master_port}


def test_default_node_count_and_no_node_affinity_without_pins():
    c = tcp_cluster()
    sts = one(render_cluster(c, "tcp"), "StatefulSet")
    assert sts["spec"]["replicas"] == c.gpus.default_nodes
    assert "nodeAffinity" not in sts["spec"]["template"]["spec"]["affinity"]


@pytest.mark.parametrize("nodes", [0, -1])
def test_bad_node_count(nodes):
    with pytest.raises(InputError, match="at least 1"):
        render_cluster(tcp_cluster(), "tcp", nodes=nodes)


def test_more_nodes_than_pinned_is_an_input_error():
    c = rdma_cluster()
    with pytest.raises(InputError, match=f"exceeds the {len(c.gpu_nodes)} pinned"):
        render_cluster(c, "rdma", nodes=len(c.gpu_nodes) + 1)


def test_gpu_and_rdma_resources():
    c = rdma_cluster()
    res = _worker(render_cluster(c, "rdma"))["resources"]
    for part in ("requests", "limits"):
        assert res[part]["nvidia.com/gpu"] == c.gpus.per_node
        for r in c.rdma.resources:
            assert res[part][r.name] == r.count
    assert res["requests"]["cpu"] == c.resources.requests.cpu
    assert res["limits"]["memory"] == c.resources.limits.memory
    assert "cpu" not in res["limits"]
    # TCP mode of the same cluster asks for no RDMA device
    tcp_res = _worker(render_cluster(c, "tcp"))["resources"]
    assert not any(r.name in tcp_res["limits"] for r in c.rdma.resources)
    assert tcp_res["limits"]["nvidia.com/gpu"] == c.gpus.per_node


def test_multus_annotation_only_in_rdma():
    c = rdma_cluster()
    ann = one(render_cluster(c, "rdma"), "StatefulSet")["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert ann["k8s.v1.cni.cncf.io/networks"] == ",".join(c.rdma.networks)
    tcp_meta = one(render_cluster(c, "tcp"), "StatefulSet")["spec"]["template"]["metadata"]
    assert "k8s.v1.cni.cncf.io/networks" not in tcp_meta.get("annotations", {})


def test_rdma_on_tcp_only_cluster_renders_tcp():
    c = tcp_cluster()
    assert render_cluster(c, "rdma") == render_cluster(c, "tcp")


def test_shm_and_ssh_volumes():
    c = rdma_cluster()
    ms = render_cluster(c, "rdma")
    pod = one(ms, "StatefulSet")["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": c.shm_size}
    assert vols["ssh"]["secret"] == {"secretName": names.SSH_SECRET, "defaultMode": 0o440}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["ssh"] == {"name": "ssh", "mountPath": names.SSH_DIR, "readOnly": True}
    assert mounts["dshm"]["mountPath"] == "/dev/shm"
    assert not any(m["kind"] == "Secret" for m in ms), (
        "the ssh Secret is created by deploy, never rendered"
    )


def test_per_pod_storage_uses_volume_claim_templates():
    c = rdma_cluster()
    ms = render_cluster(c, "rdma")
    sts = one(ms, "StatefulSet")
    vcts = {t["metadata"]["name"]: t["spec"] for t in sts["spec"]["volumeClaimTemplates"]}
    assert set(vcts) == {"workspace", "datasets"}
    assert vcts["workspace"]["accessModes"] == ["ReadWriteOnce"]
    assert vcts["workspace"]["storageClassName"] == c.storage.class_rwo
    assert vcts["datasets"]["resources"]["requests"]["storage"] == c.storage.datasets_size
    pvc_names = [p["metadata"]["name"] for p in by_kind(ms, "PersistentVolumeClaim")]
    assert names.WORKSPACE_PVC not in pvc_names and names.DATASETS_PVC not in pvc_names


def test_rwx_storage_uses_shared_pvcs():
    c = tcp_cluster()
    ms = render_cluster(c, "tcp")
    sts = one(ms, "StatefulSet")
    assert "volumeClaimTemplates" not in sts["spec"]
    pvcs = {p["metadata"]["name"]: p["spec"] for p in by_kind(ms, "PersistentVolumeClaim")}
    assert set(pvcs) == {names.WORKSPACE_PVC, names.DATASETS_PVC}
    for spec in pvcs.values():
        assert spec["accessModes"] == ["ReadWriteMany"]
        assert spec["storageClassName"] == c.storage.class_rwx
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in sts["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims == set(pvcs)


def test_default_storage_class_is_left_out():
    c = tcp_cluster(storage=Storage(mode="rwx", class_rwx=""))
    for p in by_kind(render_cluster(c, "tcp"), "PersistentVolumeClaim"):
        assert "storageClassName" not in p["spec"]


def test_headless_service():
    c = rdma_cluster()
    svc = [
        s
        for s in by_kind(render_cluster(c, "rdma"), "Service")
        if s["metadata"]["name"] == names.HEADLESS_SERVICE
    ][0]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert {p["port"] for p in svc["spec"]["ports"]} == {c.ssh_port, c.master_port}
    sts = one(render_cluster(c, "rdma"), "StatefulSet")
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]


def test_tcp_security_is_restricted_compatible():
    ms = render_cluster(rdma_cluster(), "tcp")
    sc = _worker(ms)["securityContext"]
    assert sc == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert not by_kind(ms, "SecurityContextConstraints")
    assert not by_kind(ms, "RoleBinding")


def test_rdma_security_adds_only_ipc_lock():
    c = rdma_cluster()
    ms = render_cluster(c, "rdma")
    sc = _worker(ms)["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert "privileged" not in sc
    scc = one(ms, "SecurityContextConstraints")
    assert scc["metadata"]["name"] == names.scc_name(c)
    assert scc["allowPrivilegedContainer"] is False
    assert scc["allowedCapabilities"] == ["IPC_LOCK"]
    assert scc["requiredDropCapabilities"] == ["ALL"]
    assert scc["runAsUser"]["type"] == "MustRunAsRange"
    assert scc["seLinuxContext"]["type"] == "MustRunAs"
    assert not any(
        scc[k]
        for k in (
            "allowHostNetwork",
            "allowHostPID",
            "allowHostIPC",
            "allowHostPorts",
            "allowHostDirVolumePlugin",
        )
    )
    assert "hostPath" not in scc["volumes"]
    # every volume type the pods use is allowed
    used = {
        k
        for m in by_kind(ms, "StatefulSet") + by_kind(ms, "Pod")
        for v in (m["spec"].get("template", {}).get("spec") or m["spec"])["volumes"]
        for k in v
        if k != "name"
    }
    assert used <= set(scc["volumes"])
    role = one(ms, "ClusterRole")
    assert role["rules"][0]["resourceNames"] == [scc["metadata"]["name"]]
    assert role["rules"][0]["verbs"] == ["use"]
    rb = one(ms, "RoleBinding")
    assert rb["roleRef"]["name"] == role["metadata"]["name"]
    assert rb["subjects"] == [
        {"kind": "ServiceAccount", "name": c.security.service_account, "namespace": c.namespace}
    ]


def test_no_ipc_lock_when_not_asked():
    c = rdma_cluster(security=Security(ipc_lock=False))
    ms = render_cluster(c, "rdma")
    assert "add" not in _worker(ms)["securityContext"]["capabilities"]
    # an SCC without IPC_LOCK would add nothing to restricted-v2: none is rendered
    assert not by_kind(ms, "SecurityContextConstraints") and not by_kind(ms, "RoleBinding")


def test_privileged_only_when_the_config_demands_it():
    c = rdma_cluster(security=Security(requires_privileged_scc=True))
    ms = render_cluster(c, "rdma")
    assert _worker(ms)["securityContext"] == {"privileged": True}
    assert not by_kind(ms, "SecurityContextConstraints")
    assert one(ms, "RoleBinding")["roleRef"]["name"] == "system:openshift:scc:privileged"
    unprivileged = render_cluster(rdma_cluster(), "rdma") + render_cluster(tcp_cluster(), "tcp")
    sccs = by_kind(unprivileged, "SecurityContextConstraints")
    assert sccs, "the RDMA render has an SCC whose fields this test inspects"
    for scc in sccs:
        # An SCC has no spec: its grants are top-level fields.
        assert scc["allowPrivilegedContainer"] is False
        assert scc["allowPrivilegeEscalation"] is False
        assert set(scc["allowedCapabilities"]) <= {"IPC_LOCK"}
        assert not scc.get("defaultAddCapabilities")
        assert scc["requiredDropCapabilities"] == ["ALL"]
        assert scc["runAsUser"]["type"] != "RunAsAny"
    for m in unprivileged:
        assert not _grants_privilege(m), (
            f"{m['kind']}/{m['metadata']['name']}: {_grants_privilege(m)}"
        )


def _grants_privilege(obj: object, path: str = "") -> list[str]:
    """Paths in a manifest that ask for privilege: privileged/allowPrivileged*: true, the privileged SCC."""
    found: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if "rivilege" in str(k) and v is True:
                found.append(f"{path}.{k}")
            found += _grants_privilege(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found += _grants_privilege(v, f"{path}[{i}]")
    elif isinstance(obj, str) and obj.endswith("scc:privileged"):
        found.append(path)
    return found


def test_grants_privilege_sees_the_privileged_render():
    # the helper above must recognise the grants of the config that demands them
    ms = render_cluster(rdma_cluster(security=Security(requires_privileged_scc=True)), "rdma")
    found = [p for m in ms for p in _grants_privilege(m)]
    assert any(p.endswith("securityContext.privileged") for p in found)
    assert any(p.endswith("roleRef.name") for p in found)
    assert _grants_privilege({"allowPrivilegedContainer": True}) == [".allowPrivilegedContainer"]


def test_worker_env_contract():
    c = rdma_cluster()
    env = env_of(_worker(render_cluster(c, "rdma", nodes=2)))
    assert env["MASTER_ADDR"] == f"ml-dev-env-0.ml-dev-env-headless.{c.namespace}.svc"
    assert env["MASTER_PORT"] == str(c.master_port)
    assert env["MLENV_NNODES"] == "2"
    assert env["MLENV_GPUS_PER_NODE"] == str(c.gpus.per_node)
    assert env["MLENV_NETWORK_MODE"] == "rdma"
    assert env["MLENV_RDMA_DEVICES"] == ",".join(c.rdma.devices)
    assert env["MLENV_POD_INDEX"] == {
        "fieldRef": {
            "apiVersion": "v1",
            "fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']",
        }
    }
    assert env["MLENV_NAMESPACE"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["MLENV_SSH_DIR"] == names.SSH_DIR
    assert env["NCCL_IB_DISABLE"] == "0"
    tcp_env = env_of(_worker(render_cluster(c, "tcp")))
    assert tcp_env["MLENV_NETWORK_MODE"] == "tcp"
    assert "MLENV_RDMA_DEVICES" not in tcp_env
    assert tcp_env["NCCL_IB_DISABLE"] == "1"


def test_dev_tools_routes_are_tls_and_authenticated():
    c = tcp_cluster()
    ms = render_cluster(c, "tcp")
    routes = {r["metadata"]["name"]: r for r in by_kind(ms, "Route")}
    assert set(routes) == {"ml-dev-env-vscode", "ml-dev-env-jupyter", "ml-dev-env-tensorboard"}
    services = {s["metadata"]["name"] for s in by_kind(ms, "Service")}
    for r in routes.values():
        assert r["spec"]["tls"]["insecureEdgeTerminationPolicy"] == "Redirect"
        # every tool sits behind its oauth-proxy, which serves a service-CA certificate
        assert r["spec"]["tls"]["termination"] == "reencrypt"
        assert r["spec"]["to"]["name"] in services
    pod = one(ms, "Pod")
    containers = {ct["name"]: ct for ct in pod["spec"]["containers"]}
    # behind oauth-proxy every tool listens on loopback only and declares no port
    for name, flag in (("code-server", "--bind-addr"), ("tensorboard", "--host")):
        args = containers[name]["args"]
        assert args[args.index(flag) + 1].startswith("127.0.0.1"), name
    assert "--ip=127.0.0.1" in containers["jupyter"]["args"]
    for name in ("code-server", "jupyter", "tensorboard"):
        assert "ports" not in containers[name], name
    for tool in ("vscode", "jupyter", "tensorboard"):
        proxy = containers[f"oauth-proxy-{tool}"]
        assert "--provider=openshift" in proxy["args"]
        assert "@sha256:" in proxy["image"]
    sa = one(ms, "ServiceAccount")
    for tool in ("vscode", "jupyter", "tensorboard"):
        assert (
            f"serviceaccounts.openshift.io/oauth-redirectreference.{tool}"
            in sa["metadata"]["annotations"]
        )


def test_no_dev_tools_no_routes():
    c = tcp_cluster(dev_tools=DevTools())
    ms = render_cluster(c, "tcp")
    assert not by_kind(ms, "Route")
    assert [s["metadata"]["name"] for s in by_kind(ms, "Service")] == [names.HEADLESS_SERVICE]
    assert [ct["name"] for ct in one(ms, "Pod")["spec"]["containers"]] == ["dev"]


def test_dev_pod_requests_no_gpu_and_has_a_workspace():
    for c, mode in ((rdma_cluster(), "rdma"), (tcp_cluster(), "tcp")):
        ms = render_cluster(c, mode)  # type: ignore[arg-type]
        pod = one(ms, "Pod")
        assert pod["metadata"]["name"] == names.DEV_POD
        assert "nvidia.com/gpu" not in str(pod["spec"]["containers"])
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"]["volumes"]
            if "persistentVolumeClaim" in v
        ]
        pvcs = [p["metadata"]["name"] for p in by_kind(ms, "PersistentVolumeClaim")]
        assert claims and set(claims) <= set(pvcs)


def test_image_build():
    c = rdma_cluster()
    ms = render_cluster(c, "rdma")
    bc = one(ms, "BuildConfig")
    assert bc["spec"]["strategy"]["type"] == "Docker"
    assert (
        bc["spec"]["strategy"]["dockerStrategy"]["dockerfilePath"] == c.image.build.dockerfile_path
    )
    assert bc["spec"]["source"]["git"] == {
        "uri": c.image.build.git_uri,
        "ref": c.image.build.git_ref,
    }
    assert bc["spec"]["output"]["to"] == {"kind": "ImageStreamTag", "name": "ml-dev-env:latest"}
    assert one(ms, "ImageStream")["metadata"]["name"] == "ml-dev-env"
    assert (
        _worker(ms)["image"]
        == f"image-registry.openshift-image-registry.svc:5000/{c.namespace}/ml-dev-env:latest"
    )
    ext = replace(c, image=replace(c.image, ref="quay.io/me/img:1"))
    ext_ms = render_cluster(ext, "rdma")
    assert _worker(ext_ms)["image"] == "quay.io/me/img:1"
    assert one(ext_ms, "Pod")["spec"]["containers"][0]["image"] == "quay.io/me/img:1"
    assert not by_kind(ext_ms, "BuildConfig") and not by_kind(ext_ms, "ImageStream")


def test_apply_order():
    kinds = [
        m["kind"] for m in render_cluster(rdma_cluster(dev_tools=DevTools(vscode=True)), "rdma")
    ]
    first = {k: kinds.index(k) for k in kinds}
    assert first["ServiceAccount"] < first["RoleBinding"] < first["StatefulSet"]
    assert first["SecurityContextConstraints"] < first["StatefulSet"]
    assert first["PersistentVolumeClaim"] < first["StatefulSet"] < first["Route"]
    assert first["Service"] < first["StatefulSet"]


def test_render_is_pure_and_deterministic():
    c = rdma_cluster(rdma=Rdma(enabled=True, auto_devices=True, networks=("n",)))
    assert render_cluster(c, "rdma") == render_cluster(c, "rdma")


def test_cpu_type_requests_no_gpu():
    c = tcp_cluster(gpus=Gpus(per_node=2, type="cpu", default_nodes=2))
    w = _worker(render_cluster(c, "tcp"))
    assert "nvidia.com/gpu" not in w["resources"].get("limits", {})
    assert env_of(w)["MLENV_GPUS_PER_NODE"] == "2"  # CPU ranks per pod
