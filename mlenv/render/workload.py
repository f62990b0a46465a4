"""The worker pods (their template, wrapped by the cluster's ``mlenv.workload``) and the
dev Pod, built as dicts in Python (kr8s style).

These two carry the logic (mode variants, storage variants, optional dev-tool
containers), which reads better as code than as template conditionals. Values are
never spliced into text here, so nothing in a config can change their structure.
"""

from __future__ import annotations

import json
from typing import Any

from mlenv.config.model import Cluster, Mode, Toleration
from mlenv.errors import InputError
from mlenv.render import names
from mlenv.render.env import pod_env

HOSTNAME_KEY = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
MULTUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# OpenShift's oauth-proxy authenticates the dev tools (with dev_tools.auth: oauth-proxy)
# against the cluster's OAuth server. Pinned by digest: a tag can be re-pushed, a
# digest cannot. Digest of quay.io/openshift/origin-oauth-proxy as pinned by
# opendatahub-io's components/origin-oauth-proxy image; re-pin with
# `skopeo inspect docker://quay.io/openshift/origin-oauth-proxy:<tag>` when bumping.
OAUTH_PROXY_IMAGE = "quay.io/openshift/origin-oauth-proxy@sha256:1ece77d14a685ef2397c3a327844eea45ded00c95471e9e333e35ef3860b1895"
# Secret volumes are written by the kubelet owned by root, group = the pod's fsGroup when it
# has one (OpenShift's restricted SCCs always assign one) and root (0) otherwise. 0440 is
# readable in both cases, never by "other": the pod's UID always has group 0 (the image's
# user and OpenShift's random UID both run with GID 0; we never set runAsGroup) or the
# fsGroup. 0400 (owner = root only) was unreadable by a non-root UID without fsGroup
# . The pod init copies the private keys into a 0700 dir with mode 0600 (sshd's rule).
SECRET_MODE = 0o440

# dev tool -> (service/route suffix, port name, oauth-proxy port, upstream port). With
# dev_tools.auth: oauth-proxy the tool listens on 127.0.0.1:<upstream> and its
# oauth-proxy sidecar serves TLS on <proxy port> (the router re-encrypts); with
# dev_tools.auth: token code-server and Jupyter listen on <upstream> themselves (edge TLS).
DEV_TOOLS: dict[str, tuple[str, str, int, int]] = {
    "vscode": ("vscode", "vscode", 8444, 8080),
    "jupyter": ("jupyter", "jupyter", 8445, 8888),
    "tensorboard": ("tensorboard", "tensorboard", 8443, 6006),
}
# GPU scheduling defaults: the taint the NVIDIA GPU operator / cloud GPU pools put on
# GPU nodes, and the label GPU feature discovery sets on them.
GPU_TOLERATION: dict[str, Any] = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}


def oauth(cluster: Cluster) -> bool:
    """True when the dev tools sit behind OpenShift oauth-proxy (``dev_tools.auth``)."""
    return cluster.dev_tools.auth == "oauth-proxy"


def exposed_dev_tools(cluster: Cluster) -> list[str]:
    """Enabled dev tools that get a Service and Route (TensorBoard with token auth does not:
    it has no auth of its own, so it stays on loopback behind ``mlenv port-forward``)."""
    return [t for t in enabled_dev_tools(cluster) if oauth(cluster) or t != "tensorboard"]


def service_port(cluster: Cluster, tool: str) -> int:
    """The dev Pod port the tool's Service (and Route) targets."""
    _, _, proxy, upstream = DEV_TOOLS[tool]
    return proxy if oauth(cluster) else upstream


def route_termination(cluster: Cluster, tool: str) -> str:
    """``reencrypt`` to an oauth-proxy (it serves a service-CA certificate), else ``edge``."""
    return "reencrypt" if oauth(cluster) else "edge"


def forward_ports(cluster: Cluster) -> list[tuple[str, int, str]]:
    """(tool, dev Pod port, URL scheme) for ``mlenv port-forward``: the tools' own ports.

    The loopback upstreams, not the oauth-proxies: OAuth's redirect goes to the Route host,
    so a proxy cannot log anyone in through localhost. Port-forward needs the
    ``pods/portforward`` right in the namespace, which already grants as much as the tools.
    """
    return [(t, DEV_TOOLS[t][3], "http") for t in enabled_dev_tools(cluster)]


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


