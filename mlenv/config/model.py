"""Typed, frozen models of a cluster config, built right after validation.

Renderers and the cluster layer read these, never raw YAML. Every field has a safe
default so a minimal config stays minimal; the defaults live here and in the JSON
Schema (``clusters/cluster.schema.json``) and the two must agree (a unit test checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Mode = Literal["rdma", "tcp"]
StorageMode = Literal["rwx", "volumeClaimTemplates"]
Platform = Literal["openshift", "kubernetes", "slurm", "hosts"]
GpusFlag = Literal["gpus-per-node", "gres", "none"]
ContainerRuntime = Literal["pyxis", "apptainer"]


@dataclass(frozen=True)
class PlatformTraits:
    """What a platform serves, declared once per platform name here, where the names are
    defined. The layers below ``mlenv/platforms/`` (render, cluster, signoff) cannot ask
    the Platform object, so they ask ``cluster.traits`` instead of comparing
    ``cluster.platform`` with a name; the Platform objects carry the same ``traits``."""

    # objects applied to a Kubernetes API, rendered to k8s/<cluster>/<mode>/
    kubernetes: bool = False
    # and OpenShift's own kinds (SCC, ImageStream/BuildConfig, Route), through `oc`
    openshift: bool = False
    # jobs are sbatch scripts queued on Slurm (off Kubernetes without it: ssh and cron)
    sbatch: bool = False
    # off Kubernetes: the folder `mlenv render` writes the scripts to (<folder>/<cluster>/)
    folder: str = ""


PLATFORM_TRAITS: dict[Platform, PlatformTraits] = {
    "openshift": PlatformTraits(kubernetes=True, openshift=True),
    "kubernetes": PlatformTraits(kubernetes=True),
    "slurm": PlatformTraits(sbatch=True, folder="slurm"),
    "hosts": PlatformTraits(folder="hosts"),
}


@dataclass(frozen=True)
class ClusterInfo:
    """``cluster:`` — identity of the target cluster."""

    name: str  # DNS-1123 label; also the app.kubernetes.io/instance label value
    namespace: str = ""  # required on openshift/kubernetes (schema); "" on slurm/hosts
    api: str = (
        ""  # API server host or URL; deploy preflight compares it with `oc whoami --show-server`
    )
    description: str = ""


@dataclass(frozen=True)
class Storage:
    """``storage:`` — shared RWX PVCs, or per-pod volumeClaimTemplates."""

    mode: StorageMode = "volumeClaimTemplates"
    class_rwx: str = ""  # "" = cluster default storage class
    class_rwo: str = ""
    workspace_size: str = "100Gi"
    datasets_size: str = "500Gi"
    # claims that already exist (upstream's ml-dev-workspace / ml-datasets): mounted,
    # never rendered, so a migration keeps its data; "" = create ours
    workspace_claim: str = ""
    datasets_claim: str = ""


@dataclass(frozen=True)
class ExtendedResource:
    """A device-plugin resource requested per pod, e.g. ``rdma/rdma_shared_device_a: 1``."""

    name: str
    count: int = 1


@dataclass(frozen=True)
class Rdma:
    """``network.rdma:`` — InfiniBand / RoCE settings that become NCCL_IB_* variables."""

    enabled: bool = False
    devices: tuple[str, ...] = ()  # HCA names (mlx5_6, …); empty with auto_devices
    auto_devices: bool = False  # `devices: auto`: each pod discovers its own HCAs at init
    interfaces: tuple[str, ...] = ()  # pod interfaces on the RDMA networks (net1, …)
    gid_index: int = 3
    gdr_level: int = 5  # NCCL_NET_GDR_LEVEL
    cross_nic: int = 0  # NCCL_CROSS_NIC
    ib_timeout: int = 22  # NCCL_IB_TIMEOUT
    min_nchannels: int = 0  # NCCL_MIN_NCHANNELS; 0 = leave to NCCL
    resources: tuple[ExtendedResource, ...] = ()  # device-plugin resources per pod
    networks: tuple[str, ...] = ()  # Multus NetworkAttachmentDefinition names ([ns/]name)
    allow_tcp_fallback: bool = True  # deploy may fall back to TCP when RDMA prerequisites miss


@dataclass(frozen=True)
class Tcp:
    """``network.tcp:`` — socket transport settings."""

    interface_exclude: tuple[str, ...] = ("lo", "docker0")  # becomes NCCL_SOCKET_IFNAME=^lo,docker0
    p2p_level: str = "NVL"  # NCCL_P2P_LEVEL


@dataclass(frozen=True)
class Security:
    """``security:`` — service account and the SCC it may use."""

    service_account: str = "ml-dev-sa"
    requires_privileged_scc: bool = False  # only when the config demands it
    ipc_lock: bool = True  # RDMA memory registration needs CAP_IPC_LOCK
    network_policy: bool = True  # render NetworkPolicies
    allow_from_namespaces: tuple[str, ...] = ()  # extra namespaces that may reach dev-tool ports


@dataclass(frozen=True)
class Gpus:
    """``gpus:`` — accelerators per node and the default node count."""

    per_node: int = 8
    type: str = ""  # e.g. "H100-80GB"; picks the acceptance baseline
    default_nodes: int = 2


@dataclass(frozen=True)
class ResourceList:
    """CPU and memory quantities (Kubernetes quantity strings)."""

    cpu: str | None = None
    memory: str | None = None


@dataclass(frozen=True)
class DevPodResources:
    """``resources.dev_pod:`` — each dev Pod container's requests and limits: small by
    default, so a namespace with a compute ResourceQuota (which refuses a container
    without them) admits the dev Pod."""

    requests: ResourceList = field(default_factory=lambda: ResourceList("100m", "256Mi"))
    limits: ResourceList = field(default_factory=lambda: ResourceList("2", "4Gi"))


@dataclass(frozen=True)
class Resources:
    """``resources:`` — container requests and limits besides GPUs/RDMA."""

    requests: ResourceList = field(default_factory=ResourceList)
    limits: ResourceList = field(default_factory=ResourceList)
    dev_pod: DevPodResources = field(default_factory=DevPodResources)


@dataclass(frozen=True)
class Nccl:
    """``nccl:`` — debug level and extra NCCL_* variables passed through verbatim."""

    debug: str = "WARN"
    extra_env: tuple[tuple[str, str], ...] = ()  # sorted (name, value) pairs


@dataclass(frozen=True)
class ImageBuild:
    """``image.build:`` — where the BuildConfig takes the Dockerfile from."""

    git_uri: str = "https://github.com/ml-dev-env/ml-dev-env.git"
    git_ref: str = "main"
    dockerfile_path: str = "Dockerfile"


@dataclass(frozen=True)
class Image:
    """``image:`` — the pod image; by default the ImageStream tag the BuildConfig produces."""

    ref: str = ""  # "" = image-registry.openshift-image-registry.svc:5000/<ns>/ml-dev-env:latest
    pull_policy: str = ""  # "" = derived from the reference (Always for mutable tags)
    build: ImageBuild = field(default_factory=ImageBuild)


@dataclass(frozen=True)
class DevTools:
    """``dev_tools:`` — which authenticated dev services to expose through Routes."""

    vscode: bool = False
    jupyter: bool = False
    tensorboard: bool = False
    auth: str = "oauth-proxy"  # "oauth-proxy" (OpenShift) | "token" (Secret via env, no OAuth)


@dataclass(frozen=True)
class Toleration:
    """One Kubernetes toleration (``scheduling.tolerations`` item)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


