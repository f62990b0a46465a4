"""What the kube tier puts into its fresh control plane: nodes, storage, kwok stages, CRDs.

Everything here is data (dicts that become JSON for ``kubectl apply``). The kwok Stages are
written by us after kwokctl's defaults (sigs.k8s.io/kwok kustomize/stage/{node,pod,volume});
the OpenShift CRDs come from github.com/openshift/api where it ships them
(scripts/kube/crds/openshift-api, its source commit named there) and are minimal CRDs of
ours, marked as such, where it does not (BuildConfig, Build, ImageStream, and Multus'
NetworkAttachmentDefinition).
"""

from __future__ import annotations

import ipaddress
import json
import sys
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[3]
OPENSHIFT_CRDS = REPO / "scripts" / "kube" / "crds" / "openshift-api"
# Annotation kwok manages nodes by (--manage-nodes-with-annotation-selector).
KWOK_NODE = "kwok.x-k8s.io/node"
# Set on a pod by the tier's pod-root controller once its root, Exec and Logs exist: only
# then does the pod-ready stage start it (as a kubelet starts a container once its
# volumes are mounted), so an exec right after Ready always reaches a confined root.
ROOT_READY = "kube-tier.mlenv.dev/root-ready"
# The address the pod-root controller gave the pod's network namespace (podnet.py), set
# with ROOT_READY: the pod-ready stage reports it as status.podIP, as a kubelet reports
# the address its CNI plugin gave the pod's sandbox.
POD_IP = "kube-tier.mlenv.dev/pod-ip"
OURS = "kube-tier.mlenv.dev/minimal-crd"
# The scale tier's extra GPU nodes (KUBE_SCALE_NODES): shaped like the GPU nodes, but their
# pods are kwok-only. The pod-root controller leaves them alone (no root, no network of
# their own, so thousands fit on one machine); the pod-ready-scale stage starts them with
# an address of their node's podCIDR, and their execs all run in one shared root (scale_exec).
# The node name's prefix is what both go by: a kwok stage sees the pod, not its node.
SCALE_NODE_PREFIX = "scale-node-"
SCALE_NODE_LABEL = "kube-tier.mlenv.dev/scale"
# Registry host that can never resolve (RFC 2606): any image under it fails to pull.
MISSING_REGISTRY = "registry.invalid/"
DEFAULT_STORAGE_CLASS = "standard"
# The example configs' storage classes, so they deploy unchanged (all served by our stage).
STORAGE_CLASSES = (
    DEFAULT_STORAGE_CLASS,
    "ocs-storagecluster-ceph-rbd",
    "ocs-storagecluster-cephfs",
    "nfs-csi",
    "lustre-csi",
)
PROVISIONER = "kube-tier.mlenv.dev/static"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
SRIOV_POOL = "openshift.io/ib_rail"


def gpu_node(name: str, gpus: int = 8) -> Obj:
    """A GPU worker as the GPU Operator, the RDMA shared device plugin and the SR-IOV
    operator leave it: extended resources in capacity/allocatable, GFD labels."""
    res = {
        "cpu": "96",
        "memory": "1Ti",
        "pods": "110",
        "ephemeral-storage": "2Ti",
        "nvidia.com/gpu": str(gpus),
        "rdma/rdma_shared_device_a": "1k",
        SRIOV_POOL: "8",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node-role.kubernetes.io/worker": "",
        "type": "kwok",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": GPU_PRODUCT,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/cuda.driver.major": "570",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
        "feature.node.kubernetes.io/rdma.available": "true",
        "feature.node.kubernetes.io/network-sriov.capable": "true",
    }
    return _node(name, labels, res)


