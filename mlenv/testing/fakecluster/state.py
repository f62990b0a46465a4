"""The fake's state: every object, field manager, event and volume, the virtual clock,
the knobs tests turn (``denied``, ``image_pull_failures``, ``exec_responses``…), the
set-up helpers and JSON persistence. The other modules of this package add behaviour
on top of it (admission → object store → controllers → pods)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, TypeVar

from mlenv.cluster.api import CLUSTER_SCOPED_KINDS, DEFAULT_EXEC_TIMEOUT, Manifest, Unreachable

CLUSTER_SCOPED = CLUSTER_SCOPED_KINDS
GPU = "nvidia.com/gpu"
_F = TypeVar("_F", bound="FakeState")  # typing.Self needs Python 3.11


def _key(kind: str, namespace: str | None, name: str) -> str:
    ns = "" if kind in CLUSTER_SCOPED else (namespace or "")
    return f"{kind}|{ns}|{name}"


class FakeState:
    """The data of a :class:`~mlenv.testing.fakecluster.FakeCluster` and its persistence."""

    def __init__(
        self,
        *,
        server: str = "https://api.fake.example:6443",
        user: str | None = "developer",
        openshift: bool = True,
        exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
    ) -> None:
        self.server_url = server
        self.user = user  # None = not logged in
        self.reachable = True
        self.openshift = openshift
        self.objects: dict[str, Manifest] = {}
        self.managers: dict[str, dict[str, Manifest]] = {}
        self.event_log: list[dict[str, Any]] = []
        self.volumes: dict[str, dict[str, str]] = {}  # volume id → rel path → base64
        self.clock = 0.0
        self.rv = 0
        self.uid = 0
        self.denied: list[str] = []  # "verb resource" pairs the user may not do
        self.image_pull_failures: list[str] = []
        self.unready_pods: list[str] = []  # pods that run but never pass readiness
        # what the server warns of in a dry run of each kind (admission's Warning: lines)
        self.dry_run_warnings: dict[str, list[str]] = {}
        # pods whose container keeps ending: name -> (its exit code, its last run's log)
        self.crash_loops: dict[str, tuple[int, str]] = {}
        # argv prefix → {"rc", "stdout", "stderr", "hang"}; per pod first, then for any pod
        self.exec_responses: dict[str, dict[str, Any]] = {}
        self.pod_exec_responses: dict[str, dict[str, dict[str, Any]]] = {}
        # ranks started detached ("run-torchrun --detach"): "pod/run id" → {"output", "rc"}
        # (rc None: still running), from the scripted response of the run-torchrun argv
        self.detached: dict[str, dict[str, Any]] = {}
        # pod → how many more of its follow streams ("run-follow") drop half-way
        self.follow_drops: dict[str, int] = {}
        self.exec_timeout = exec_timeout
        self.builds: dict[str, dict[str, Any]] = {}  # BuildConfig name → rc/log
        # a BuildConfig's first build finishes as it is created (False: still running, as
        # on OpenShift for tens of minutes); each push is listed
        self.builds_finish = True
        self.builds_pushed: list[str] = []
        self.calls: list[list[str]] = []  # exec/interactive/port-forward/build history
        self.default_storage_class = "standard"
        self.rsync_failures: list[str] = []  # pods where rsync "succeeds" but copies nothing
        # sync copies as kubectl does, by copy_planned (False: plans first, as for oc rsync)
        self.one_stream_copy = True
        # "Kind/name" → how many more (non-dry-run) applies of it fail with a server error,
        # as a flaky API or an admission webhook timing out would
        self.apply_failures: dict[str, int] = {}
        # seconds a deleted pod stays Terminating (0: deletes are immediate); with it,
        # foreground deletes and mounted claims wait too (store.ObjectStore._terminate)
        self.grace_s = 0.0
        self.terminating: dict[str, float] = {}  # object key → when the pod's grace ends

    # -- test setup -------------------------------------------------------------------

    def add_namespace(self, name: str) -> None:
        """Create a namespace (and its OpenShift Project view)."""
        self._store({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, None)

    def add_node(
        self,
        name: str,
        *,
        gpus: int = 8,
        ready: bool = True,
        resources: dict[str, int] | None = None,
    ) -> None:
        """Add a worker node with allocatable GPUs and extended resources."""
        alloc = {"cpu": "128", "memory": "2048Gi", GPU: str(gpus)}
        alloc.update({k: str(v) for k, v in (resources or {}).items()})
        self._store(
            {
                "apiVersion": "v1",
                "kind": "Node",
                # the NVIDIA GPU operator's feature discovery labels every GPU node so
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        **({"nvidia.com/gpu.present": "true"} if gpus > 0 else {}),
                    },
                },
                "status": {
                    "allocatable": alloc,
                    "capacity": dict(alloc),
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            },
            None,
        )

    def label_node(self, name: str, labels: dict[str, str]) -> None:
        """Set labels on a Node (a rack or zone label, as an admin or the cloud provider would)."""
        self.objects[_key("Node", None, name)]["metadata"].setdefault("labels", {}).update(labels)

    def add_storage_class(
        self, name: str, *, default: bool = False, provisioner: str = "fake.csi"
    ) -> None:
        """Add a StorageClass (PVCs naming a missing class stay Pending)."""
        meta: dict[str, Any] = {"name": name}
        if default:  # the annotation a real cluster marks its default class with
            meta["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
        self._store(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": meta,
                "provisioner": provisioner,
            },
            None,
        )
        if default:
            self.default_storage_class = name

    def add_network(self, namespace: str, name: str) -> None:
        """Add a Multus NetworkAttachmentDefinition."""
        self._store(
            {
                "apiVersion": "k8s.cni.cncf.io/v1",
                "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"config": "{}"},
            },
            namespace,
        )

    @classmethod
    def typical(
        cls: type[_F],
        namespace: str,
        nodes: Sequence[str],
        *,
        gpus: int = 8,
        resources: dict[str, int] | None = None,
        networks: Sequence[str] = (),
        storage_classes: Sequence[str] = ("standard",),
    ) -> _F:
        """A logged-in OpenShift-like fake with a namespace, GPU nodes, networks and storage."""
        fake = cls()
        fake.add_namespace(namespace)
        for n in nodes:
            fake.add_node(n, gpus=gpus, resources=resources)
        for i, sc in enumerate(storage_classes):
            fake.add_storage_class(sc, default=i == 0)
        for net in networks:
            ns, _, nm = net.rpartition("/")
            fake.add_network(ns or namespace, nm)
        return fake

    # -- persistence ------------------------------------------------------------------

    def to_json(self) -> str:
        """Serialize the whole state."""
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls: type[_F], text: str) -> _F:
        """Rebuild a fake from :meth:`to_json` output."""
        fake = cls()
        fake.__dict__.update(json.loads(text))
        return fake

    def save(self, path: str) -> None:
        """Write the state to a JSON file (atomically)."""
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(self.to_json())
        os.replace(tmp, path)

    @classmethod
    def load(cls: type[_F], path: str) -> _F:
        """Read a state file written by :meth:`save`."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_json(fh.read())

    # -- low-level store ----------------------------------------------------------------

    def _check_reachable(self) -> None:
        if not self.reachable:
            raise Unreachable(
                f"Unable to connect to the server {self.server_url}: "
                "dial tcp: connect: connection refused (fake)"
            )
        if self.user is None:
            raise Unreachable("not logged in: oc login first (fake)")

    def _ns_exists(self, namespace: str) -> bool:
        return _key("Namespace", None, namespace) in self.objects

    def _store(self, obj: Manifest, namespace: str | None) -> Manifest:
        kind = obj["kind"]
        meta = obj.setdefault("metadata", {})
        if kind not in CLUSTER_SCOPED:
            meta["namespace"] = namespace or meta.get("namespace", "")
        k = _key(kind, namespace, meta["name"])
        old = self.objects.get(k)
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        if old is None:
            self.uid += 1
            meta["uid"] = f"fake-uid-{self.uid}"
            meta["creationTimestamp"] = f"t={self.clock:.0f}"
            meta["generation"] = 1
        else:
            for f in ("uid", "creationTimestamp"):
                meta[f] = old["metadata"][f]
            for f in ("deletionTimestamp", "finalizers"):  # an apply cannot undo a delete
                if f in old["metadata"]:
                    meta[f] = old["metadata"][f]
            gen = int(old["metadata"].get("generation", 1))
            meta["generation"] = gen + (1 if old.get("spec") != obj.get("spec") else 0)
            if "status" not in obj and "status" in old:
                obj["status"] = old["status"]
        self.objects[k] = obj
        return obj

    def _event(
        self, namespace: str, kind: str, name: str, type_: str, reason: str, message: str
    ) -> None:
        obj = self.objects.get(_key(kind, namespace, name)) or {}
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        for e in self.event_log:
            if (e["namespace"], e["kind"], e["name"], e.get("uid", ""), e["reason"]) + (
                e["message"],
            ) == (namespace, kind, name, uid, reason, message):
                e["count"] += 1
                return
        self.event_log.append(
            {
                "namespace": namespace,
                "kind": kind,
                "name": name,
                "uid": uid,
                "type": type_,
                "reason": reason,
                "message": message,
                "count": 1,
            }
        )
