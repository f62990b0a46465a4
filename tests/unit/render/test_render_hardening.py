"""Network exposure, dev-tool auth, token/secret mounts, scheduling defaults."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from render_fixtures import by_kind, env_of, one, rdma_cluster, tcp_cluster

from mlenv.config import load, load_all
from mlenv.config.model import Cluster, DevTools, Gpus, Image, Scheduling, Security, Toleration
from mlenv.errors import ConfigError, InputError
from mlenv.render import names
from mlenv.render.plan import KIND_ORDER, render_cluster
from mlenv.render.serialize import render_files
from mlenv.render.workload import DEV_TOOLS, GPU_NODE_SELECTOR, GPU_TOLERATION, pull_policy

REPO = Path(__file__).resolve().parents[3]


def _containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    spec = manifest["spec"]
    pod = spec["template"]["spec"] if manifest["kind"] == "StatefulSet" else spec
    return list(pod["containers"])


def _pod_spec(ms: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    m = one(ms, kind)
    return dict(m["spec"]["template"]["spec"] if kind == "StatefulSet" else m["spec"])


def _all_variants() -> list[tuple[Cluster, str]]:
    """Every example cluster in both modes and both dev-tool auth modes, every tool on."""
    out = []
    for c in load_all(REPO):
        for auth in ("oauth-proxy", "token"):
            for tools in (
                c.dev_tools,
                DevTools(vscode=True, jupyter=True, tensorboard=True, auth=auth),
            ):
                out += [
                    (replace(c, dev_tools=replace(tools, auth=auth)), mode)
                    for mode in ("rdma", "tcp")
                ]
    return out


# --- NetworkPolicy --------------------------------------------------------------------------


def test_network_policy_admits_only_this_instances_pods_and_the_router() -> None:
    c = tcp_cluster()
    ms = render_cluster(c, "tcp")
    pols = {p["metadata"]["name"]: p["spec"] for p in by_kind(ms, "NetworkPolicy")}
    assert set(pols) == {"ml-dev-env-instance", "ml-dev-env-devtools"}
    instance = {"app.kubernetes.io/name": "ml-dev-env", "app.kubernetes.io/instance": c.name}
    inst = pols["ml-dev-env-instance"]
    assert inst["podSelector"] == {"matchLabels": instance}
    assert inst["policyTypes"] == ["Ingress"]
    # every port (sshd, rendezvous, NCCL's ephemeral ones) but only from this instance's pods
    assert inst["ingress"] == [{"from": [{"podSelector": {"matchLabels": instance}}]}]
    dev = pols["ml-dev-env-devtools"]
    assert dev["podSelector"]["matchLabels"] == {**instance, "app.kubernetes.io/component": "dev"}
    [rule] = dev["ingress"]
    assert {p["port"] for p in rule["ports"]} == {
        DEV_TOOLS[t][2] for t in ("vscode", "jupyter", "tensorboard")
    }
    assert {
        "namespaceSelector": {"matchLabels": {"network.openshift.io/policy-group": "ingress"}}
    } in rule["from"]
    assert all(set(peer) == {"namespaceSelector"} for peer in rule["from"])  # never "any pod"
    # the selector covers every pod of the deployment and no other instance's
    for kind in ("StatefulSet", "Pod"):
        m = one(ms, kind)
        labels = (m["spec"]["template"]["metadata"] if kind == "StatefulSet" else m["metadata"])[
            "labels"
        ]
        assert labels.items() >= instance.items()
    other = render_cluster(replace(c, cluster=replace(c.cluster, name="other")), "tcp")
    other_labels = one(other, "Pod")["metadata"]["labels"]
    assert not other_labels.items() >= instance.items()


_EXAMPLES = [
    *load_all(REPO),
    *(load(f) for f in sorted((REPO / "tests/data/upstream").glob("*.yaml"))),
]


@pytest.mark.parametrize("mode", ["rdma", "tcp"])
@pytest.mark.parametrize("cluster", _EXAMPLES, ids=lambda c: c.name)
def test_every_example_cluster_renders_its_network_policy(cluster: Cluster, mode: str) -> None:
    """clusters/*.yaml and upstream's configs, both modes: every pod the render creates is
    guarded by the instance policy, whose only peers are this instance's pods."""
    ms = render_cluster(cluster, mode)  # type: ignore[arg-type]
    pols = {p["metadata"]["name"]: p for p in by_kind(ms, "NetworkPolicy")}
    inst = pols["ml-dev-env-instance"]
    assert inst["metadata"]["namespace"] == cluster.namespace
    selector = inst["spec"]["podSelector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "ml-dev-env",
        "app.kubernetes.io/instance": cluster.name,
    }
    assert inst["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": selector}}]}]
    for m in ms:
        if m["kind"] in ("StatefulSet", "Pod"):
            labels = (
                m["spec"]["template"]["metadata"] if m["kind"] == "StatefulSet" else m["metadata"]
            )["labels"]
            assert labels.items() >= selector.items(), m["kind"]
    # the dev-tool policy exists exactly when a dev tool is exposed, and admits only its ports
    dev = pols.get("ml-dev-env-devtools")
    services = {s["metadata"]["name"] for s in by_kind(ms, "Service")} - {names.HEADLESS_SERVICE}
    assert (dev is not None) == bool(services)
    if dev is not None:
        [rule] = dev["spec"]["ingress"]
        assert rule["ports"] and all(set(peer) == {"namespaceSelector"} for peer in rule["from"])
        svc_ports = {
            p["targetPort"] if isinstance(p.get("targetPort"), int) else p["port"]
            for s in by_kind(ms, "Service")
            if s["metadata"]["name"] in services
            for p in s["spec"]["ports"]
        }
        assert {p["port"] for p in rule["ports"]} == svc_ports


def test_network_policy_applies_before_the_pods_and_is_in_the_kustomization() -> None:
    ms = render_cluster(rdma_cluster(), "rdma")
    kinds = [m["kind"] for m in ms]
    assert kinds.index("NetworkPolicy") < kinds.index("StatefulSet") < kinds.index("Pod")
    assert KIND_ORDER.index("NetworkPolicy") < KIND_ORDER.index("StatefulSet")
    files = render_files(ms, "# head\n")
    assert "networkpolicy.yaml" in files
    assert "- networkpolicy.yaml" in files["kustomization.yaml"]
    # no dev tools: only the instance policy
    assert [p["metadata"]["name"] for p in by_kind(ms, "NetworkPolicy")] == ["ml-dev-env-instance"]


def test_network_policy_widened_by_config() -> None:
    c = tcp_cluster(security=Security(allow_from_namespaces=("ingress-nginx",)))
    dev = next(
        p
        for p in by_kind(render_cluster(c, "tcp"), "NetworkPolicy")
        if p["metadata"]["name"] == "ml-dev-env-devtools"
    )
    assert {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}
    } in dev["spec"]["ingress"][0]["from"]
    assert not by_kind(
        render_cluster(tcp_cluster(security=Security(network_policy=False)), "tcp"), "NetworkPolicy"
    )


def test_network_policy_keys_validated(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text(
        "cluster: {name: x, namespace: y}\nsecurity:\n  network_policy: false\n"
        "  allow_from_namespaces: [ingress-nginx]\n"
    )
    c = load(f)
    assert c.security.network_policy is False and c.security.allow_from_namespaces == (
        "ingress-nginx",
    )
    f.write_text(
        "cluster: {name: x, namespace: y}\nsecurity:\n  allow_from_namespaces: ['--all']\n"
    )
    with pytest.raises(ConfigError, match="allow_from_namespaces"):
        load(f)


# --- dev-tool auth -------------------------------------------------------------------------


# flags that would carry a credential's value on a command line
_SECRET_FLAGS = re.compile(r"(token|password|secret|passwd|key)=(?!$)\S", re.I)
_ALLOWED = {
    "--cookie-secret-file=/etc/oauth/cookie/cookie_secret",
    "--tls-key=/etc/tls/private/tls.key",
}


@pytest.mark.parametrize(
    ("cluster", "mode"),
    _all_variants(),
    ids=lambda v: (
        v
        if isinstance(v, str)
        else f"{v.name}-{v.dev_tools.auth}-"
        f"{'all' if v.dev_tools.tensorboard and v.dev_tools.vscode else 'cfg'}"
    ),
)
def test_no_secret_value_in_any_container_argv(cluster: Cluster, mode: str) -> None:
    """argv is world-readable (/proc/PID/cmdline, `ps`): a secret may reach a process only
    through its environment or a file. Secrets are created by deploy, never rendered, so
    the one way a value could land in argv is the kubelet's $(VAR) expansion of an env var
    taken from a Secret, or a literal credential flag."""
    for m in render_cluster(cluster, mode):  # type: ignore[arg-type]
        if m["kind"] not in ("StatefulSet", "Pod"):
            continue
        for ct in _containers(m):
            argv = [*ct.get("command", []), *ct.get("args", [])]
            from_secret = {
                e["name"] for e in ct.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})
            }
            for arg in argv:
                assert "$(" not in arg, (ct["name"], arg)  # no kubelet expansion at all
                assert not any(v in arg for v in from_secret), (ct["name"], arg)
                if arg not in _ALLOWED:
                    assert not _SECRET_FLAGS.search(arg), (ct["name"], arg)


def test_oauth_proxy_in_front_of_every_tool() -> None:
    ms = render_cluster(tcp_cluster(), "tcp")
    containers = {ct["name"]: ct for ct in one(ms, "Pod")["spec"]["containers"]}
    sars = {}
    for tool in ("vscode", "jupyter", "tensorboard"):
        proxy = containers[f"oauth-proxy-{tool}"]
        upstream = DEV_TOOLS[tool][3]
        assert f"--upstream=http://127.0.0.1:{upstream}" in proxy["args"]
        sars[tool] = next(a for a in proxy["args"] if a.startswith("--openshift-sar="))
    # code-server and Jupyter are a shell in the pod: exec rights; TensorBoard: view rights
    assert (
        '"resource": "pods/exec"' in sars["vscode"] and '"resource": "pods/exec"' in sars["jupyter"]
    )
    assert "exec" not in sars["tensorboard"]
    assert (
        containers["code-server"]["args"][containers["code-server"]["args"].index("--auth") + 1]
        == "none"
    )
    assert "env" not in containers["code-server"] and "env" not in containers["jupyter"]
    for svc in by_kind(ms, "Service"):
        if svc["metadata"]["name"] != names.HEADLESS_SERVICE:
            assert (
                "service.beta.openshift.io/serving-cert-secret-name"
                in svc["metadata"]["annotations"]
            )


def test_token_mode_takes_credentials_from_the_environment() -> None:
    c = tcp_cluster(dev_tools=DevTools(vscode=True, jupyter=True, tensorboard=True, auth="token"))
    ms = render_cluster(c, "tcp")
    containers = {ct["name"]: ct for ct in one(ms, "Pod")["spec"]["containers"]}
    assert not [n for n in containers if n.startswith("oauth-proxy")]
    cs, jp = containers["code-server"], containers["jupyter"]
    assert cs["args"][cs["args"].index("--auth") + 1] == "password"
    assert env_of(cs)["PASSWORD"]["secretKeyRef"] == {
        "name": names.DEVTOOLS_SECRET,
        "key": "code-server-password",
    }
    assert env_of(jp)["JUPYTER_TOKEN"]["secretKeyRef"] == {
        "name": names.DEVTOOLS_SECRET,
        "key": "jupyter-token",
    }
    assert not [a for a in jp["args"] if "token" in a.lower()]
    # TensorBoard has no auth: no Service, no Route, loopback only
    assert {r["metadata"]["name"] for r in by_kind(ms, "Route")} == {
        "ml-dev-env-vscode",
        "ml-dev-env-jupyter",
    }
    assert all(r["spec"]["tls"]["termination"] == "edge" for r in by_kind(ms, "Route"))
    tb = containers["tensorboard"]
    assert tb["args"][tb["args"].index("--host") + 1] == "127.0.0.1"
    assert "oauth-sa-token" not in str(one(ms, "Pod")["spec"]["volumes"])


def test_auth_key_validated(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("cluster: {name: x, namespace: y}\ndev_tools: {jupyter: true, auth: none}\n")
    with pytest.raises(ConfigError, match="auth"):
        load(f)


# --- service-account token and Secret modes -------------------------------------------


@pytest.mark.parametrize(("cluster", "mode"), [(rdma_cluster(), "rdma"), (tcp_cluster(), "tcp")])
def test_no_automounted_token_and_secret_modes_readable_by_a_random_uid(
    cluster: Cluster, mode: str
) -> None:
    ms = render_cluster(cluster, mode)  # type: ignore[arg-type]
    for kind in ("StatefulSet", "Pod"):
        pod = _pod_spec(ms, kind)
        assert pod["automountServiceAccountToken"] is False, kind
        # the 0440 modes rely on the pod's GID being 0 (image user, OpenShift random UID)
        # or the fsGroup: a runAsGroup would break that
        assert "runAsGroup" not in pod["securityContext"]
        for v in pod["volumes"]:
            if "secret" in v:
                assert v["secret"]["defaultMode"] == 0o440, v[
                    "name"
                ]  # not 0400: root-only without fsGroup
                assert not v["secret"]["defaultMode"] & 0o007, v["name"]  # never world-readable
    # the token only in the oauth-proxy containers
    pod = _pod_spec(ms, "Pod")
    for ct in pod["containers"]:
        has_token = any(vm["name"] == "oauth-sa-token" for vm in ct.get("volumeMounts", []))
        assert has_token == ct["name"].startswith("oauth-proxy-"), ct["name"]
    assert "oauth-sa-token" not in str(_pod_spec(ms, "StatefulSet"))


def test_rdma_scc_allows_the_projected_token_volume() -> None:
    from mlenv.render.plan import SCC_VOLUMES

    assert "projected" in SCC_VOLUMES and "secret" in SCC_VOLUMES


def test_rdma_scc_allows_what_restricted_v2_allows() -> None:
    """The SR-IOV injector adds a downwardAPI volume; restricted-v2 allows configMap, csi,
    downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected and secret. Fails on
    the code before (4 types)."""
    from mlenv.render.plan import SCC_VOLUMES

    assert sorted(SCC_VOLUMES) == [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ]
    scc = next(
        m
        for m in render_cluster(rdma_cluster(), "rdma")
        if m["kind"] == "SecurityContextConstraints"
    )
    assert "downwardAPI" in scc["volumes"]


# ---.6 scheduling defaults ----------------------------------------------------------------


def test_gpu_pods_tolerate_the_gpu_taint_and_select_gpu_nodes() -> None:
    free = _pod_spec(render_cluster(tcp_cluster(), "tcp"), "StatefulSet")  # no pinned nodes
    assert free["tolerations"] == [GPU_TOLERATION]
    assert free["nodeSelector"] == GPU_NODE_SELECTOR == {"nvidia.com/gpu.present": "true"}
    pinned = _pod_spec(render_cluster(rdma_cluster(), "rdma"), "StatefulSet")  # gpu_nodes pinned
    assert pinned["tolerations"] == [GPU_TOLERATION]
    assert "nodeSelector" not in pinned  # the pins decide; a missing label must not strand them
    cpu = _pod_spec(
        render_cluster(tcp_cluster(gpus=Gpus(per_node=2, type="cpu")), "tcp"), "StatefulSet"
    )
    assert "tolerations" not in cpu and "nodeSelector" not in cpu
    dev = _pod_spec(render_cluster(tcp_cluster(), "tcp"), "Pod")  # requests no GPU
    assert "tolerations" not in dev and "nodeSelector" not in dev


def test_scheduling_overrides() -> None:
    off = tcp_cluster(scheduling=Scheduling(tolerations=(), node_selector=()))
    spec = _pod_spec(render_cluster(off, "tcp"), "StatefulSet")
    assert "tolerations" not in spec and "nodeSelector" not in spec
    custom = tcp_cluster(
        scheduling=Scheduling(
            tolerations=(
                Toleration(
                    key="dedicated",
                    operator="Equal",
                    value="ml",
                    effect="NoExecute",
                    toleration_seconds=60,
                ),
            ),
            node_selector=(("node-role.kubernetes.io/gpu", ""),),
        )
    )
    spec = _pod_spec(render_cluster(custom, "tcp"), "StatefulSet")
    assert spec["tolerations"] == [
        {
            "key": "dedicated",
            "operator": "Equal",
            "value": "ml",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        }
    ]
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/gpu": ""}
    bad = tcp_cluster(
        scheduling=Scheduling(tolerations=(Toleration(key="k", operator="Exists", value="v"),))
    )
    with pytest.raises(InputError, match="Exists takes no value"):
        render_cluster(bad, "tcp")


def test_scheduling_keys_validated(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text(
        "cluster: {name: x, namespace: y}\nscheduling:\n  tolerations:\n"
        "    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n"
        "  node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n"
    )
    c = load(f)
    assert c.scheduling.tolerations == (
        Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
    )
    assert c.scheduling.node_selector == (("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),)
    for bad in (
        "  node_selector: {'bad key!': x}\n",
        "  node_selector: {a: true}\n",
        "  tolerations: [{key: k, operator: Maybe}]\n",
        "  tolerations: [{key: k, colour: red}]\n",
        "  node_selector: {a: 'has space'}\n",
        "  tolerations: [{key: k, operator: Exists, value: v}]\n",  # the API server refuses it
        "  tolerations: [{key: k, effect: Sometimes}]\n",
    ):
        f.write_text("cluster: {name: x, namespace: y}\nscheduling:\n" + bad)
        with pytest.raises(ConfigError, match="scheduling"):
            load(f)


def test_liveness_probe_cannot_kill_a_busy_pod() -> None:
    w = _pod_spec(render_cluster(rdma_cluster(), "rdma"), "StatefulSet")["containers"][0]
    for probe in ("livenessProbe", "startupProbe"):
        p = w[probe]
        # a TCP connect is answered by the kernel, however busy the pod's processes are
        assert set(p) - {
            "periodSeconds",
            "timeoutSeconds",
            "failureThreshold",
            "initialDelaySeconds",
        } == {"tcpSocket"}, probe
        assert p["tcpSocket"] == {"port": "ssh"}
    live = w["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 300  # minutes, not seconds
    assert w["startupProbe"]["periodSeconds"] * w["startupProbe"]["failureThreshold"] >= 600


@pytest.mark.parametrize(
    ("ref", "explicit", "want"),
    [
        ("", "", "Always"),  # the ImageStream's :latest
        ("quay.io/team/ml", "", "Always"),
        ("quay.io/team/ml:latest", "", "Always"),
        ("registry.local:5000/team/ml", "", "Always"),  # a port is not a tag
        ("registry.local:5000/team/ml:2024.11", "", "IfNotPresent"),
        ("quay.io/team/ml@sha256:" + "a" * 64, "", "IfNotPresent"),
        ("quay.io/team/ml:latest@sha256:" + "a" * 64, "", "IfNotPresent"),
        ("quay.io/team/ml:latest", "IfNotPresent", "IfNotPresent"),  # the config wins
        ("quay.io/team/ml:1.0", "Always", "Always"),
    ],
)
def test_pull_policy_always_for_mutable_tags(ref: str, explicit: str, want: str) -> None:
    c = tcp_cluster(image=Image(ref=ref, pull_policy=explicit))
    ms = render_cluster(c, "tcp")
    image = names.default_image(c)
    assert pull_policy(c, image) == want
    for kind in ("StatefulSet", "Pod"):
        for ct in _containers(one(ms, kind)):
            if ct["image"] == image:
                assert ct["imagePullPolicy"] == want, (kind, ct["name"])


def test_pull_policy_default_through_the_loader(tmp_path: Path) -> None:
    """The loader leaves image.pull_policy unset unless the config names one, so the
    derived default applies to configs and an explicit value still wins."""
    f = tmp_path / "x.yaml"
    for image, want in (
        ("{ref: 'quay.io/a/b:latest'}", "Always"),
        ("{ref: 'quay.io/a/b'}", "Always"),
        ("{ref: 'quay.io/a/b:1.2'}", "IfNotPresent"),
        ("{ref: 'quay.io/a/b:latest', pull_policy: IfNotPresent}", "IfNotPresent"),
        ("{}", "Always"),
    ):  # the ImageStream's :latest
        f.write_text(f"cluster: {{name: x, namespace: y}}\nimage: {image}\n")
        c = load(f)
        worker = _pod_spec(render_cluster(c, "tcp"), "StatefulSet")["containers"][0]
        assert worker["imagePullPolicy"] == want, image


# ---.4 upstream env names ---------------------------------------------------------------


def test_statefulset_exports_upstream_env_names() -> None:
    c = rdma_cluster()
    env = env_of(
        one(render_cluster(c, "rdma", nodes=3), "StatefulSet")["spec"]["template"]["spec"][
            "containers"
        ][0]
    )
    assert env["POD_IP"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}
    # upstream's scripts read these two too
    assert env["POD_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {
        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}
    }
    assert env["GPUS_PER_NODE"] == env["LOCAL_WORLD_SIZE"] == str(c.gpus.per_node)
    assert env["WORLD_SIZE"] == str(3 * c.gpus.per_node)
    assert "NODE_RANK" not in env  # per pod, computed by the pod init from the pod index


def test_workers_carry_upstreams_app_label_outside_every_selector() -> None:
    """`oc get pods -l app=ml-dev-env-multi` (upstream's habit) lists the workers again."""
    sts = one(render_cluster(rdma_cluster(), "rdma", nodes=2), "StatefulSet")
    assert sts["spec"]["template"]["metadata"]["labels"]["app"] == "ml-dev-env-multi"
    assert "app" not in sts["spec"]["selector"]["matchLabels"]
    assert "app" not in sts["metadata"]["labels"]  # the StatefulSet is ours, not upstream's