def scale_node(index: int, gpus: int = 8) -> Obj:
    """One of the scale tier's extra nodes (index < 16384): a GPU node (same capacity and
    labels) whose pods kwok alone runs, marked by its name's prefix and SCALE_NODE_LABEL."""
    node = gpu_node(f"{SCALE_NODE_PREFIX}{index}", gpus)
    node["metadata"]["labels"][SCALE_NODE_LABEL] = "true"
    # a /24 of its own in 100.64.0.0/10 (shared address space), never the plane's pod range
    node["spec"]["podCIDR"] = str(ipaddress.ip_network("100.64.0.0/10")[index * 256]) + "/24"
    return node


def is_scale_pod(pod: Obj) -> bool:
    """A pod scheduled on one of the scale tier's extra nodes (kwok-only: no root of its own)."""
    return str((pod.get("spec") or {}).get("nodeName") or "").startswith(SCALE_NODE_PREFIX)


# The scale pods' shared root, under the tier's pods/ (no namespace name starts with "_"),
# and the folder of their per-pod workspaces in it.
SCALE_ROOT = ("_scale", "shared")
SCALE_WORKSPACES = "workspaces"


def scale_env() -> dict[str, str]:
    """What a pod's exec gets from the pod-root controller (podroots.Controller._env), for
    the shared root: the package on PYTHONPATH, the venv first on PATH."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        "HOME": "/root",
        "MLENV_KUBE_PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "MLENV_KUBE_POD_NAME": "scale-shared",
        "MLENV_KUBE_WORKDIR": "/workspace",
        "PYTHONPATH": str(REPO),
        # each exec's overlay goes with it: nothing to cache there
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def scale_pod_exec(root: Path, env: dict[str, str], pod: Obj) -> Obj:
    """The scale pod ``pod``'s own kwok Exec: kwok's fallback for the scale pods
    (scale_exec with the shared root ``root`` and ``env``) with ``/workspace`` the pod's
    own folder, ``<root>/workspaces/<namespace>/<pod>`` (its claim: per-pod volumes are
    per pod, and sync's copies into one shared folder from many pods at once overwrote
    each other under its check), and the pod's name as its hostname; owned by the pod,
    so it goes with it."""
    meta = pod["metadata"]
    ns, name = str(meta["namespace"]), str(meta["name"])
    shared = scale_exec(root, env)
    envs = [dict(e) for e in shared["spec"]["execs"][0]["local"]["envs"]]
    workspace = root / SCALE_WORKSPACES / ns / name
    for e in envs:
        if e["name"] == "MLENV_KUBE_MOUNTS":
            e["value"] = f"/workspace={workspace}"
        elif e["name"] == "MLENV_KUBE_POD_NAME":
            e["value"] = name
    owner = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": meta["uid"]}]
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Exec",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": owner},
        "spec": {"execs": [{"local": {"envs": envs}}]},
    }


def scale_exec(root: Path, env: dict[str, str]) -> Obj:
    """kwok's fallback exec for every pod without an Exec of its own (the scale nodes'
    pods): confine.sh in the one shared root ``root`` (under the tier's pods/, with its
    own network holder), with ``env`` (PATH, PYTHONPATH, workdir as a pod's)."""
    envs = [{"name": k, "value": v} for k, v in env.items()]
    envs += [
        {"name": "MLENV_KUBE_POD_ROOT", "value": str(root)},
        {"name": "MLENV_KUBE_SHARED_ROOT", "value": "1"},  # an overlay per exec (confine.sh)
        # the pods' code folder, as their workspace claim would give it
        {"name": "MLENV_KUBE_MOUNTS", "value": f"/workspace={root / 'workspace'}"},
    ]
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterExec",
        "metadata": {"name": "scale-nodes-shared-root"},
        "spec": {"execs": [{"local": {"envs": envs}}]},
    }


def cpu_node(name: str) -> Obj:
    res = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node-role.kubernetes.io/worker": "",
        "type": "kwok",
    }
    return _node(name, labels, res)


