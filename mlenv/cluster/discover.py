"""``mlenv discover``: a starting ``clusters/<name>.yaml`` read from a live cluster.

Successor of upstream ml-dev-env's ``discover_cluster.py``: it reads what the API server
already knows (GPU nodes and the GPU operator's product labels, RDMA device-plugin
resources in node allocatable, Multus NetworkAttachmentDefinitions, StorageClasses) and
writes a config that ``mlenv validate`` accepts. What the API cannot say (HCA names,
interface names inside the pods) is left as ``devices: auto`` / no interfaces, with a
comment, so nothing guessed is presented as a fact.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mlenv.cluster.api import ClusterClient
from mlenv.cluster.preflight import node_ready

GPU = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
DEFAULT_CLASS_ANN = "storageclass.kubernetes.io/is-default-class"
# Extended resources that RDMA device plugins advertise (NVIDIA network operator's
# rdma shared device plugin, SR-IOV network device plugin on OpenShift).
RDMA_RESOURCE = re.compile(r"^(rdma/|openshift\.io/|nvidia\.com/(rdma|hostdev|sriov))")
# Provisioners that give ReadWriteMany (file storage): the rwx storage mode needs one.
RWX_PROVISIONER = re.compile(
    r"cephfs|nfs|efs|azurefile|filestore|gluster|spectrumscale|weka|lustre", re.IGNORECASE
)


@dataclass
class Discovered:
    """What the API server told us; ``to_yaml`` turns it into a config."""

    name: str
    namespace: str
    api: str
    gpu_nodes: list[str] = field(default_factory=list)
    gpus_per_node: int = 0
    gpu_product: str = ""
    rdma_resources: dict[str, int] = field(default_factory=dict)
    networks: list[str] = field(default_factory=list)
    default_class: str = ""
    rwx_class: str = ""
    notes: list[str] = field(default_factory=list)
    # Answers of `mlenv wizard`; left as they are, `discover` decides alone.
    use_rdma: bool | None = None  # None: RDMA when a device-plugin resource was found
    default_nodes: int | None = None  # None: up to 2 of the GPU nodes found
    dev_tools: list[str] = field(default_factory=list)  # vscode, jupyter, tensorboard

    @property
    def rdma_found(self) -> bool:
        """True when some GPU node advertises an RDMA device-plugin resource."""
        return bool(self.rdma_resources)

    @property
    def nodes_default(self) -> int:
        """The pod count a config gets unless asked otherwise."""
        return max(min(len(self.gpu_nodes), 2), 1)


def _int(v: object) -> int:
    try:
        return int(str(v))
    except ValueError:
        return 0


def discover(client: ClusterClient, name: str, namespace: str) -> Discovered:
    """Read nodes, NetworkAttachmentDefinitions and StorageClasses through ``client``."""
    d = Discovered(name=name, namespace=namespace, api=client.server().removeprefix("https://"))
    counts: list[int] = []
    products: set[str] = set()
    for node in client.list("Node", None):
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        alloc = (node.get("status") or {}).get("allocatable") or {}
        n = _int(alloc.get(GPU, 0)) or _int(labels.get(COUNT_LABEL, 0))
        if n <= 0:
            continue
        if not node_ready(node):
            d.notes.append(f"GPU node {meta.get('name')} is not Ready: left out")
            continue
        d.gpu_nodes.append(str(meta.get("name")))
        counts.append(n)
        if labels.get(PRODUCT_LABEL):
            products.add(str(labels[PRODUCT_LABEL]))
        for key, val in alloc.items():
            if RDMA_RESOURCE.match(key) and _int(val) > 0:
                d.rdma_resources[key] = 1
    d.gpu_nodes.sort()
    if counts:
        d.gpus_per_node = min(counts)
        if len(set(counts)) > 1:
            d.notes.append(
                f"GPU nodes differ in GPU count {sorted(set(counts))}: per_node is the smallest"
            )
    d.gpu_product = ", ".join(sorted(products))
    for nad in client.list("NetworkAttachmentDefinition", namespace):
        d.networks.append(f"{namespace}/{nad['metadata']['name']}")
    for sc in client.list("StorageClass", None):
        meta = sc.get("metadata") or {}
        if (meta.get("annotations") or {}).get(DEFAULT_CLASS_ANN) == "true":
            d.default_class = str(meta["name"])
        if not d.rwx_class and RWX_PROVISIONER.search(str(sc.get("provisioner", ""))):
            d.rwx_class = str(meta["name"])
    return d


def _q(s: str) -> str:
    """A YAML double-quoted scalar (names from the API may hold anything)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_yaml(d: Discovered) -> str:
    """The starting config; every value a plain, quoted scalar so it round-trips."""
    rdma = d.rdma_found if d.use_rdma is None else d.use_rdma and d.rdma_found
    lines: list[str] = [
        "# yaml-language-server: $schema=./cluster.schema.json",
        f"# Written by `mlenv discover` from {d.api}: a starting point, review before deploying.",
        "cluster:",
        f"  name: {_q(d.name)}",
        f"  api: {_q(d.api)}",
        f"  namespace: {_q(d.namespace)}",
        f"  description: {_q('discovered: ' + (d.gpu_product or 'no GPU product label'))}",
        "",
        "nodes:",
    ]
    if d.gpu_nodes:
        lines.append("  gpu_nodes:")
        lines += [f"    - {_q(n)}" for n in d.gpu_nodes]
    else:
        lines.append("  gpu_nodes:  # no GPU node found: any node the scheduler picks")
    lines += ["", "storage:"]
    if d.rwx_class:
        lines += ["  mode: rwx", f"  class_rwx: {_q(d.rwx_class)}"]
    else:
        lines.append("  mode: volumeClaimTemplates  # no RWX-capable provisioner found")
    if d.default_class:
        lines.append(f"  class_rwo: {_q(d.default_class)}")
    lines += ["", "network:", "  rdma:", f"    enabled: {'true' if rdma else 'false'}"]
    if rdma:
        lines.append(
            "    devices: auto  # HCA names are not visible through the API: pin them after a test run"
        )
        lines.append("    resources:")
        lines += [f"      {_q(k)}: {v}" for k, v in sorted(d.rdma_resources.items())]
        if d.networks:
            lines.append("    networks:")
            lines += [f"      - {_q(n)}" for n in d.networks]
    lines += ["", "gpus:", f"  per_node: {max(d.gpus_per_node, 1)}"]
    if d.gpu_product:
        lines.append(f"  type: {_q(d.gpu_product)}")
    lines.append(f"  default_nodes: {d.default_nodes or d.nodes_default}")
    if d.dev_tools:
        lines += ["", "dev_tools:"] + [f"  {t}: true" for t in d.dev_tools]
    if d.notes:
        lines += ["", "notes: |"] + [f"  {n}" for n in d.notes]
    return "\n".join(lines) + "\n"


__all__: Sequence[str] = ("Discovered", "discover", "to_yaml")
