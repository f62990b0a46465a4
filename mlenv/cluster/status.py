"""``status``: read what one deployment owns (pods, readiness, PVCs, RDMA interfaces)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlenv.cluster.api import ClusterClient, Manifest, PodView, instance_selector
from mlenv.cluster.pool import bounded_map
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.errors import InfraError, InputError
from mlenv.render.names import workload


@dataclass
class StatusReport:
    """Pods, workload readiness and PVCs of one deployment."""

    name: str = ""  # the workload object's
    pods: list[PodView] = field(default_factory=list)
    desired: int = 0
    ready: int = 0
    pvcs: list[tuple[str, str, str]] = field(default_factory=list)  # name, phase, size
    # pod → one line on its RDMA interfaces (from <state>/interfaces.json)
    interfaces: dict[str, str] = field(default_factory=dict)
    # pods that carry this instance's labels but are not its own (ignored, named)
    neighbours: list[str] = field(default_factory=list)


# Runs in a pod with the pod's own environment: the same state-dir rule pod init wrote by.
READ_INTERFACES = (
    "import os; from mlenv.pod.runtime import paths_from; "
    "p = os.path.join(paths_from(os.environ).state_dir, 'interfaces.json'); "
    "print(open(p).read() if os.path.exists(p) else '')"
)
# How it runs: from /, not the exec's working directory, the image's WORKDIR /workspace,
# which ``python3 -c`` puts first on sys.path: a user's own ``mlenv/`` folder synced there
# was imported instead of the image's package. (``-I`` would also drop the PYTHONPATH the
# image may find its package by.)
READ_ARGV = ("sh", "-c", 'cd / && exec python3 -c "$1"', "sh", READ_INTERFACES)


def _interface_line(doc: dict[str, object]) -> str:
    parts = []
    checks = doc.get("checks")
    for chk in checks if isinstance(checks, list) else []:
        if not isinstance(chk, dict):
            continue
        missing = chk.get("missing") or []
        parts.append(
            f"{chk.get('variable')}: present {','.join(chk.get('present') or []) or '-'}"
            + (f", MISSING {','.join(missing)}" if missing else "")
        )
    return "; ".join(parts) or "no interface checks recorded"


def _interfaces(cfg: ClusterConfig, client: ClusterClient, pods: list[PodView]) -> dict[str, str]:
    """What each Running pod's init found of the configured RDMA interfaces; pods that
    cannot be asked (exec refused, older image) are left out, never an error. The pods
    are asked through the bounded pool (one after another took 116 s at 512 pods)."""
    import json as _json

    def ask(p: PodView) -> tuple[str, str | None]:
        try:
            res = client.exec(p.name, cfg.namespace, list(READ_ARGV), check=False, timeout=15)
        except (InfraError, InputError):
            return p.name, None
        text = res.stdout.strip()
        if res.returncode != 0 or not text:
            return p.name, None
        try:
            doc = _json.loads(text)
        except ValueError:
            return p.name, None
        return p.name, _interface_line(doc) if isinstance(doc, dict) else None

    running = [p for p in pods if p.phase == "Running"]
    return {name: line for name, line in bounded_map(ask, running) if line is not None}


def _tcp_deployed(pods: list[Manifest]) -> bool:
    """Whether the pods run with RDMA off (``NCCL_IB_DISABLE=1``: a TCP deploy of an RDMA
    config, or its fallback): then pod init checked no RDMA interface to read back."""
    for p in pods:
        for c in (p.get("spec") or {}).get("containers") or []:
            for e in c.get("env") or []:
                if e.get("name") == "NCCL_IB_DISABLE":
                    return str(e.get("value")) == "1"
    return False


def status(cfg: ClusterConfig, client: ClusterClient) -> StatusReport:
    """Read the deployment's state."""
    sel = instance_selector(cfg.name)
    rep = StatusReport()
    wl = workload(cfg)
    rep.name = wl.name
    # the workload's own pods (ownerReference uid, ranks) and the dev Pod deploy
    # made under its fixed name; any other pod with our labels is a neighbour's. The
    # workload object is the one the split read (one read, not two): an object of that
    # name that is not this instance's counts as none, as its pods are no workers.
    from mlenv.cluster.pods import split_pods

    # the workload object, its pods and the claims in one read
    listed = client.list_many([wl.kind, "Pod", "PersistentVolumeClaim"], cfg.namespace, sel)
    split = split_pods(cfg, client, listed)
    if split.live is not None:
        rep.desired = wl.desired(split.live)
        rep.ready = wl.ready(split.live)
    rep.pods = [PodView.of(p) for p in split.workers + split.leaving + split.dev]
    rep.neighbours = sorted(str(p["metadata"]["name"]) for p in split.neighbours)
    for pvc in listed["PersistentVolumeClaim"]:
        size = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
            "storage", ""
        )
        rep.pvcs.append(
            (pvc["metadata"]["name"], str((pvc.get("status") or {}).get("phase", "")), str(size))
        )
    if cfg.rdma.enabled and not _tcp_deployed(split.workers):
        rep.interfaces = _interfaces(cfg, client, rep.pods)
    return rep
