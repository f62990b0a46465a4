"""The fake's controllers, run one pass per :meth:`Controllers.tick` (``pause`` advances
the virtual clock and ticks): the StatefulSet controller (pods ``<sts>-<i>``, PVCs from
volumeClaimTemplates that outlive pods and the StatefulSet, SCC admission of the pods it
creates), the PVC binder (storage classes), the scheduler (node Readiness, allocatable
GPUs/RDMA resources, node affinity and selectors, pod anti-affinity) and the kubelet
(Multus attachments, image pulls, readiness), each emitting the events the real
component would."""

from __future__ import annotations

import builtins
import copy
import hashlib
import json
from typing import Any

from mlenv.cluster.api import Manifest
from mlenv.testing.fakecluster.state import _key
from mlenv.testing.fakecluster.store import ObjectStore

REVISION_LABEL = "controller-revision-hash"  # what the StatefulSet controller labels pods with

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"


def _quantity(v: Any) -> float:
    """Kubernetes quantity → number (enough for counts and simple CPU/memory values)."""
    s = str(v)
    units = {
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "m": 1e-3,
    }
    for u, f in units.items():
        if s.endswith(u):
            return float(s[: -len(u)]) * f
    return float(s)


def _pod_ready(pod: Manifest) -> int:
    """1 when a pod object is Ready, else 0."""
    conds = (pod.get("status") or {}).get("conditions") or []
    return int(any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds))


