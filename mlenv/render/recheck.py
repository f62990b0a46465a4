"""Re-checks on a schedule on Kubernetes/OpenShift: a CronJob and its identity.

With ``acceptance.schedule`` set, the plan gains four namespaced objects, all named
:data:`RECHECK` (``ml-dev-env-recheck``):

- a ServiceAccount, whose token only the CronJob's pod mounts;
- a Role allowing ``get`` on ``pods`` and ``create`` on ``pods/exec``, both restricted by
  ``resourceNames`` to pod-0 of this deployment's StatefulSet: the launcher runs there and
  reaches the other pods itself (ssh, or the rendezvous), so exec into any other pod would
  be a right the job never uses;
- a RoleBinding of that Role to that ServiceAccount;
- a CronJob (``concurrencyPolicy: Forbid``) whose small pod runs the client's ``exec``
  into pod-0's worker container, starting the pod launcher exactly as ``mlenv launch``
  does (``python -m mlenv.pod launch --profile P``). The GPUs belong to the StatefulSet's
  pods, so this pod asks for none.

Built as dicts in Python, like the StatefulSet: the argv and the platform variants are
logic, and no value is ever spliced into text. No cluster-scoped object and never a
PriorityClass: one named in the config (``acceptance.priority_class``) is only referred to.
docs/security.md says what the ServiceAccount can do; docs/acceptance.md how runs are fetched.

The re-check of a quarantined node (``mlenv recheck RUN``, :func:`node_pod`) is a lone Pod
pinned to that node by name and tolerating our quarantine taint and no other: the
workers never tolerate it (a quarantined node takes no ordinary pod), so without this Pod
no later run could measure the node and ``release --after`` would have no evidence.
"""

from __future__ import annotations

import hashlib
from typing import Any

from mlenv import argv
from mlenv.config.model import Cluster
from mlenv.contract import HEALTH_FAIL, LABEL_HEALTH, TAINT_EFFECT, push_url
from mlenv.render import names
from mlenv.render.validate import K8S_VERSION
from mlenv.render.workload import default_pull_policy

RECHECK = names.RECHECK
COMPONENT = "recheck"
# The CronJob's pods carry their own app name, not ``ml-dev-env``: the NetworkPolicy that
# admits this deployment's pods to each other's sshd, rendezvous and NCCL ports selects
# name ml-dev-env + instance, and this pod talks to the API server only. It must be
# neither admitted there nor read as a namespace neighbour's pod under our labels (status,
# deploy and teardown name such pods).
RECHECK_APP = names.RECHECK
WORKER_CONTAINER = "worker"  # the StatefulSet's one container (mlenv.render.workload)
# The pod launcher, as ``mlenv launch`` starts it (mlenv.platforms.kube.pod_argv; a test
# keeps the two equal).
POD_LAUNCH = ["python", "-m", "mlenv.pod", "launch"]

# The client image each platform's CronJob runs by default. OpenShift: the ``cli``
# ImageStream in the ``openshift`` namespace, which every cluster has and keeps at the
# cluster's own ``oc`` (the integrated registry serves it to pods of any namespace).
# Plain Kubernetes: the project's own kubectl image, pinned to the Kubernetes version the
# manifests are validated against (kubectl supports a server one minor away either side;
# set acceptance.runner_image to your server's). Neither has a shell: the command is an argv.
OPENSHIFT_CLI_IMAGE = "image-registry.openshift-image-registry.svc:5000/openshift/cli:latest"
KUBECTL_IMAGE = f"registry.k8s.io/kubectl:v{K8S_VERSION}"
# registry.k8s.io/kubectl is distroless: its image user may be root, which runAsNonRoot
# refuses to start. distroless's ``nonroot`` user (65532) needs nothing from the image.
# OpenShift's restricted-v2 SCC assigns a UID from the namespace's range instead, and a
# fixed one outside it would be refused there.
NONROOT_UID = 65532