def pull_policy(cluster: Cluster, image: str) -> str:
    """``image.pull_policy`` when set; else ``Always`` for a mutable reference (tag
    ``latest`` or no tag, and no digest: the node's cached copy may be stale) and
    ``IfNotPresent`` for a digest or another (pinned) tag."""
    if cluster.image.pull_policy:
        return cluster.image.pull_policy
    return default_pull_policy(image)


def default_pull_policy(image: str) -> str:
    """``Always`` for a mutable reference (tag ``latest`` or none, no digest), else ``IfNotPresent``."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]  # a registry host:port is not a tag
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _toleration(t: Toleration) -> dict[str, Any]:
    if t.operator == "Exists" and t.value:
        # the API server refuses it; say which config key instead of a server error
        raise InputError(
            f"scheduling.tolerations: key {t.key!r} has operator Exists and a value "
            f"({t.value!r}); Exists takes no value"
        )
    out: dict[str, Any] = {"operator": t.operator}
    if t.key:
        out["key"] = t.key
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    if t.toleration_seconds is not None:
        out["tolerationSeconds"] = t.toleration_seconds
    return out


def _scheduling(cluster: Cluster) -> dict[str, Any]:
    """``tolerations`` / ``nodeSelector`` of a GPU pod: the config's, else the defaults.

    The default node selector only applies when ``nodes.gpu_nodes`` pins no nodes: pinned
    nodes were chosen by name, and a missing feature-discovery label on them must not
    leave the pods Pending.
    """
    sched = cluster.scheduling
    out: dict[str, Any] = {}
    gpu = not cpu_only(cluster)  # no GPU defaults for `gpus.type: cpu`: no GPU nodes needed
    if sched.tolerations is None:
        tolerations = [dict(GPU_TOLERATION)] if gpu else []
    else:
        tolerations = [_toleration(t) for t in sched.tolerations]
    if sched.node_selector is None:
        selector = dict(GPU_NODE_SELECTOR) if gpu and not cluster.gpu_nodes else {}
    else:
        selector = dict(sched.node_selector)
    if names.pinned_by_label(cluster):
        key, value = names.pool_label(cluster)
        selector[key] = value
    if tolerations:
        out["tolerations"] = tolerations
    if selector:
        out["nodeSelector"] = selector
    return out


def _dev_resources(cluster: Cluster) -> dict[str, Any]:
    """Each dev Pod container's ``resources`` (``resources.dev_pod``; null keys left out)."""
    dev = cluster.resources.dev_pod
    out: dict[str, Any] = {}
    for part, rl in (("requests", dev.requests), ("limits", dev.limits)):
        values = {k: v for k, v in (("cpu", rl.cpu), ("memory", rl.memory)) if v is not None}
        if values:
            out[part] = values
    return out


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
    spec: dict[str, Any] = {
        "accessModes": [access_mode],
        "resources": {"requests": {"storage": size}},
    }
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
    if cluster.gpu_nodes and not names.pinned_by_label(cluster):
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": HOSTNAME_KEY,
                                "operator": "In",
                                "values": list(cluster.gpu_nodes),
                            }
                        ]
                    }
                ]
            }
        }
    return affinity