def _node(name: str, labels: dict[str, str], res: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {KWOK_NODE: "fake"}},
        "spec": {},
        "status": {
            "capacity": res,
            "allocatable": res,
            # every field the API's schema requires (client-side validation refuses less)
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "Red Hat Enterprise Linux CoreOS (kwok node)",
                "machineID": name,
                "systemUUID": name,
                "bootID": name,
                "kernelVersion": "kwok",
                "containerRuntimeVersion": "kwok://0.8.0",
                "kubeletVersion": "kwok",
                "kubeProxyVersion": "kwok",
            },
        },
    }


def storage_classes() -> list[Obj]:
    out = []
    for name in STORAGE_CLASSES:
        ann = (
            {"storageclass.kubernetes.io/is-default-class": "true"}
            if name == DEFAULT_STORAGE_CLASS
            else {}
        )
        out.append(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name, "annotations": ann},
                "provisioner": PROVISIONER,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
                "allowVolumeExpansion": True,
            }
        )
    return out


def _minimal_crd(
    group: str, kind: str, plural: str, namespaced: bool = True, short: list[str] | None = None
) -> Obj:
    """A CRD of ours (openshift/api ships none for these kinds): any spec/status accepted."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    names: Obj = {
        "kind": kind,
        "listKind": kind + "List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short:
        names["shortNames"] = short
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "annotations": {OURS: "written by mlenv's kube tier, not shipped by openshift/api"},
        },
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": names,
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def openshift_crds() -> list[Path | Obj]:
    """The OpenShift flavour's kinds: files from openshift/api, then minimal CRDs of ours."""
    files: list[Path | Obj] = [*sorted(OPENSHIFT_CRDS.glob("*.crd.yaml"))]
    return files + [
        _minimal_crd("build.openshift.io", "BuildConfig", "buildconfigs", short=["bc"]),
        _minimal_crd("build.openshift.io", "Build", "builds"),
        _minimal_crd("image.openshift.io", "ImageStream", "imagestreams", short=["is"]),
        _minimal_crd("image.openshift.io", "ImageStreamTag", "imagestreamtags", short=["istag"]),
        _minimal_crd(
            "k8s.cni.cncf.io",
            "NetworkAttachmentDefinition",
            "network-attachment-definitions",
            short=["net-attach-def"],
        ),
    ]


def kwok_crds(kwok_source: Path) -> list[Path]:
    """Exec and Logs per pod (the pod-root controller writes them); nothing else as CRDs."""
    bases = kwok_source / "kustomize" / "crd" / "bases"
    return [bases / "kwok.x-k8s.io_execs.yaml", bases / "kwok.x-k8s.io_logs.yaml"]


def user_cluster_role() -> list[Obj]:
    """What a developer on a shared cluster may see cluster-wide: nodes and storage classes
    (read-only), as OpenShift's basic-user/cluster-reader lets preflight do."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "mlenv-tier-developer"},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
                {
                    "apiGroups": ["storage.k8s.io"],
                    "resources": ["storageclasses"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        }
    ]


def openshift_aggregated_roles() -> list[Obj]:
    """On OpenShift, a project's admin and edit roles include builds, images, routes and
    Multus networks; our CRDs get the same through the roles' aggregation labels (without
    them a namespace admin of the tier could not deploy what a real project admin can)."""
    rules = [
        {
            "apiGroups": ["build.openshift.io"],
            "resources": ["buildconfigs", "builds", "buildconfigs/instantiate"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["image.openshift.io"],
            "resources": ["imagestreams", "imagestreamtags"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["route.openshift.io"],
            "resources": ["routes"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["k8s.cni.cncf.io"],
            "resources": ["network-attachment-definitions"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
    ]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": "mlenv-tier-openshift-project-kinds",
                "labels": {
                    "rbac.authorization.k8s.io/aggregate-to-admin": "true",
                    "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                },
            },
            "rules": rules,
        }
    ]


def grant(namespace: str, user: str, role: str) -> list[Obj]:
    """The namespace and a RoleBinding of ``user`` to the ``role`` ClusterRole inside it."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"mlenv-tier-{role}", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    ]