@dataclass(frozen=True)
class Scheduling:
    """``scheduling:`` — tolerations and node selector of the GPU pods; None = the GPU defaults."""

    tolerations: tuple[Toleration, ...] | None = None
    node_selector: tuple[tuple[str, str], ...] | None = None  # sorted (label, value) pairs


@dataclass(frozen=True)
class Slurm:
    """``slurm:`` — how ``platform: slurm`` submits (every value is checked, then shell-quoted)."""

    partition: str = ""  # required on platform: slurm
    account: str = ""
    qos: str = ""
    time_limit: str = "01:00:00"
    constraint: str = ""  # a feature or an expression (a100&ib, [r1|r2]); argv.slurm_constraint
    reservation: str = ""
    gpu_type: str = ""  # typed GRES: gpu:TYPE:N; "" = untyped
    sbatch_args: tuple[str, ...] = ()  # allow-listed --option[=value] (argv.sbatch_option)
    exclusive: bool = True
    gpus_flag: GpusFlag = "gpus-per-node"
    # slurm.container (or the flat container_image/container_mounts of earlier configs)
    container_image: str = ""  # "" = the nodes' own Python
    container_mounts: tuple[str, ...] = ()
    container_runtime: ContainerRuntime = "pyxis"  # srun --container-image, or apptainer exec
    container_writable: bool = False  # pyxis --container-writable / apptainer --writable-tmpfs
    container_mount_home: bool = (
        True  # False: pyxis --no-container-mount-home / apptainer --no-home
    )
    container_env: tuple[str, ...] = ()  # pyxis --container-env (variable names)
    container_name: str = ""  # pyxis --container-name (a named container the job reuses)
    shared_dir: str = ""  # required on platform: slurm
    python: str = "python3"
    env: tuple[tuple[str, str], ...] = ()  # allow-listed job variables (FI_*, GLOO_SOCKET_IFNAME)
    master_addr_suffix: str = ""  # appended to the first node's name (JSC: "i", the IB name)
    modules: tuple[str, ...] = ()  # `module load` in the job before its python runs
    import_probe: bool = True  # the preflight's one-node srun import check


