"""The StatefulSet and the dev Pod, built as dicts in Python (kr8s style).

These two carry the logic (mode variants, storage variants, optional dev-tool
containers), which reads better as code than as template conditionals. Values are
never spliced into text here, so nothing in a config can change their structure.
"""

from __future__ import annotations

import json
from typing import Any

from mlenv.config.model import Cluster, Mode
from mlenv.render import names
from mlenv.render.env import pod_env

HOSTNAME_KEY = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
MULTUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# OpenShift's oauth-proxy authenticates TensorBoard (which has no auth of its own)
# against the cluster's OAuth server; pinned to a tag for reproducible manifests.
OAUTH_PROXY_IMAGE = "quay.io/openshift/origin-oauth-proxy:4.16"
TENSORBOARD_TLS_SECRET = "ml-dev-env-tensorboard-tls"  # issued by the service CA

# dev tool -> (service/route suffix, port name, service port, route TLS termination)
DEV_TOOLS: dict[str, tuple[str, str, int, str]] = {
    "vscode": ("vscode", "vscode", 8080, "edge"),
    "jupyter": ("jupyter", "jupyter", 8888, "edge"),
    # oauth-proxy serves TLS itself (service-CA cert), so the router re-encrypts
    "tensorboard": ("tensorboard", "tensorboard", 8443, "reencrypt"),
}


def enabled_dev_tools(cluster: Cluster) -> list[str]:
    """Names of the dev tools the config enables, in a fixed order."""
    return [t for t in DEV_TOOLS if getattr(cluster.dev_tools, t)]


def cpu_only(cluster: Cluster) -> bool:
    """``gpus.type: cpu``: per_node counts CPU ranks, so no ``nvidia.com/gpu`` is requested."""
    return cluster.gpus.type.lower() == "cpu"


def text_annotations(cluster: Cluster) -> dict[str, str]:
    """Free-text config fields as annotations (empty ones left out)."""
    out: dict[str, str] = {}
    if cluster.cluster.description:
        out[names.ANNOTATION_DESCRIPTION] = cluster.cluster.description
    if cluster.notes:
        out[names.ANNOTATION_NOTES] = cluster.notes
    return out


def _container_security(cluster: Cluster, eff: Mode) -> dict[str, Any]:
    if eff == "rdma" and cluster.security.requires_privileged_scc:
        # only when the config demands it (some RDMA stacks need raw device access)
        return {"privileged": True}
    caps: dict[str, Any] = {"drop": ["ALL"]}
    if eff == "rdma" and cluster.security.ipc_lock:
        caps["add"] = ["IPC_LOCK"]  # RDMA memory registration pins pages
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": caps,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_security() -> dict[str, Any]:
    # no runAsUser: the SCC assigns one from the namespace range (restricted-v2 style)
    return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def _resources(cluster: Cluster, eff: Mode) -> dict[str, Any]:
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    rq, lm = cluster.resources.requests, cluster.resources.limits
    if rq.cpu:
        requests["cpu"] = rq.cpu
    if rq.memory:
        requests["memory"] = rq.memory
    if lm.cpu:
        limits["cpu"] = lm.cpu
    if lm.memory:
        limits["memory"] = lm.memory
    # extended resources must appear in limits, and requests must equal limits
    extended: dict[str, Any] = {}
    if cluster.gpus.per_node > 0 and not cpu_only(cluster):
        extended[GPU_RESOURCE] = cluster.gpus.per_node
    if eff == "rdma":
        for res in cluster.rdma.resources:
            extended[res.name] = res.count
    requests.update(extended)
    limits.update(extended)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _shm_volume(cluster: Cluster) -> dict[str, Any]:
    # NCCL and DataLoader workers use /dev/shm; the container default (64 MiB) is too small
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": cluster.shm_size}}


def _claim_spec(access_mode: str, storage_class: str, size: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": [access_mode], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return spec


def _affinity(cluster: Cluster, component: str) -> dict[str, Any]:
    affinity: dict[str, Any] = {
        # one pod per node: ranks map to nodes, and NCCL topology assumes it
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": names.selector_labels(cluster, component)},
                    "topologyKey": HOSTNAME_KEY,
                }
            ]
        }
    }
    if cluster.gpu_nodes:
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": HOSTNAME_KEY, "operator": "In", "values": list(cluster.gpu_nodes)}
                        ]
                    }
                ]
            }
        }
    return affinity