class Controllers(ObjectStore):
    """The virtual clock and the controllers that move objects towards their spec."""

    def monotonic(self) -> float:
        """The fake's virtual clock."""
        return self.clock

    def pause(self, seconds: float) -> None:
        """Advance the virtual clock and run one controller tick."""
        self.clock += seconds
        self.tick()

    def tick(self) -> None:
        """One pass of the garbage collector, StatefulSet controller, PVC binder,
        scheduler and kubelet."""
        self.reap()
        for k, sts in sorted(self.objects.items()):
            if k.startswith("StatefulSet|") and "deletionTimestamp" not in sts["metadata"]:
                self._reconcile_sts(sts)
        for k, pvc in sorted(self.objects.items()):
            if k.startswith("PersistentVolumeClaim|"):
                self._bind(pvc)
        for k, pod in sorted(self.objects.items()):
            if k.startswith("Pod|"):
                self._kubelet(pod) if pod["spec"].get("nodeName") else self._schedule(pod)

    def _reconcile_sts(self, sts: Manifest) -> None:
        ns = sts["metadata"]["namespace"]
        name = sts["metadata"]["name"]
        spec = sts.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        tpl = spec.get("template") or {}
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        owner = [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": name,
                "uid": sts["metadata"]["uid"],
                "controller": True,
            }
        ]
        for k, pod in list(self.objects.items()):
            if k.startswith(f"Pod|{ns}|{name}-"):
                refs = pod["metadata"].get("ownerReferences") or []
                idx = pod["metadata"].get("labels", {}).get("apps.kubernetes.io/pod-index", "")
                if (
                    any(r.get("uid") == sts["metadata"]["uid"] for r in refs)
                    and idx.isdigit()
                    and int(idx) >= replicas
                ):
                    self.delete("Pod", pod["metadata"]["name"], ns)
        # The pod template's revision, as the real controller labels pods with it. A pod on
        # another revision is replaced, one per pass and only while the others are Ready
        # (RollingUpdate): the real plane showed the fake never replaced pods.
        rev = f"{name}-" + hashlib.sha256(json.dumps(tpl, sort_keys=True).encode()).hexdigest()[:10]
        old_rev = [
            p
            for i in range(replicas)
            if (p := self.objects.get(_key("Pod", ns, f"{name}-{i}"))) is not None
            and (p["metadata"].get("labels") or {}).get(REVISION_LABEL) != rev
        ]
        if old_rev and all(_pod_ready(p) for p in old_rev):
            self.delete("Pod", old_rev[-1]["metadata"]["name"], ns)  # highest ordinal first
        ready = 0
        for i in range(replicas):
            pod_name = f"{name}-{i}"
            claims = []
            for vct in spec.get("volumeClaimTemplates") or []:
                cname = f"{vct['metadata']['name']}-{pod_name}"
                claims.append(
                    {"name": vct["metadata"]["name"], "persistentVolumeClaim": {"claimName": cname}}
                )
                if _key("PersistentVolumeClaim", ns, cname) not in self.objects:
                    labels = {**(vct["metadata"].get("labels") or {}), **sel}
                    self._store(
                        {
                            "apiVersion": "v1",
                            "kind": "PersistentVolumeClaim",
                            "metadata": {"name": cname, "labels": labels},
                            "spec": copy.deepcopy(vct.get("spec") or {}),
                            "status": {"phase": "Pending"},
                        },
                        ns,
                    )
            existing = self.objects.get(_key("Pod", ns, pod_name))
            if existing is not None:
                ready += _pod_ready(existing)
                continue
            admitted_by, denial = self._scc_admission(tpl.get("spec") or {}, ns)
            if denial:
                self._event(
                    ns,
                    "StatefulSet",
                    name,
                    "Warning",
                    "FailedCreate",
                    f"create Pod {pod_name} in StatefulSet {name} failed error: "
                    f'pods "{pod_name}" is forbidden: {denial}',
                )
                continue
            pspec = copy.deepcopy(tpl.get("spec") or {})
            pspec["hostname"] = pod_name
            pspec["subdomain"] = spec.get("serviceName", "")
            pspec["volumes"] = list(pspec.get("volumes") or []) + claims
            labels = {
                **((tpl.get("metadata") or {}).get("labels") or {}),
                "statefulset.kubernetes.io/pod-name": pod_name,
                "apps.kubernetes.io/pod-index": str(i),
                REVISION_LABEL: rev,
            }
            self._store(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "labels": labels,
                        "annotations": {
                            **copy.deepcopy((tpl.get("metadata") or {}).get("annotations") or {}),
                            **({"openshift.io/scc": admitted_by} if admitted_by else {}),
                        },
                        "ownerReferences": copy.deepcopy(owner),
                    },
                    "spec": pspec,
                    "status": {
                        "phase": "Pending",
                        "conditions": [{"type": "PodScheduled", "status": "False"}],
                    },
                },
                ns,
            )
        sts["status"] = {
            "replicas": replicas,
            "readyReplicas": ready,
            "updateRevision": rev,
            "currentRevision": rev
            if not old_rev
            else str((old_rev[0]["metadata"].get("labels") or {}).get(REVISION_LABEL, "")),
            "observedGeneration": sts["metadata"].get("generation", 1),
        }

    def _bind(self, pvc: Manifest) -> None:
        if (pvc.get("status") or {}).get("phase") == "Bound":
            return
        ns = pvc["metadata"]["namespace"]
        sc = (pvc.get("spec") or {}).get("storageClassName") or self.default_storage_class
        if _key("StorageClass", None, sc) in self.objects:
            pvc["status"] = {"phase": "Bound"}
        else:
            self._event(
                ns,
                "PersistentVolumeClaim",
                pvc["metadata"]["name"],
                "Warning",
                "ProvisioningFailed",
                f'storageclass.storage.k8s.io "{sc}" not found',
            )

    def _requests(self, pspec: Manifest) -> dict[str, float]:
        total: dict[str, float] = {}
        for c in pspec.get("containers") or []:
            res = c.get("resources") or {}
            for src in (res.get("limits") or {}, res.get("requests") or {}):
                for r, q in src.items():
                    if "/" in r:  # extended resources: limits == requests
                        total[r] = max(total.get(r, 0.0), _quantity(q))
        return total

    def _schedule(self, pod: Manifest) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        spec = pod["spec"]
        for v in spec.get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                pvc = self.objects.get(_key("PersistentVolumeClaim", ns, claim))
                if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
                    self._event(
                        ns,
                        "Pod",
                        name,
                        "Warning",
                        "FailedScheduling",
                        f"0/{len(self._nodes())} nodes are available: pod has "
                        "unbound immediate PersistentVolumeClaims.",
                    )
                    return
        want = self._requests(spec)
        reasons: dict[str, int] = {}
        chosen = ""
        for node in self._nodes():
            why = self._node_misfit(node, pod, want)
            if why:
                reasons[why] = reasons.get(why, 0) + 1
            elif not chosen:
                chosen = node["metadata"]["name"]
        if not chosen:
            detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
            self._event(
                ns,
                "Pod",
                name,
                "Warning",
                "FailedScheduling",
                f"0/{len(self._nodes())} nodes are available: {detail}.",
            )
            return
        spec["nodeName"] = chosen
        pod["status"] = {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False"},
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "restartCount": 0,
                    "ready": False,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ],
        }
        self._event(
            ns, "Pod", name, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {chosen}"
        )

    def _nodes(self) -> builtins.list[Manifest]:
        return [o for k, o in sorted(self.objects.items()) if k.startswith("Node|")]

    def _node_misfit(self, node: Manifest, pod: Manifest, want: dict[str, float]) -> str:
        nname = node["metadata"]["name"]
        conds = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
        if conds.get("Ready") != "True":
            return "node(s) were not ready"
        tolerated = {(t.get("key"), t.get("effect")) for t in pod["spec"].get("tolerations") or []}
        for t in (node.get("spec") or {}).get("taints") or []:  # a quarantined node takes no pod
            if t.get("effect") == "NoSchedule" and (t.get("key"), "NoSchedule") not in tolerated:
                return "node(s) had untolerated taint(s)"
        aff = pod["spec"].get("affinity") or {}
        req = (
            (aff.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
            or {}
        ).get("nodeSelectorTerms") or []
        if req and not any(
            all(self._match_expr(node, e) for e in t.get("matchExpressions") or [])
            and all(  # matchFields: the Node's name, as the scheduler (and DaemonSets) use it
                f.get("key") == "metadata.name"
                and f.get("operator") == "In"
                and nname in (f.get("values") or [])
                for f in t.get("matchFields") or []
            )
            for t in req
        ):
            return "node(s) didn't match Pod's node affinity/selector"
        for lk, lv in (pod["spec"].get("nodeSelector") or {}).items():
            if (node["metadata"].get("labels") or {}).get(lk) != lv:
                return "node(s) didn't match Pod's node affinity/selector"
        on_node = [
            o
            for k, o in self.objects.items()
            if k.startswith("Pod|") and o["spec"].get("nodeName") == nname and o is not pod
        ]
        anti = (aff.get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []
        for term in anti:
            ml = (term.get("labelSelector") or {}).get("matchLabels") or {}
            if any(
                all((o["metadata"].get("labels") or {}).get(a) == b for a, b in ml.items())
                for o in on_node
            ):
                return "node(s) didn't match pod anti-affinity rules"
        alloc = node["status"].get("allocatable") or {}
        for res, n in sorted(want.items()):
            used = sum(self._requests(o["spec"]).get(res, 0.0) for o in on_node)
            if used + n > _quantity(alloc.get(res, 0)):
                return f"Insufficient {res}"
        return ""

    @staticmethod
    def _match_expr(node: Manifest, e: Manifest) -> bool:
        val = (node["metadata"].get("labels") or {}).get(e.get("key", ""))
        if e.get("operator") == "In":
            return val in (e.get("values") or [])
        if e.get("operator") == "Exists":
            return val is not None
        return True

    def _kubelet(self, pod: Manifest) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        status = pod["status"]
        if status.get("phase") == "Running":
            return
        nets = (pod["metadata"].get("annotations") or {}).get(NETWORKS_ANNOTATION, "")
        for net in [n.strip() for n in str(nets).split(",") if n.strip()]:
            nns, _, nname = net.rpartition("/")
            if _key("NetworkAttachmentDefinition", nns or ns, nname) not in self.objects:
                self._event(
                    ns,
                    "Pod",
                    name,
                    "Warning",
                    "FailedCreatePodSandBox",
                    f"Failed to create pod sandbox: multus: cannot find network-attachment-"
                    f"definition {nns or ns}/{nname}",
                )
                return
        images = [c.get("image", "") for c in pod["spec"].get("containers") or []]
        bad = [i for i in images if i in self.image_pull_failures]
        cs = status["containerStatuses"][0]
        if bad:
            cs["state"] = {"waiting": {"reason": "ImagePullBackOff"}}
            self._event(
                ns,
                "Pod",
                name,
                "Warning",
                "Failed",
                f'Failed to pull image "{bad[0]}": ErrImagePull (fake registry)',
            )
            return
        if name in self.crash_loops:
            code = self.crash_loops[name][0]
            cs.update(
                {
                    "ready": False,
                    "restartCount": 3,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": code, "reason": "Error"}},
                }
            )
            status["phase"] = "Running"
            self._event(
                ns, "Pod", name, "Warning", "BackOff", "Back-off restarting failed container"
            )
            return
        ready = name not in self.unready_pods
        cs.update({"ready": ready, "state": {"running": {"startedAt": f"t={self.clock:.0f}"}}})
        status["phase"] = "Running"
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ]
        status["podIP"] = f"10.128.0.{len(self.objects) % 250 + 2}"
        self._event(ns, "Pod", name, "Normal", "Started", "Started container main")