def workers(cluster: Cluster, mode: Mode, nodes: int) -> list[dict[str, Any]]:
    """The worker objects for ``nodes`` pods in the effective ``mode``: the pod template
    and claim templates built here, wrapped by the cluster's workload (mlenv.workload)."""
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
        # SECRET_MODE: readable by the pod's UID with or without an fsGroup
        {"name": "ssh", "secret": {"secretName": names.SSH_SECRET, "defaultMode": SECRET_MODE}},
    ]
    claim_templates: list[dict[str, Any]] = []
    if st.mode == "rwx":
        volumes += [  # existing claims keep a migrated namespace's data
            {
                "name": "workspace",
                "persistentVolumeClaim": {"claimName": st.workspace_claim or names.WORKSPACE_PVC},
            },
            {
                "name": "datasets",
                "persistentVolumeClaim": {"claimName": st.datasets_claim or names.DATASETS_PVC},
            },
        ]
    else:
        for vol, size in (("workspace", st.workspace_size), ("datasets", st.datasets_size)):
            claim_templates.append(
                {
                    "metadata": {"name": vol, "labels": names.labels(cluster, component)},
                    "spec": _claim_spec("ReadWriteOnce", st.class_rwo, size),
                }
            )
    image = names.default_image(cluster)
    container: dict[str, Any] = {
        "name": "worker",
        "image": image,
        "imagePullPolicy": pull_policy(cluster, image),
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
        # restart a pod whose sshd is gone (the launcher cannot reach it), and never a
        # busy one. A TCP connect is completed by the kernel from the listen backlog, so
        # it succeeds however loaded the CPUs, GPUs or sshd itself are; it fails only
        # when nothing listens on the port. An HTTP or exec probe would need a process
        # to be scheduled and answer in time, which a saturated node may not do.
        # 10 misses 30 s apart (5 minutes) before a restart; the startup probe gives
        # pod init up to 10 minutes before liveness starts counting.
        "startupProbe": {
            "tcpSocket": {"port": "ssh"},
            "periodSeconds": 10,
            "failureThreshold": 60,
        },
        "livenessProbe": {
            "tcpSocket": {"port": "ssh"},
            "periodSeconds": 30,
            "timeoutSeconds": 10,
            "failureThreshold": 10,
        },
        "resources": _resources(cluster, eff),
        "securityContext": _container_security(cluster, eff),
        "volumeMounts": mounts,
    }
    template_annotations = text_annotations(cluster)
    if eff == "rdma" and cluster.rdma.networks:
        template_annotations[MULTUS_ANNOTATION] = ",".join(cluster.rdma.networks)
    key, value = names.UPSTREAM_POD_LABEL
    template_meta: dict[str, Any] = {"labels": {**names.labels(cluster, component), key: value}}
    if template_annotations:
        template_meta["annotations"] = template_annotations
    template: dict[str, Any] = {
        "metadata": template_meta,
        "spec": {
            "serviceAccountName": cluster.security.service_account,
            # nothing in a worker talks to the API server; without this every
            # shell (and every training script) there could act as the service account
            "automountServiceAccountToken": False,
            "affinity": _affinity(cluster, component),
            **_scheduling(cluster),
            "securityContext": _pod_security(),
            "containers": [container],
            "volumes": volumes,
        },
    }
    meta: dict[str, Any] = {
        "namespace": cluster.namespace,
        "labels": names.labels(cluster, component),
    }
    if text_annotations(cluster):
        meta["annotations"] = text_annotations(cluster)
    return names.workload(cluster).objects(
        template,
        nodes=nodes,
        metadata=meta,
        selector=names.selector_labels(cluster, component),
        service=names.HEADLESS_SERVICE,
        claims=claim_templates,
    )


def _secret_env(name: str, key: str) -> dict[str, Any]:
    return {
        "name": name,
        "valueFrom": {"secretKeyRef": {"name": names.DEVTOOLS_SECRET, "key": key}},
    }


def _tool_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _oauth_proxy(cluster: Cluster, tool: str, sar: dict[str, str]) -> dict[str, Any]:
    """The oauth-proxy sidecar in front of ``tool`` (listening on loopback)."""
    suffix, port_name, port, upstream = DEV_TOOLS[tool]
    return {
        "name": f"oauth-proxy-{suffix}",
        "image": OAUTH_PROXY_IMAGE,
        "imagePullPolicy": "IfNotPresent",  # pinned by digest
        "args": [
            "--provider=openshift",
            f"--https-address=:{port}",
            "--http-address=",
            f"--upstream=http://127.0.0.1:{upstream}",
            f"--openshift-service-account={cluster.security.service_account}",
            f"--openshift-sar={json.dumps({'namespace': cluster.namespace, **sar}, sort_keys=True)}",
            "--tls-cert=/etc/tls/private/tls.crt",
            "--tls-key=/etc/tls/private/tls.key",
            # a file path, not the value: argv is world-readable in /proc
            "--cookie-secret-file=/etc/oauth/cookie/cookie_secret",
        ],
        "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"}],
        "securityContext": _tool_security(),
        "volumeMounts": [
            {"name": f"{suffix}-tls", "mountPath": "/etc/tls/private", "readOnly": True},
            {"name": "oauth-cookie", "mountPath": "/etc/oauth/cookie", "readOnly": True},
            # the SA token only here (oauth-proxy is an OAuth client as the SA and
            # posts SubjectAccessReviews with it); the pod does not automount it
            {"name": "oauth-sa-token", "mountPath": SA_TOKEN_DIR, "readOnly": True},
        ],
    }