def statefulset(cluster: Cluster, mode: Mode, nodes: int) -> dict[str, Any]:
    """The worker StatefulSet for ``nodes`` pods in the effective ``mode``."""
    eff = cluster.effective_mode(mode)
    component = "worker"
    st = cluster.storage
    mounts: list[dict[str, Any]] = [
        {"name": "workspace", "mountPath": names.WORKSPACE_DIR},
        {"name": "datasets", "mountPath": names.DATASETS_DIR},
        {"name": "dshm", "mountPath": names.SHM_DIR},
        {"name": "ssh", "mountPath": names.SSH_DIR, "readOnly": True},
    ]
    volumes: list[dict[str, Any]] = [
        _shm_volume(cluster),
        # 0400: sshd refuses host keys readable by others
        {"name": "ssh", "secret": {"secretName": names.SSH_SECRET, "defaultMode": 0o400}},
    ]
    claim_templates: list[dict[str, Any]] = []
    if st.mode == "rwx":
        volumes += [
            {"name": "workspace", "persistentVolumeClaim": {"claimName": names.WORKSPACE_PVC}},
            {"name": "datasets", "persistentVolumeClaim": {"claimName": names.DATASETS_PVC}},
        ]
    else:
        for vol, size in (("workspace", st.workspace_size), ("datasets", st.datasets_size)):
            claim_templates.append(
                {
                    "metadata": {"name": vol, "labels": names.labels(cluster, component)},
                    "spec": _claim_spec("ReadWriteOnce", st.class_rwo, size),
                }
            )
    container: dict[str, Any] = {
        "name": "worker",
        "image": names.default_image(cluster),
        "imagePullPolicy": cluster.image.pull_policy,
        "command": [names.POD_INIT],
        "env": pod_env(cluster, mode, nodes),
        "ports": [
            {"name": "ssh", "containerPort": cluster.ssh_port, "protocol": "TCP"},
            {"name": "master", "containerPort": cluster.master_port, "protocol": "TCP"},
        ],
        # ready = sshd answers, which is what the launcher's preflight needs
        "readinessProbe": {
            "tcpSocket": {"port": "ssh"},
            "initialDelaySeconds": 5,
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "resources": _resources(cluster, eff),
        "securityContext": _container_security(cluster, eff),
        "volumeMounts": mounts,
    }
    template_annotations = text_annotations(cluster)
    if eff == "rdma" and cluster.rdma.networks:
        template_annotations[MULTUS_ANNOTATION] = ",".join(cluster.rdma.networks)
    template_meta: dict[str, Any] = {"labels": names.labels(cluster, component)}
    if template_annotations:
        template_meta["annotations"] = template_annotations
    spec: dict[str, Any] = {
        "serviceName": names.HEADLESS_SERVICE,
        "replicas": nodes,
        "podManagementPolicy": "Parallel",  # all pods at once: the job needs every rank
        "selector": {"matchLabels": names.selector_labels(cluster, component)},
        "template": {
            "metadata": template_meta,
            "spec": {
                "serviceAccountName": cluster.security.service_account,
                "affinity": _affinity(cluster, component),
                "securityContext": _pod_security(),
                "containers": [container],
                "volumes": volumes,
            },
        },
    }
    if claim_templates:
        spec["volumeClaimTemplates"] = claim_templates
    meta: dict[str, Any] = {
        "name": names.STATEFULSET,
        "namespace": cluster.namespace,
        "labels": names.labels(cluster, component),
    }
    if text_annotations(cluster):
        meta["annotations"] = text_annotations(cluster)
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta, "spec": spec}