# activeDeadlineSeconds of a run: the profile's per-check deadline (quick 120 s, full
# 900 s; mlenv/acceptance/core/profiles.py) over every shipped check, plus the launcher's
# peer preflight, rounded up. A run past it is hung, not slow: the Job is stopped, and
# Forbid then lets the next schedule start.
PROFILE_BOUND_S = {"quick": 3600, "full": 6 * 3600}
# A schedule missed by more than this (controller down, the previous run still going
# under Forbid) is skipped, not started late; without it a CronJob that missed more
# than 100 schedules stops scheduling at all.
STARTING_DEADLINE_S = 3600
HISTORY_LIMIT = 3  # finished Jobs (and their pods' logs) kept, each outcome
# The pod only waits on the exec stream; the launcher's work runs in pod-0.
REQUESTS = {"cpu": "10m", "memory": "32Mi"}
LIMITS = {"cpu": "200m", "memory": "128Mi"}


def enabled(cluster: Cluster) -> bool:
    """True when the config asks for scheduled re-checks on a Kubernetes platform."""
    return bool(cluster.recheck.schedule) and cluster.platform in ("openshift", "kubernetes")


def client_binary(cluster: Cluster) -> str:
    """``oc`` on OpenShift (the cli image's client), ``kubectl`` elsewhere."""
    return "oc" if cluster.platform == "openshift" else "kubectl"


def runner_image(cluster: Cluster) -> str:
    """``acceptance.runner_image``, else the platform's client image (docs/deploy.md)."""
    if cluster.recheck.runner_image:
        return cluster.recheck.runner_image
    return OPENSHIFT_CLI_IMAGE if cluster.platform == "openshift" else KUBECTL_IMAGE


def command(cluster: Cluster) -> list[str]:
    """The CronJob container's argv: ``CLIENT exec --namespace=NS --container=worker
    ml-dev-env-0 -- python -m mlenv.pod launch --profile P``. No shell; the namespace is
    validated before it becomes a flag value, the pod name stands before the ``--``.

    With ``acceptance.metrics.push`` the suite gets ``--push-metrics URL`` after the
    launcher's ``--`` (the suite's own flags): rank 0 pushes the run's series from pod-0
    once the run is recorded, the in-pod ``mlenv metrics RUN --push URL``."""
    ns = argv.name("Namespace", cluster.namespace)
    options = [f"--namespace={ns}", f"--container={WORKER_CONTAINER}"]
    launch = [*POD_LAUNCH, "--profile", cluster.recheck.profile]
    if cluster.recheck.metrics_push:
        launch += ["--", "--push-metrics", push_url(cluster.recheck.metrics_push)]
    return [
        client_binary(cluster),
        *argv.kube_exec(names.workload(cluster).pod_name(0), launch, options),
    ]


def pod_labels(cluster: Cluster) -> dict[str, str]:
    """The CronJob pods' labels (see :data:`RECHECK_APP` for why not ``ml-dev-env``'s)."""
    return {
        names.LABEL_NAME: RECHECK_APP,
        names.LABEL_INSTANCE: cluster.name,
        names.LABEL_COMPONENT: COMPONENT,
        names.LABEL_PART_OF: names.APP,
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
    }


def _meta(cluster: Cluster) -> dict[str, Any]:
    return {
        "name": RECHECK,
        "namespace": cluster.namespace,
        "labels": names.labels(cluster, COMPONENT),
    }


def service_account(cluster: Cluster) -> dict[str, Any]:
    """The CronJob's own identity (never the workers' service account, which may hold an SCC)."""
    # the token is mounted by the one pod that needs it (the CronJob's, explicitly)
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(cluster),
        "automountServiceAccountToken": False,
    }


def role(cluster: Cluster) -> dict[str, Any]:
    """exec into pod-0 and read it (kubectl/oc exec gets the pod first), nothing else."""
    pod0 = [names.workload(cluster).pod_name(0)]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(cluster),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "resourceNames": pod0, "verbs": ["get"]},
            {
                "apiGroups": [""],
                "resources": ["pods/exec"],
                "resourceNames": pod0,
                "verbs": ["create"],
            },
        ],
    }