# code-server and Jupyter are a shell in the pod: only users who could exec into it anyway
# get in. TensorBoard only shows results: users who may get pods in the namespace.
# oauth-proxy posts these to OpenShift's SubjectAccessReview API (authorization.openshift.io),
# whose attributes have no "subresource" field: a subresource is written "pods/exec".
_EXEC_SAR = {"resource": "pods/exec", "verb": "create"}
_VIEW_SAR = {"resource": "pods", "verb": "get"}
SA_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def _dev_tool_containers(
    cluster: Cluster, image: str, mounts: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    # copies: a dict shared between containers would be written as a YAML anchor/alias
    ws = [dict(m) for m in mounts if m["name"] == "workspace"]
    proxied = oauth(cluster)
    # behind oauth-proxy the tools listen on loopback only: the proxy is the one way in
    host = "127.0.0.1" if proxied else "0.0.0.0"  # noqa: S104 - token auth, NetworkPolicy
    policy = pull_policy(cluster, image)
    if cluster.dev_tools.vscode:
        _, port_name, _, port = DEV_TOOLS["vscode"]
        vscode: dict[str, Any] = {
            "name": "code-server",
            "image": image,
            "imagePullPolicy": policy,
            "command": ["code-server"],
            "args": [
                "--bind-addr",
                f"{host}:{port}",
                "--auth",
                "none" if proxied else "password",
                "--disable-telemetry",
                names.WORKSPACE_DIR,
            ],
            "securityContext": _tool_security(),
            "volumeMounts": [dict(m) for m in ws],
        }
        if not proxied:
            # code-server reads $PASSWORD itself: the value never reaches argv
            vscode["env"] = [_secret_env("PASSWORD", "code-server-password")]
            vscode["ports"] = [{"name": port_name, "containerPort": port, "protocol": "TCP"}]
        out.append(vscode)
        if proxied:
            out.append(_oauth_proxy(cluster, "vscode", _EXEC_SAR))
    if cluster.dev_tools.jupyter:
        _, port_name, _, port = DEV_TOOLS["jupyter"]
        jupyter: dict[str, Any] = {
            "name": "jupyter",
            "image": image,
            "imagePullPolicy": policy,
            "command": ["jupyter", "lab"],
            "args": [
                f"--ip={host}",
                f"--port={port}",
                "--no-browser",
                f"--ServerApp.root_dir={names.WORKSPACE_DIR}",
            ],
            "securityContext": _tool_security(),
            "volumeMounts": [dict(m) for m in ws],
        }
        if proxied:
            # oauth-proxy authenticated the user; an empty token turns Jupyter's own login
            # off (it listens on loopback, so only the proxy reaches it), and the proxy
            # passes the Route's Host header, which a loopback Jupyter refuses unless told
            jupyter["args"] = [
                *jupyter["args"],
                "--ServerApp.token=",
                "--ServerApp.allow_remote_access=True",
            ]
        else:
            # Jupyter Server reads $JUPYTER_TOKEN itself: the token never reaches argv
            # (argv is world-readable in /proc and shown by `ps`)
            jupyter["env"] = [_secret_env("JUPYTER_TOKEN", "jupyter-token")]
            jupyter["ports"] = [{"name": port_name, "containerPort": port, "protocol": "TCP"}]
        out.append(jupyter)
        if proxied:
            out.append(_oauth_proxy(cluster, "jupyter", _EXEC_SAR))
    if cluster.dev_tools.tensorboard:
        out.append(
            {
                "name": "tensorboard",
                "image": image,
                "imagePullPolicy": policy,
                "command": ["tensorboard"],
                # loopback only in both modes: it has no auth of its own
                "args": [
                    "--logdir",
                    f"{names.WORKSPACE_DIR}/results",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(DEV_TOOLS["tensorboard"][3]),
                ],
                "securityContext": _tool_security(),
                "volumeMounts": [dict(m) for m in ws],
            }
        )
        if proxied:
            out.append(_oauth_proxy(cluster, "tensorboard", _VIEW_SAR))
    return out


def dev_tool_name(tool: str) -> str:
    """The Service and Route of dev tool ``tool`` (e.g. ``ml-dev-env-vscode``)."""
    return f"{names.APP}-{DEV_TOOLS[tool][0]}"


def tls_secret(tool: str) -> str:
    """Secret the service CA issues the tool's oauth-proxy serving certificate into."""
    return f"{dev_tool_name(tool)}-tls"


def _sa_token_volume() -> dict[str, Any]:
    """The service-account token, CA and namespace the kubelet would automount, as an
    explicit projected volume that only the oauth-proxy containers mount."""
    return {
        "name": "oauth-sa-token",
        "projected": {
            "defaultMode": 0o444,  # the token file is the pod's own; any UID of the pod reads it
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                # OpenShift adds the service CA to its automounted token volume too
                {
                    "configMap": {
                        "name": "openshift-service-ca.crt",
                        "optional": True,
                        "items": [{"key": "service-ca.crt", "path": "service-ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }


def dev_pod(cluster: Cluster, mode: Mode) -> dict[str, Any]:
    """The single dev Pod: a shell next to the shared workspace, hosting the dev tools.

    It requests no GPUs so it never competes with the StatefulSet for GPU nodes.
    """
    eff = cluster.effective_mode(mode)
    component = "dev"
    image = names.default_image(cluster)
    mounts: list[dict[str, Any]] = [{"name": "workspace", "mountPath": names.WORKSPACE_DIR}]
    volumes: list[dict[str, Any]] = [_shm_volume(cluster)]
    st = cluster.storage
    if st.mode == "rwx":
        mounts.append({"name": "datasets", "mountPath": names.DATASETS_DIR})
        volumes += [  # existing claims keep a migrated namespace's data
            {
                "name": "workspace",
                "persistentVolumeClaim": {"claimName": st.workspace_claim or names.WORKSPACE_PVC},
            },
            {
                "name": "datasets",
                "persistentVolumeClaim": {"claimName": st.datasets_claim or names.DATASETS_PVC},
            },
        ]
    else:
        volumes.append(
            {
                "name": "workspace",
                "persistentVolumeClaim": {
                    "claimName": st.workspace_claim or names.DEV_WORKSPACE_PVC
                },
            }
        )
        if st.datasets_claim:  # upstream's dev pod mounted its datasets claim too
            mounts.append({"name": "datasets", "mountPath": names.DATASETS_DIR})
            volumes.append(
                {"name": "datasets", "persistentVolumeClaim": {"claimName": st.datasets_claim}}
            )
    mounts.append({"name": "dshm", "mountPath": names.SHM_DIR})
    proxied = [t for t in enabled_dev_tools(cluster) if oauth(cluster)]
    for tool in proxied:
        volumes.append(
            {
                "name": f"{DEV_TOOLS[tool][0]}-tls",
                "secret": {"secretName": tls_secret(tool), "defaultMode": SECRET_MODE},
            }
        )
    if proxied:
        volumes += [
            {
                "name": "oauth-cookie",
                "secret": {
                    "secretName": names.DEVTOOLS_SECRET,
                    "defaultMode": SECRET_MODE,
                    "items": [{"key": "oauth-cookie-secret", "path": "cookie_secret"}],
                },
            },
            _sa_token_volume(),
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
        "imagePullPolicy": pull_policy(cluster, image),
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
            # the token is not automounted: a shell here must not hold the SA's
            # rights. Only oauth-proxy needs it, and gets it from an explicit projected
            # volume mounted into its container alone.
            "automountServiceAccountToken": False,
            "securityContext": _pod_security(),
            "containers": [
                {**c, "resources": _dev_resources(cluster)} if _dev_resources(cluster) else c
                for c in [main, *_dev_tool_containers(cluster, image, mounts)]
            ],
            "volumes": volumes,
        },
    }