@dataclass(frozen=True)
class Hosts:
    """``hosts:`` — plain machines over ssh (``platform: hosts``); ``nodes.gpu_nodes`` lists them."""

    ssh_user: str = ""  # "" = the current user
    ssh_port: int = 22
    ssh_key: str = ""  # "" = ssh's own defaults
    shared_dir: str = ""  # "" = copy workspace/ out and results back over ssh
    python: str = "python3"


@dataclass(frozen=True)
class Recheck:
    """``acceptance:`` — the acceptance suite on a schedule; ``schedule`` "" = none."""

    schedule: str = ""  # cron: five numeric fields or an @shorthand (rules.cron_problem)
    profile: str = "quick"
    priority_class: str = ""  # an existing PriorityClass; "" = none (never created by mlenv)
    runner_image: str = ""  # "" = the platform's client image (render decides)
    metrics_push: str = ""  # acceptance.metrics.push: a Pushgateway URL; "" = no push
    node_events: bool = False  # acceptance.node_events: fetched runs tell their Nodes


@dataclass(frozen=True)
class Cluster:
    """A validated cluster config. ``source`` is the file it came from (None if built in code)."""

    cluster: ClusterInfo
    gpu_nodes: tuple[str, ...] = ()  # nodes.gpu_nodes: pin to these (empty = any GPU node)
    # nodes.pin_by: "name" (a node affinity naming them) or "label" (deploy labels them)
    pin_by: str = "name"
    # nodes.topology: (rack, its nodes) in file order, hostlists expanded on Slurm
    topology: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # nodes.topology_label: the Node label naming each node's rack, read at launch
    topology_label: str = ""
    storage: Storage = field(default_factory=Storage)
    rdma: Rdma = field(default_factory=Rdma)
    tcp: Tcp = field(default_factory=Tcp)
    security: Security = field(default_factory=Security)
    gpus: Gpus = field(default_factory=Gpus)
    resources: Resources = field(default_factory=Resources)
    nccl: Nccl = field(default_factory=Nccl)
    image: Image = field(default_factory=Image)
    shm_size: str = "64Gi"  # /dev/shm size limit (memory-backed emptyDir)
    ssh_port: int = 2222  # launcher sshd port inside pods (non-root can't bind 22)
    master_port: int = 29500
    # whether the config sets master_port: on Slurm an unset one is derived from the job id
    # (two jobs sharing a node would both bind 29500)
    master_port_set: bool = False
    dev_tools: DevTools = field(default_factory=DevTools)
    scheduling: Scheduling = field(default_factory=Scheduling)
    notes: str = ""
    platform: Platform = "openshift"
    slurm: Slurm = field(default_factory=Slurm)
    hosts: Hosts = field(default_factory=Hosts)
    recheck: Recheck = field(default_factory=Recheck)  # the ``acceptance:`` section
    source: Path | None = None

    @property
    def name(self) -> str:
        """The cluster's name (``cluster.name``)."""
        return self.cluster.name

    @property
    def traits(self) -> PlatformTraits:
        """What the config's platform serves (ask this, not ``platform == "…"``)."""
        return PLATFORM_TRAITS[self.platform]

    @property
    def namespace(self) -> str:
        """The namespace everything is deployed into."""
        return self.cluster.namespace

    @property
    def own_mode(self) -> Mode:
        """The mode used when none is asked for: rdma when ``network.rdma.enabled``,
        else tcp."""
        return "rdma" if self.rdma.enabled else "tcp"

    def effective_mode(self, requested: Mode) -> Mode:
        """MODE=rdma on a cluster with ``rdma.enabled: false`` falls back to TCP.

        The caller (validation / CLI) emits the warning; this only decides.
        """
        if requested == "rdma" and not self.rdma.enabled:
            return "tcp"
        return requested