def role_binding(cluster: Cluster) -> dict[str, Any]:
    """:func:`role` to :func:`service_account`, in this namespace only."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(cluster),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RECHECK},
        "subjects": [{"kind": "ServiceAccount", "name": RECHECK, "namespace": cluster.namespace}],
    }


def _pod_spec(cluster: Cluster) -> dict[str, Any]:
    image = runner_image(cluster)
    pod_security: dict[str, Any] = {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if cluster.platform != "openshift":
        pod_security.update(runAsUser=NONROOT_UID, runAsGroup=NONROOT_UID)
    container = {
        "name": COMPONENT,
        "image": image,
        # a pinned tag or digest is pulled once; the cli ImageStream's ``latest`` follows
        # the cluster's upgrades, so it is pulled each time
        "imagePullPolicy": default_pull_policy(image),
        "command": command(cluster),
        # the client's discovery cache goes under $HOME; the image's may not be writable
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": {"requests": dict(REQUESTS), "limits": dict(LIMITS)},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    spec: dict[str, Any] = {
        "serviceAccountName": RECHECK,
        # the one pod of this deployment that talks to the API server: it alone mounts a token
        "automountServiceAccountToken": True,
        "restartPolicy": "Never",
        "securityContext": pod_security,
        "containers": [container],
    }
    if cluster.recheck.priority_class:
        spec["priorityClassName"] = cluster.recheck.priority_class
    return spec


def cron_job(cluster: Cluster) -> dict[str, Any]:
    """The CronJob running ``acceptance.profile`` on ``acceptance.schedule`` through pod-0."""
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _meta(cluster),
        "spec": {
            "schedule": cluster.recheck.schedule,
            "concurrencyPolicy": "Forbid",  # two suites at once would measure each other
            "startingDeadlineSeconds": STARTING_DEADLINE_S,
            "successfulJobsHistoryLimit": HISTORY_LIMIT,
            "failedJobsHistoryLimit": HISTORY_LIMIT,
            "jobTemplate": {
                "metadata": {"labels": pod_labels(cluster)},
                "spec": {
                    # a failed run is a finding for the history, not something to retry
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": PROFILE_BOUND_S[cluster.recheck.profile],
                    "template": {
                        "metadata": {"labels": pod_labels(cluster)},
                        "spec": _pod_spec(cluster),
                    },
                },
            },
        },
    }


def manifests(cluster: Cluster) -> list[dict[str, Any]]:
    """The four objects, or none without a schedule (or off Kubernetes)."""
    if not enabled(cluster):
        return []
    return [service_account(cluster), role(cluster), role_binding(cluster), cron_job(cluster)]


# --- the re-check Pod on a quarantined node (``mlenv recheck RUN``) ----------------------

NODE_COMPONENT = "recheck-node"
# Where the suite run through exec writes its report folder and history in that Pod: the
# container's own filesystem, gone with the Pod once ``mlenv recheck`` has copied it home.
NODE_DIR = "/tmp/mlenv-recheck"
# The workers' variables that describe the StatefulSet's world (its pods, their count, the
# rendezvous at pod-0, the racks): the lone Pod is a world of one node, rank 0, with its
# rendezvous on itself; the pod launcher (``run-torchrun``) reads these as in a worker.
WORLD_ENV = {
    "MLENV_POD_INDEX": "0",
    "MLENV_NNODES": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MLENV_HISTORY_DIR": f"{NODE_DIR}/history",  # no workspace volume here
}
DROPPED_ENV = frozenset({"MLENV_TOPOLOGY", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})
# What the re-check asks of the node: CPU, memory and its GPUs (RDMA devices and their
# Multus networks belong to the fabric checks of a multi-node run, not to one node).
NODE_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
NODE_ANNOTATION = "ml-dev-env.io/recheck-node"
GRACE_S = 5


def quarantine_toleration() -> dict[str, str]:
    """The toleration of exactly our taint (key, value and effect, operator ``Equal``):
    the re-check Pod reaches the node we quarantined, and no node someone else tainted."""
    return {"key": LABEL_HEALTH, "operator": "Equal", "value": HEALTH_FAIL, "effect": TAINT_EFFECT}


def tolerates_quarantine(tolerations: object) -> bool:
    """Whether a pod with ``tolerations`` (a pod spec's list) is scheduled despite our
    taint, by Kubernetes' matching rule: the effect empty or ours, and either ``Exists``
    with the key empty or ours, or ``Equal`` (the default) with our key and value."""
    for t in tolerations if isinstance(tolerations, list) else []:
        if not isinstance(t, dict) or t.get("effect") not in (None, "", TAINT_EFFECT):
            continue
        key = t.get("key") or ""
        if t.get("operator") == "Exists":
            if key in ("", LABEL_HEALTH):
                return True
        elif key == LABEL_HEALTH and (t.get("value") or "") == HEALTH_FAIL:
            return True
    return False


def node_pod_name(node: str) -> str:
    """``ml-dev-env-recheck-node-<10 hex>``, one name per node (a hash: a Node name may be
    253 characters): a second re-check of the same node finds the first one's Pod."""
    return f"{RECHECK}-node-{hashlib.sha256(node.encode()).hexdigest()[:10]}"


def node_pod(
    cluster: Cluster, node: str, template: dict[str, Any], *, profile: str
) -> dict[str, Any]:
    """The re-check Pod for ``node``, from the workers' pod ``template`` (the live
    StatefulSet's, so the node is measured with the image and environment the workers
    run): pinned to the node by name (required node affinity on ``metadata.name``, so the
    scheduler still checks taints and resources, which ``nodeName`` would skip), tolerating
    our taint exactly and whatever else the workers tolerate, never anything tolerating
    our taint more broadly. Its container only holds the node (``sleep``) until the
    profile's bound: ``mlenv recheck`` runs the suite in it through exec."""
    spec = template.get("spec") or {}
    containers = spec.get("containers") or [{}]
    worker = next((c for c in containers if c.get("name") == WORKER_CONTAINER), containers[0])
    bound = PROFILE_BOUND_S[profile]
    resources = {
        part: {
            k: v
            for k, v in (worker.get("resources") or {}).get(part, {}).items()
            if k in NODE_RESOURCES
        }
        for part in ("requests", "limits")
    }
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": worker.get("image") or names.default_image(cluster),
        "command": ["sleep", str(bound)],
        "env": [
            *(
                e
                for e in worker.get("env") or []
                if e.get("name") not in WORLD_ENV and e.get("name") not in DROPPED_ENV
            ),
            *({"name": k, "value": v} for k, v in WORLD_ENV.items()),
        ],
        "resources": {part: rl for part, rl in resources.items() if rl},
        "volumeMounts": [{"name": "dshm", "mountPath": names.SHM_DIR}],
    }
    for key in ("imagePullPolicy", "securityContext"):
        if worker.get(key) is not None:
            container[key] = worker[key]
    dshm = [v for v in spec.get("volumes") or [] if v.get("name") == "dshm"]
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",  # a failed re-check is a finding, not something to retry
        "activeDeadlineSeconds": bound,
        # its container only sleeps (PID 1 ignores SIGTERM): nothing to flush, and the next
        # re-check of this node waits for the name to be free
        "terminationGracePeriodSeconds": GRACE_S,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [
            *(t for t in spec.get("tolerations") or [] if not tolerates_quarantine([t])),
            quarantine_toleration(),
        ],
        "containers": [container],
        "volumes": dshm or [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    for key in ("serviceAccountName", "securityContext", "priorityClassName"):
        if spec.get(key) is not None:
            pod_spec[key] = spec[key]
    labels = {**pod_labels(cluster), names.LABEL_COMPONENT: NODE_COMPONENT}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": node_pod_name(node),
            "namespace": cluster.namespace,
            "labels": labels,
            "annotations": {NODE_ANNOTATION: node},
        },
        "spec": pod_spec,
    }


def node_suite_argv(run_id: str, *, profile: str, suite_args: list[str]) -> list[str]:
    """What ``mlenv recheck`` runs in the re-check Pod through exec: the pod launcher's
    ssh-less path (``python -m mlenv.pod run-torchrun``), as ``mlenv launch --torchrun``
    runs it in a worker, in a world of one node (:data:`WORLD_ENV`): as many ranks as a
    worker runs there, this pod's one-suite-at-a-time lock, the report folder
    ``NODE_DIR/<run-id>/``; ``suite_args`` (after ``--`` on the command line) go to the
    suite as ``mlenv launch``'s do."""
    return [
        "python",
        "-m",
        "mlenv.pod",
        "run-torchrun",
        "--run-id",
        run_id,
        "--report-dir",
        f"{NODE_DIR}/{run_id}",
        "--profile",
        profile,
        *(["--", *suite_args] if suite_args else []),
    ]