def _secret_env(name: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": names.DEVTOOLS_SECRET, "key": key}}}


def _tool_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _dev_tool_containers(cluster: Cluster, image: str, mounts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ws = [m for m in mounts if m["name"] == "workspace"]
    if cluster.dev_tools.vscode:
        _, port_name, port, _ = DEV_TOOLS["vscode"]
        out.append(
            {
                "name": "code-server",
                "image": image,
                "imagePullPolicy": cluster.image.pull_policy,
                "command": ["code-server"],
                # password auth from the Secret deploy creates; never --auth none
                "args": ["--bind-addr", f"0.0.0.0:{port}", "--auth", "password",
                         "--disable-telemetry", names.WORKSPACE_DIR],
                "env": [_secret_env("PASSWORD", "code-server-password")],
                "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"}],
                "securityContext": _tool_security(),
                "volumeMounts": ws,
            }
        )
    if cluster.dev_tools.jupyter:
        _, port_name, port, _ = DEV_TOOLS["jupyter"]
        out.append(
            {
                "name": "jupyter",
                "image": image,
                "imagePullPolicy": cluster.image.pull_policy,
                "command": ["jupyter", "lab"],
                # $(JUPYTER_TOKEN) is expanded by the kubelet from env, no shell involved
                "args": ["--ip=0.0.0.0", f"--port={port}", "--no-browser",
                         "--ServerApp.token=$(JUPYTER_TOKEN)",
                         f"--ServerApp.root_dir={names.WORKSPACE_DIR}"],
                "env": [_secret_env("JUPYTER_TOKEN", "jupyter-token")],
                "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"}],
                "securityContext": _tool_security(),
                "volumeMounts": ws,
            }
        )
    if cluster.dev_tools.tensorboard:
        _, port_name, port, _ = DEV_TOOLS["tensorboard"]
        sar = json.dumps({"namespace": cluster.namespace, "resource": "pods", "verb": "get"},
                         sort_keys=True)
        out.append(
            {
                "name": "tensorboard",
                "image": image,
                "imagePullPolicy": cluster.image.pull_policy,
                "command": ["tensorboard"],
                # loopback only: the oauth-proxy beside it is the one way in
                "args": ["--logdir", f"{names.WORKSPACE_DIR}/results", "--host", "127.0.0.1",
                         "--port", "6006"],
                "securityContext": _tool_security(),
                "volumeMounts": ws,
            }
        )
        out.append(
            {
                "name": "oauth-proxy",
                "image": OAUTH_PROXY_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "args": [
                    "--provider=openshift",
                    f"--https-address=:{port}",
                    "--http-address=",
                    "--upstream=http://127.0.0.1:6006",
                    f"--openshift-service-account={cluster.security.service_account}",
                    # only users who may get pods in this namespace see TensorBoard
                    f"--openshift-sar={sar}",
                    "--tls-cert=/etc/tls/private/tls.crt",
                    "--tls-key=/etc/tls/private/tls.key",
                    "--cookie-secret-file=/etc/oauth/cookie/cookie_secret",
                ],
                "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"}],
                "securityContext": _tool_security(),
                "volumeMounts": [
                    {"name": "tensorboard-tls", "mountPath": "/etc/tls/private", "readOnly": True},
                    {"name": "oauth-cookie", "mountPath": "/etc/oauth/cookie", "readOnly": True},
                ],
            }
        )
    return out


def dev_pod(cluster: Cluster, mode: Mode) -> dict[str, Any]:
    """The single dev Pod: a shell next to the shared workspace, hosting the dev tools.

    It requests no GPUs so it never competes with the StatefulSet for GPU nodes.
    """
    eff = cluster.effective_mode(mode)
    component = "dev"
    image = names.default_image(cluster)
    mounts: list[dict[str, Any]] = [{"name": "workspace", "mountPath": names.WORKSPACE_DIR}]
    volumes: list[dict[str, Any]] = [_shm_volume(cluster)]
    if cluster.storage.mode == "rwx":
        mounts.append({"name": "datasets", "mountPath": names.DATASETS_DIR})
        volumes += [
            {"name": "workspace", "persistentVolumeClaim": {"claimName": names.WORKSPACE_PVC}},
            {"name": "datasets", "persistentVolumeClaim": {"claimName": names.DATASETS_PVC}},
        ]
    else:
        volumes.append({"name": "workspace", "persistentVolumeClaim": {"claimName": names.DEV_WORKSPACE_PVC}})
    mounts.append({"name": "dshm", "mountPath": names.SHM_DIR})
    if cluster.dev_tools.tensorboard:
        volumes += [
            {"name": "tensorboard-tls", "secret": {"secretName": TENSORBOARD_TLS_SECRET}},
            {"name": "oauth-cookie", "secret": {"secretName": names.DEVTOOLS_SECRET,
                                                 "items": [{"key": "oauth-cookie-secret",
                                                            "path": "cookie_secret"}]}},
        ]
    env = [
        {"name": "MLENV_CLUSTER", "value": cluster.name},
        {"name": "MLENV_NETWORK_MODE", "value": eff},
        {"name": "MASTER_ADDR", "value": names.master_addr(cluster)},
        {"name": "MASTER_PORT", "value": str(cluster.master_port)},
    ]
    main: dict[str, Any] = {
        "name": "dev",
        "image": image,
        "imagePullPolicy": cluster.image.pull_policy,
        # an idle shell host: `mlenv shell` / `oc rsh` land here
        "command": ["sleep", "infinity"],
        "env": env,
        "securityContext": _tool_security(),
        "volumeMounts": mounts,
    }
    meta: dict[str, Any] = {
        "name": names.DEV_POD,
        "namespace": cluster.namespace,
        "labels": names.labels(cluster, component),
    }
    if text_annotations(cluster):
        meta["annotations"] = text_annotations(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "serviceAccountName": cluster.security.service_account,
            "securityContext": _pod_security(),
            "containers": [main, *_dev_tool_containers(cluster, image, mounts)],
            "volumes": volumes,
        },
    }
