"""The Workload seam: the Kubernetes object that runs a deployment's worker pods.

Everything below the Kubernetes platform that depends on which object makes the pods
(its kind and name, how its pods are named and ranked, when a rollout is done, what
teardown deletes) asks a :class:`Workload` instead of assuming one. The StatefulSet
(:mod:`mlenv.workload.statefulset`) is the one implementation; docs/architecture.md
("The Workload seam") walks through what another kind would add.

Stdlib and :mod:`mlenv.contract` only, like ``mlenv.pod``: the pods import it to name their
peers. The methods are pure, on the objects as the API returns them: the cluster layer
reads, this module interprets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Manifest = dict[str, Any]


class PodLike(Protocol):
    """What a rollout check reads of a pod (``mlenv.cluster.api.PodView`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class Workload:
    """The worker object of a deployment and the questions the other layers ask of it.

    ``name`` is the object's name (one deployment per namespace). Each method's default
    raises NotImplementedError naming the workload and what it lacks, so a new kind that
    leaves one out fails at the first use with a sentence, not an AttributeError.
    """

    name: str

    # the config value that selects this workload (docs/architecture.md)
    key = ""
    # the API kind and version of the worker object
    kind = ""
    api_version = ""
    # its resource in the API's paths (``/apis/apps/v1/namespaces/NS/statefulsets``)
    resource = ""
    # how the API server words a refused update of this kind's immutable fields (lower
    # case; "" when its generic "field is immutable" says it)
    immutable_marker = ""

    def _missing(self, what: str) -> NotImplementedError:
        return NotImplementedError(
            f"workload {self.key or type(self).__name__!r} does not implement {what}"
        )

    @property
    def ref(self) -> str:
        """``kind/name`` as kubectl prints it (``statefulset/ml-dev-env``)."""
        return f"{self.kind.lower()}/{self.name}"

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of the objects :meth:`objects` renders, in apply order; teardown
        deletes these (their pods go with them)."""
        return (self.kind,)

    # -- rendering ---------------------------------------------------------------------
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
        """The worker objects running ``nodes`` pods of the pod ``template``
        (``{"metadata": …, "spec": …}``), each pod with its own ``claims`` (claim
        templates), reachable by name through the headless ``service``."""
        raise self._missing("objects (rendering the worker objects)")

    def pod_template(self, obj: Manifest) -> Manifest:
        """The pod template inside a rendered or live worker object ({} when none)."""
        raise self._missing("pod_template")

    @property
    def rank_label(self) -> str:
        """The pod label holding the pod's rank, exposed to the pod by the downward API."""
        raise self._missing("rank_label")

    # -- names and ranks ---------------------------------------------------------------
    def pod_name(self, rank: int) -> str:
        """The name of the pod with ``rank``."""
        raise self._missing("pod_name")

    def rank_of(self, pod_name: str) -> int | None:
        """The rank the pod named ``pod_name`` would have, None when the name is not one
        of this workload's pod names."""
        raise self._missing("rank_of")

    def pod_dns(self, rank: int, service: str, namespace: str) -> str:
        """The stable DNS name of pod ``rank`` through the headless ``service``."""
        return f"{self.pod_name(rank)}.{service}.{namespace}.svc"

    # -- the live object ---------------------------------------------------------------
    def desired(self, live: Manifest | None) -> int:
        """How many pods the live object asks for (0 when there is none)."""
        raise self._missing("desired")

    def ready(self, live: Manifest | None) -> int:
        """How many of its pods the live object's status counts Ready."""
        raise self._missing("ready")

    def ranks(self, live: Manifest) -> dict[str, int]:
        """Pod name → rank of every pod the live object should be running now."""
        raise self._missing("ranks")

    def owns(self, live: Manifest, pod: Manifest) -> bool:
        """True when the live object is ``pod``'s controller (its ownerReference carries
        the object's uid: a name alone can be taken by anyone)."""
        uid = str((live.get("metadata") or {}).get("uid", ""))
        return bool(uid) and any(
            r.get("uid") == uid and r.get("controller") is True
            for r in (pod.get("metadata") or {}).get("ownerReferences") or []
        )

    def made(self, pod: Manifest) -> bool:
        """True when ``pod``'s owner is this workload's object by kind and name (the uid
        is not known: the object may be gone already)."""
        return any(
            r.get("kind") == self.kind and r.get("name") == self.name
            for r in (pod.get("metadata") or {}).get("ownerReferences") or []
        )

    def not_rolled_out(self, live: Manifest | None, pods: Iterable[PodLike]) -> list[str]:
        """What is not on the latest spec yet: pods by name, or the object itself."""
        raise self._missing("not_rolled_out")

    def immutable_changes(
        self, live: Manifest, planned: Manifest, quantity: Any = None
    ) -> list[str]:
        """The fields of ``planned`` that cannot be applied over ``live`` in place (the
        object is then deleted and recreated)."""
        raise self._missing("immutable_changes")