def developer_binding(user: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "mlenv-tier-developer"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "mlenv-tier-developer",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def _stage(
    name: str,
    kind: str,
    api_group: str,
    selector: Obj,
    nxt: Obj | None = None,
    steps: list[Obj] | None = None,
    weight: int = 0,
    delay_ms: int = 0,
    delay_from: str = "",
) -> Obj:
    spec: Obj = {"resourceRef": {"apiGroup": api_group, "kind": kind}, "selector": selector}
    if nxt is not None:
        spec["next"] = nxt
    if steps is not None:
        spec["steps"] = steps
    if weight:
        spec["weight"] = weight
    if delay_ms:
        spec["delay"] = {"durationMilliseconds": delay_ms}
    if delay_from:
        spec.setdefault("delay", {})["durationFrom"] = {"expressionFrom": delay_from}
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


def _cel(*exprs: str) -> Obj:
    return {"matchExpressions": [{"cel": {"expression": e}} for e in exprs]}


NODE_STATUS = """{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
{{ with NodeName }}
- address: {{ . | Quote }}
  type: Hostname
{{ end }}
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
allocatable:
{{ YAML .status.allocatable 1 }}
capacity:
{{ YAML .status.capacity 1 }}
nodeInfo:
{{ YAML .status.nodeInfo 1 }}
phase: Running
"""

# The pod-ready stage only starts pods that carry POD_IP (with ROOT_READY): kwok's own
# address pool (PodIPWith) is not used, so an address is never given twice. A container
# with a readiness or startup probe starts unready, as a kubelet reports it: the tier's
# kubelet (kubelet.py) runs the probe and reports it ready.
POD_RUNNING = (
    "{{ $podIP := index .metadata.annotations "
    + json.dumps(POD_IP)
    + " }}\n"
    + """{{ $now := Now }}
{{ $ready := "True" }}
{{ range .spec.containers }}{{ if or .readinessProbe .startupProbe }}{{ $ready = "False" }}{{ end }}{{ end }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: {{ $ready | Quote }}
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: {{ $ready | Quote }}
  type: ContainersReady
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodScheduled
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  imageID: {{ printf "%s@sha256:0000000000000000000000000000000000000000000000000000000000000000" .image | Quote }}
  name: {{ .name | Quote }}
  ready: {{ if or .readinessProbe .startupProbe }}false{{ else }}true{{ end }}
  started: {{ if .startupProbe }}false{{ else }}true{{ end }}
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPWith .spec.nodeName }}
hostIP: {{ . | Quote }}
{{ end }}
podIP: {{ $podIP | Quote }}
podIPs:
- ip: {{ $podIP | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""
)

# The scale nodes' pods: the same status, at an address kwok gives from their node's
# podCIDR (scale_node: outside the plane's pod network; nothing answers there).
POD_RUNNING_SCALE = (
    "{{ $podIP := PodIPWith .spec.nodeName false .metadata.uid .metadata.name"
    " .metadata.namespace }}\n"
    # no kubelet runs their containers or probes: ready as kwok starts them
    + POD_RUNNING.split("\n", 1)[1]
    .replace('{{ $ready := "True" }}\n', "")
    .replace(
        "{{ range .spec.containers }}{{ if or .readinessProbe .startupProbe }}"
        '{{ $ready = "False" }}{{ end }}{{ end }}\n',
        "",
    )
    .replace("{{ $ready | Quote }}", '"True"')
    .replace("{{ if or .readinessProbe .startupProbe }}false{{ else }}true{{ end }}", "true")
    .replace("{{ if .startupProbe }}false{{ else }}true{{ end }}", "true")
)

POD_IMAGE_PULL = """{{ $now := Now }}
{{ $reason := "ErrImagePull" }}
{{ range .status.containerStatuses }}{{ if .state.waiting }}{{ if eq .state.waiting.reason "ErrImagePull" }}{{ $reason = "ImagePullBackOff" }}{{ end }}{{ end }}{{ end }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodScheduled
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    waiting:
      reason: {{ $reason }}
      message: {{ printf "Back-off pulling image %q: reading manifest: name unknown" .image | Quote }}
{{ end }}
{{ with NodeIPWith .spec.nodeName }}
hostIP: {{ . | Quote }}
{{ end }}
phase: Pending
startTime: {{ $now | Quote }}
"""


def _missing_image_cel(missing: list[str]) -> str:
    listed = json.dumps(missing)
    return (
        f"self.spec.containers.exists(c, c.image.startsWith('{MISSING_REGISTRY}') || c.image in {listed})"
        if missing
        else f"self.spec.containers.exists(c, c.image.startsWith('{MISSING_REGISTRY}'))"
    )


def stages(missing_images: list[str]) -> list[Obj]:
    """Nodes become Ready and keep their lease; pods start once their root exists, fail to
    pull a missing image (ErrImagePull, then ImagePullBackOff), and go on deletion;
    claims of our classes get a volume."""
    missing = _missing_image_cel(missing_images)
    classes = json.dumps(list(STORAGE_CLASSES))
    return [
        _stage(
            "node-initialize",
            "Node",
            "v1",
            {
                "matchExpressions": [
                    {
                        "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                        "operator": "NotIn",
                        "values": ["True"],
                    }
                ]
            },
            nxt={"statusTemplate": NODE_STATUS},
        ),
        _stage(
            "node-heartbeat-with-lease",
            "Node",
            "v1",
            {
                "matchExpressions": [
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {
                        "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                        "operator": "In",
                        "values": ["True"],
                    },
                ]
            },
            nxt={"statusTemplate": NODE_STATUS},
            delay_ms=600000,
        ),
        _stage(
            "pod-image-pull-failed",
            "Pod",
            "v1",
            # kwok 0.8's CEL knows v1.Container but not v1.ContainerStatus ("unexpected failed
            # resolution"), so the status part is a jq expression: not yet in back-off.
            {
                "matchExpressions": [
                    *_cel(
                        "!has(self.metadata.deletionTimestamp)",
                        "self.status.phase == 'Pending'",
                        "has(self.spec.nodeName)",
                        missing,
                    )["matchExpressions"],
                    {
                        "key": ".status.containerStatuses.[].state.waiting.reason",
                        "operator": "NotIn",
                        "values": ["ImagePullBackOff"],
                    },
                ]
            },
            nxt={
                "statusTemplate": POD_IMAGE_PULL,
                "event": {
                    "type": "Warning",
                    "reason": "Failed",
                    "message": "Failed to pull image: not found",
                },
            },
            weight=10000,
            delay_ms=500,
        ),
        _stage(
            "pod-ready",
            "Pod",
            "v1",
            _cel(
                "!has(self.metadata.deletionTimestamp)",
                "self.status.phase == 'Pending'",
                "has(self.spec.nodeName)",
                f"!({missing})",
                f"has(self.metadata.annotations) && '{ROOT_READY}' in self.metadata.annotations"
                f" && '{POD_IP}' in self.metadata.annotations",
            ),
            nxt={"statusTemplate": POD_RUNNING},
        ),
        _stage(
            "pod-ready-scale",
            "Pod",
            "v1",
            _cel(
                "!has(self.metadata.deletionTimestamp)",
                "self.status.phase == 'Pending'",
                "has(self.spec.nodeName)",
                f"self.spec.nodeName.startsWith('{SCALE_NODE_PREFIX}')",
                f"!({missing})",
                # its own Exec written (podroots.py), so no exec lands in another's folder
                f"has(self.metadata.annotations) && '{ROOT_READY}' in self.metadata.annotations",
            ),
            nxt={"statusTemplate": POD_RUNNING_SCALE},
        ),
        _stage(
            "pod-delete",
            "Pod",
            "v1",
            {"matchExpressions": [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}]},
            nxt={"delete": True},
            # at the deletionTimestamp (delete time + the pod's grace period), as a kubelet
            # reports the containers stopped; the pod-root controller (podroots.py) ends
            # it sooner, at the tier's cap
            delay_from=".metadata.deletionTimestamp",
        ),
        _stage(
            "pvc-provision",
            "PersistentVolumeClaim",
            "v1",
            _cel(
                f"has(self.spec.storageClassName) && self.spec.storageClassName in {classes}",
                "!has(self.metadata.deletionTimestamp)",
                "!has(self.spec.volumeName)",
                "!has(self.status.phase) || self.status.phase != 'Bound'",
            ),
            steps=[
                {"apply": {"template": PV_TEMPLATE}},
                {"patch": {"root": "metadata", "template": PVC_BIND_ANNOTATIONS}},
                {"patch": {"root": "spec", "template": "volumeName: pvc-{{ .metadata.uid }}\n"}},
                {"patch": {"root": "status", "subresource": "status", "template": PVC_BOUND}},
            ],
        ),
        _stage(
            "pv-bind",
            "PersistentVolume",
            "v1",
            _cel(
                f"self.spec.storageClassName in {classes}",
                "!has(self.metadata.deletionTimestamp)",
                "has(self.spec.claimRef.name)",
                "!has(self.status.phase) || !(self.status.phase in ['Bound', 'Released', 'Failed'])",
            ),
            steps=[
                {"patch": {"root": "status", "subresource": "status", "template": "phase: Bound\n"}}
            ],
        ),
        _stage(
            "pv-delete",
            "PersistentVolume",
            "v1",
            _cel(
                f"self.spec.storageClassName in {classes}",
                "!has(self.metadata.deletionTimestamp)",
                "self.spec.persistentVolumeReclaimPolicy == 'Delete'",
                "has(self.status.phase) && self.status.phase == 'Released'",
            ),
            steps=[{"delete": True}],
        ),
    ]


PV_TEMPLATE = """apiVersion: v1
kind: PersistentVolume
metadata:
  name: pvc-{{ .metadata.uid }}
  annotations:
    pv.kubernetes.io/provisioned-by: PROVISIONER
spec:
  accessModes:
  {{ YAML .spec.accessModes 2 }}
  capacity:
  {{ YAML .spec.resources.requests 2 }}
  persistentVolumeReclaimPolicy: Delete
  storageClassName: {{ .spec.storageClassName | Quote }}
  volumeMode: {{ default "Filesystem" .spec.volumeMode | Quote }}
  claimRef:
    apiVersion: v1
    kind: PersistentVolumeClaim
    name: {{ .metadata.name | Quote }}
    namespace: {{ .metadata.namespace | Quote }}
    resourceVersion: {{ .metadata.resourceVersion | Quote }}
    uid: {{ .metadata.uid | Quote }}
  hostPath:
    path: /kube-tier/volumes/pvc-{{ .metadata.uid }}
    type: DirectoryOrCreate
""".replace("PROVISIONER", PROVISIONER)

PVC_BIND_ANNOTATIONS = """annotations:
  pv.kubernetes.io/bind-completed: "yes"
  pv.kubernetes.io/bound-by-controller: "yes"
  volume.kubernetes.io/storage-provisioner: PROVISIONER
""".replace("PROVISIONER", PROVISIONER)

PVC_BOUND = """phase: Bound
accessModes:
{{ YAML .spec.accessModes 1 }}
capacity:
{{ YAML .spec.resources.requests 1 }}
"""


def kwok_config(missing_images: list[str], extra: list[Obj] | None = None) -> str:
    """kwok's --config: the stages (and ``extra``: the scale nodes' ClusterExec) as a YAML
    stream (JSON documents are YAML)."""
    docs = [*stages(missing_images), *(extra or [])]
    return "\n---\n".join(json.dumps(s) for s in docs) + "\n"
