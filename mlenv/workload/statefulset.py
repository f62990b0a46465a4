"""The StatefulSet workload: ``nodes`` pods named ``<name>-<ordinal>``, ordinal = rank.

The one place that knows a StatefulSet's shape: its spec fields, that Kubernetes names
its pods ``<statefulset>-<ordinal>`` and labels them with the ordinal
(``apps.kubernetes.io/pod-index``), how its status says a rollout is done, and which of
its spec fields are immutable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mlenv.workload.base import Manifest, PodLike, Workload

_ORDINAL = re.compile(r"-(\d+)$")
# the label the StatefulSet controller puts on each pod with the revision it runs
REVISION_LABEL = "controller-revision-hash"


@dataclass(frozen=True)
class StatefulSet(Workload):
    """Worker pods as one StatefulSet with parallel pod management."""

    key = "statefulset"
    kind = "StatefulSet"
    api_version = "apps/v1"
    resource = "statefulsets"
    immutable_marker = "updates to statefulset spec for fields other than"

    def objects(
        self,
        template: Manifest,
        *,
        nodes: int,
        metadata: Manifest,
        selector: Mapping[str, str],
        service: str,
        claims: list[Manifest],
    ) -> list[Manifest]:
        spec: Manifest = {
            "serviceName": service,
            "replicas": nodes,
            "podManagementPolicy": "Parallel",  # all pods at once: the job needs every rank
            "selector": {"matchLabels": dict(selector)},
            "template": template,
        }
        if claims:
            spec["volumeClaimTemplates"] = claims
        meta = {"name": self.name, **metadata}
        return [{"apiVersion": self.api_version, "kind": self.kind, "metadata": meta, "spec": spec}]

    def pod_template(self, obj: Manifest) -> Manifest:
        return dict((obj.get("spec") or {}).get("template") or {})

    @property
    def rank_label(self) -> str:
        return "apps.kubernetes.io/pod-index"

    def pod_name(self, rank: int) -> str:
        return f"{self.name}-{rank}"

    def rank_of(self, pod_name: str) -> int | None:
        # the ordinal suffix alone, whatever comes before it: the pod-side fallback has
        # always read any hostname so, and ownership is decided by :meth:`ranks` and
        # :meth:`owns`, never by a name
        m = _ORDINAL.search(pod_name)
        return int(m.group(1)) if m else None

    def desired(self, live: Manifest | None) -> int:
        return int(((live or {}).get("spec") or {}).get("replicas", 0))

    def ready(self, live: Manifest | None) -> int:
        return int(((live or {}).get("status") or {}).get("readyReplicas", 0))

    def ranks(self, live: Manifest) -> dict[str, int]:
        # the StatefulSet's own spec.replicas; a pod at or above it is being scaled away
        replicas = int((live.get("spec") or {}).get("replicas", 1))
        return {self.pod_name(i): i for i in range(replicas)}

    def not_rolled_out(self, live: Manifest | None, pods: Iterable[PodLike]) -> list[str]:
        """Pods still on the StatefulSet's old revision, or the StatefulSet itself while
        its controller has not seen the latest spec. A changed StatefulSet keeps its old
        pods Ready while the controller replaces them one by one: counting Ready pods
        alone declared the deploy done before any pod ran the new spec."""
        status, meta = (live or {}).get("status") or {}, (live or {}).get("metadata") or {}
        if "observedGeneration" in status and int(status["observedGeneration"]) < int(
            meta.get("generation", 0)
        ):
            return [f"{self.ref} (generation {meta.get('generation')} not yet observed)"]
        rev = str(status.get("updateRevision", ""))
        if not rev:
            return []  # a controller that reports no revisions (or none yet): Ready is all we know
        return [p.name for p in pods if p.labels.get(REVISION_LABEL, rev) != rev]

    def immutable_changes(
        self,
        live: Manifest,
        planned: Manifest,
        quantity: Callable[[dict[str, Any]], Any] | None = None,
    ) -> list[str]:
        """Names of the immutable StatefulSet fields that differ between live and planned;
        ``quantity`` turns a claim's requests into a comparable storage size (the API
        server returns ``1024Gi`` as ``1Ti``)."""
        same = quantity or (lambda requests: requests.get("storage"))
        a, b = _immutable_view(live, same), _immutable_view(planned, same)
        changed = []
        for k in a:
            if k == "volumeClaimTemplates":
                # the server fills in the default storage class: only an explicit change counts
                la = [
                    {
                        **x,
                        "storageClassName": x["storageClassName"]
                        if y["storageClassName"]
                        else None,
                    }
                    for x, y in zip(a[k], b[k], strict=False)
                ]
                if len(a[k]) != len(b[k]) or la != b[k]:
                    changed.append(k)
            elif a[k] != b[k]:
                changed.append(k)
        return changed


def _immutable_view(sts: Manifest, quantity: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """The immutable StatefulSet fields, normalised so server defaults don't count as changes."""
    spec = sts.get("spec") or {}
    vcts = []
    for v in spec.get("volumeClaimTemplates") or []:
        vs = v.get("spec") or {}
        vcts.append(
            {
                "name": (v.get("metadata") or {}).get("name"),
                "accessModes": vs.get("accessModes"),
                "storageClassName": vs.get("storageClassName"),
                "storage": quantity((vs.get("resources") or {}).get("requests") or {}),
            }
        )
    return {
        "selector": (spec.get("selector") or {}).get("matchLabels"),
        "serviceName": spec.get("serviceName"),
        "podManagementPolicy": spec.get("podManagementPolicy", "OrderedReady"),
        "volumeClaimTemplates": vcts,
    }
