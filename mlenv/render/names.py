"""Fixed object names, labels and in-pod paths of a deployment (docs/contracts.md).

Names are not configurable: one deployment per namespace keeps DNS names, hostfiles
and teardown selectors simple; the ``app.kubernetes.io/instance`` label carries the
cluster. Readers elsewhere (cluster layer, pod runtime docs) use the same values.
"""

from __future__ import annotations

from mlenv.config.model import Cluster

# Re-exported (``X as X``) so the render layer keeps importing them from here.
from mlenv.contract import ANNOTATION_CREATED as ANNOTATION_CREATED
from mlenv.contract import APP as APP
from mlenv.contract import BUILD_CONFIG as BUILD_CONFIG
from mlenv.contract import HEADLESS_SERVICE as HEADLESS_SERVICE
from mlenv.contract import IMAGE_STREAM as IMAGE_STREAM
from mlenv.contract import LABEL_COMPONENT as LABEL_COMPONENT
from mlenv.contract import LABEL_INSTANCE as LABEL_INSTANCE
from mlenv.contract import LABEL_MANAGED_BY as LABEL_MANAGED_BY
from mlenv.contract import LABEL_NAME as LABEL_NAME
from mlenv.contract import LABEL_NAMESPACE as LABEL_NAMESPACE
from mlenv.contract import LABEL_PART_OF as LABEL_PART_OF
from mlenv.contract import LABEL_POOL_PREFIX as LABEL_POOL_PREFIX
from mlenv.contract import MANAGED_BY as MANAGED_BY
from mlenv.workload import Workload, workload_for

SSH_SECRET = "ml-dev-env-ssh"
DEVTOOLS_SECRET = "ml-dev-env-devtools"  # created by `mlenv deploy`, never rendered
DEV_POD = "ml-dev-env-dev"
DEV_WORKSPACE_PVC = "ml-dev-env-dev-workspace"  # dev Pod's own RWO claim in per-pod mode
WORKSPACE_PVC = "ml-dev-env-workspace"
DATASETS_PVC = "ml-dev-env-datasets"
SCC_ROLEBINDING = "ml-dev-env-scc"
NETWORK_POLICY_INSTANCE = "ml-dev-env-instance"  # the instance's pods reach each other
NETWORK_POLICY_DEVTOOLS = "ml-dev-env-devtools"  # the router reaches the exposed dev tools
# the scheduled re-check's ServiceAccount, Role, RoleBinding and CronJob, and the
# app name its pods carry (mlenv.render.recheck)
RECHECK = "ml-dev-env-recheck"

WORKSPACE_DIR = "/workspace"
DATASETS_DIR = "/datasets"
SSH_DIR = "/etc/mlenv/ssh"
SHM_DIR = "/dev/shm"
POD_INIT = "/opt/ml-dev-env/scripts/pod-init.sh"

# Annotation keys carrying free text from the config (description, notes) so a reviewer
# sees them on the objects; they are also what the injection tests push hostile text into.
ANNOTATION_DESCRIPTION = "ml-dev-env.io/description"
ANNOTATION_NOTES = "ml-dev-env.io/notes"


def scc_name(cluster: Cluster) -> str:
    """The RDMA-mode SCC: cluster-scoped, so namespace and cluster name keep it unique
    (a namespace label is at most 63 characters, a cluster name too: 143 at most)."""
    return f"ml-dev-env-{cluster.namespace}-{cluster.name}-rdma"


def scc_role_name(cluster: Cluster) -> str:
    """The ClusterRole granting ``use`` on :func:`scc_name`."""
    return f"{scc_name(cluster)}-use"


def default_image(cluster: Cluster) -> str:
    """Image the pods run: ``image.ref`` or the ImageStream tag the BuildConfig pushes."""
    if cluster.image.ref:
        return cluster.image.ref
    return f"image-registry.openshift-image-registry.svc:5000/{cluster.namespace}/{IMAGE_STREAM}:latest"


def workload(cluster: Cluster) -> Workload:
    """The object that runs ``cluster``'s worker pods: the one place a config chooses it
    (every kind today is the StatefulSet; docs/architecture.md, "The Workload seam")."""
    return workload_for()


def master_addr(cluster: Cluster) -> str:
    """DNS name of pod 0 through the headless Service (the rendezvous host)."""
    return workload(cluster).pod_dns(0, HEADLESS_SERVICE, cluster.namespace)


def pool_label(cluster: Cluster) -> tuple[str, str]:
    """``(key, value)`` of the Node label that pins the pods with ``nodes.pin_by: label``:
    ``pool.ml-dev-env.io/<namespace>``, ``<cluster.name>`` (both DNS-1123 labels, so the
    key's name part and the value fit a label's 63 characters)."""
    return f"{LABEL_POOL_PREFIX}{cluster.namespace}", cluster.name


def pool_selector(cluster: Cluster) -> str:
    """The pool label as ``key=value``: what the messages name and ``-l`` selects."""
    return "=".join(pool_label(cluster))


def pinned_by_label(cluster: Cluster) -> bool:
    """Whether the pods select the pool label deploy puts on ``nodes.gpu_nodes``
    (``nodes.pin_by: label``) instead of a node affinity naming each of them."""
    return bool(cluster.gpu_nodes) and cluster.pin_by == "label" and cluster.traits.kubernetes


def selector_labels(cluster: Cluster, component: str) -> dict[str, str]:
    """The immutable subset used in selectors (the workload, Services)."""
    return {
        LABEL_NAME: APP,
        LABEL_INSTANCE: cluster.name,
        LABEL_COMPONENT: component,
    }


# Upstream ml-dev-env's pods carried app=ml-dev-env-multi, and `oc get pods -l
# app=ml-dev-env-multi` is in its users' fingers and scripts: the workers carry it too
# (never in a selector: the app.kubernetes.io/* ones are ours).
UPSTREAM_POD_LABEL = ("app", "ml-dev-env-multi")


def labels(cluster: Cluster, component: str) -> dict[str, str]:
    """The ``app.kubernetes.io/*`` labels every rendered object carries."""
    return {
        **selector_labels(cluster, component),
        LABEL_PART_OF: APP,
        LABEL_MANAGED_BY: MANAGED_BY,
    }
