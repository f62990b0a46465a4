"""``status``: read what one deployment owns (pods, readiness, PVCs, RDMA interfaces)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlenv.cluster.api import ClusterClient, PodView, instance_selector
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
    cannot be asked (exec refused, older image) are left out, never an error."""
    import json as _json

    out: dict[str, str] = {}
    for p in pods:
        if p.phase != "Running":
            continue
        try:
            res = client.exec(
                p.name, cfg.namespace, ["python3", "-c", READ_INTERFACES], check=False, timeout=15
            )
        except (InfraError, InputError):
            continue
        text = res.stdout.strip()
        if res.returncode != 0 or not text:
            continue
        try:
            doc = _json.loads(text)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out[p.name] = _interface_line(doc)
    return out


def status(cfg: ClusterConfig, client: ClusterClient) -> StatusReport:
    """Read the deployment's state."""
    sel = instance_selector(cfg.name)
    rep = StatusReport()
    wl = workload(cfg)
    rep.name = wl.name
    sts = client.get(wl.kind, wl.name, cfg.namespace)
    if sts is not None:
        rep.desired = wl.desired(sts)
        rep.ready = wl.ready(sts)
    # the workload's own pods (ownerReference uid, ranks) and the dev Pod deploy
    # made under its fixed name; any other pod with our labels is a neighbour's
    from mlenv.cluster.deploy import split_pods

    split = split_pods(cfg, client)
    rep.pods = [PodView.of(p) for p in split.workers + split.leaving + split.dev]
    rep.neighbours = sorted(str(p["metadata"]["name"]) for p in split.neighbours)
    for pvc in client.list("PersistentVolumeClaim", cfg.namespace, sel):
        size = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
            "storage", ""
        )
        rep.pvcs.append(
            (pvc["metadata"]["name"], str((pvc.get("status") or {}).get("phase", "")), str(size))
        )
    if cfg.rdma.enabled:
        rep.interfaces = _interfaces(cfg, client, rep.pods)
    return rep
