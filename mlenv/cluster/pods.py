"""Which pods carrying an instance's labels are its own: the split every cluster verb
reads its workers by (kept apart from deploy, so a read-only verb such as ``status``
loads neither the renderer nor the preflight)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlenv.cluster.api import ClusterClient, Manifest, PodView, instance_selector
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.render.names import DEV_POD, workload


@dataclass(frozen=True)
class PodSplit:
    """The pods carrying this instance's labels, sorted by who made them."""

    workers: list[Manifest]  # the workload's own, ordered by rank
    dev: list[Manifest]  # the bare dev Pod deploy makes (fixed name, no controller)
    neighbours: list[Manifest]  # anyone else's: ignored by every verb, named by deploy/status
    # the workload's own past its desired count (a scale-down still terminating them): ours,
    # listed by status and left to the controller, but no worker (sync/launch skip them)
    leaving: list[Manifest] = field(default_factory=list)
    # the workload object the split was made against (None: not this instance's or
    # absent); its status tells wait_ready whether the rollout is done, with no second read
    live: Manifest | None = None


def split_pods(
    cfg: ClusterConfig, client: ClusterClient, listed: dict[str, list[Manifest]] | None = None
) -> PodSplit:
    """Every pod carrying this instance's labels, split into :class:`PodSplit`.

    labels alone are not ownership: anyone who may create pods in the namespace can
    put ours on one (and the NetworkPolicy admits such a pod by them). A worker is a pod
    this instance's workload object controls (its controller ownerReference carries the
    object's uid) with one of the pod names the workload runs now (:meth:`Workload.ranks`,
    ``<sts>-<i>`` with ``0 <= i < spec.replicas`` for the StatefulSet); pod names are
    unique, so a neighbour cannot take one while ours exists.

    The workload object and the pods are read in one list of both kinds by this
    instance's labels (the object by its name among them: what :func:`_our_workload`
    reads by name and label), or taken from ``listed`` (kind → objects, read by the same
    selector) by a caller that lists more kinds at once."""
    wl = workload(cfg)
    if listed is None:
        listed = client.list_many([wl.kind, "Pod"], cfg.namespace, instance_selector(cfg.name))
    labelled = listed["Pod"]
    sts = next((o for o in listed[wl.kind] if o["metadata"].get("name") == wl.name), None)
    names = wl.ranks(sts) if sts is not None else {}
    split = PodSplit([], [], [], live=sts)
    for p in labelled:
        meta = p.get("metadata") or {}
        name = str(meta.get("name", ""))
        if sts is not None and wl.owns(sts, p):
            (split.workers if name in names else split.leaving).append(p)
        elif name == DEV_POD and not meta.get("ownerReferences"):
            split.dev.append(p)
        else:
            split.neighbours.append(p)
    split.workers.sort(key=lambda p: names[str(p["metadata"]["name"])])
    split.leaving.sort(key=lambda p: str(p["metadata"]["name"]))
    return split


def worker_pods(cfg: ClusterConfig, client: ClusterClient) -> list[PodView]:
    """The workload's pods, in rank order: controlled by this instance's workload object
    (uid) with the names it runs now, never a pod that only carries our labels."""
    return [PodView.of(p) for p in split_pods(cfg, client).workers]


def neighbour_pods(cfg: ClusterConfig, client: ClusterClient) -> list[str]:
    """Names of pods that carry this instance's labels but are neither its workload's
    nor the dev Pod deploy made (someone else in the namespace made them; ignored)."""
    return sorted(str(p["metadata"]["name"]) for p in split_pods(cfg, client).neighbours)
