"""FakeCluster: a stateful in-memory fake of the Kubernetes/OpenShift API for tests.

It is a fake, named so everywhere, and it enforces the behaviour mlenv's code and tests
depend on, the way the real API server and controllers do:

- namespaces must exist; cluster-scoped kinds ignore the namespace;
- equality label selection; ``resourceVersion`` bumps on every change, ``generation``
  on spec changes; an apply that changes nothing changes nothing;
- server-side apply per field manager: fields another manager owns with a different
  value are a 409 conflict unless forced; fields a manager stops applying go away;
- immutable StatefulSet fields (selector, volumeClaimTemplates, serviceName,
  podManagementPolicy) and Pod spec fields (everything but container images,
  activeDeadlineSeconds and added tolerations) → 422 with the API server's message;
- permissions: ``denied`` lists "verb resource" pairs (``create securitycontextconstraints``);
  server-side apply needs ``create`` for a new object and ``patch`` for an existing one;
  ``can_i(..., as_user=<service account>)`` answers "use SCC" from the live RoleBindings;
- with ``openshift=False`` the OpenShift-only kinds (Route, BuildConfig, ImageStream, SCC…)
  do not exist: get/list/apply/delete answer NotFound as a plain Kubernetes API does;
- a StatefulSet controller creating pods ``<sts>-<i>`` (and PVCs from
  volumeClaimTemplates, which survive pod and StatefulSet deletion), SCC admission for
  pods that add capabilities, PVC binding through storage classes, a scheduler that
  honours node Readiness, allocatable GPUs/RDMA resources, node affinity and pod
  anti-affinity, Multus attachments and image pulls. Pods go Pending → scheduled →
  Running/Ready over controller "ticks" (:meth:`pause` runs one), and when they cannot,
  they stay Pending with the events the real components would emit;
- exec and rsync against an in-memory filesystem per volume (PVC-backed volumes are
  shared by every pod that mounts the claim, as RWX storage is). rsync follows rsync's
  pattern rules (``/x`` at the top only, ``x`` at any depth, excluded paths neither copied
  nor deleted); exec answers the tree checksum and scripted responses, per pod if wanted,
  including one that hangs until the call's timeout.

State round-trips through JSON (:meth:`save`/:meth:`load`) so CLI tests can inject it
with ``MLENV_FAKE_CLUSTER=<state.json>`` across separate command invocations.
"""

from __future__ import annotations

import base64
import builtins
import copy
import fnmatch
import hashlib
import json
import math
import os
from collections.abc import Sequence
from typing import Any, Literal

from mlenv.cluster import treehash
from mlenv.cluster.api import (
    CLUSTER_SCOPED_KINDS,
    DEFAULT_EXEC_TIMEOUT,
    FIELD_MANAGER,
    OPENSHIFT_KINDS,
    ApiError,
    ApplyResult,
    Conflict,
    Event,
    ExecFailed,
    ExecResult,
    ExecTimeout,
    Forbidden,
    Invalid,
    Manifest,
    NotFound,
    Output,
    Unreachable,
    plural,
)
from mlenv.errors import InfraError

CLUSTER_SCOPED = CLUSTER_SCOPED_KINDS
SUBRESOURCES = ("exec", "log", "portforward", "status", "attach")
STS_IMMUTABLE = ("selector", "volumeClaimTemplates", "serviceName", "podManagementPolicy")
GPU = "nvidia.com/gpu"
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
SERVER_META = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")


def _key(kind: str, namespace: str | None, name: str) -> str:
    ns = "" if kind in CLUSTER_SCOPED else (namespace or "")
    return f"{kind}|{ns}|{name}"


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf paths of a dict; lists are atomic (as SSA treats lists without merge keys)."""
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _unflatten(path: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return dict(out)


def _drop_paths(obj: dict[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for p in paths:
        parts = p.split(".")
        cur: Any = out
        for part in parts[:-1]:
            cur = cur.get(part) if isinstance(cur, dict) else None
        if isinstance(cur, dict):
            cur.pop(parts[-1], None)
    return out


def _content(obj: Manifest) -> Manifest:
    """An object without server-populated metadata and status, for change detection."""
    o = copy.deepcopy(obj)
    for f in SERVER_META:
        o.get("metadata", {}).pop(f, None)
    o.pop("status", None)
    return o


def _pod_update_forbidden(old: Manifest, new: Manifest) -> bool:
    """True when a Pod spec change touches a field the API server refuses to update."""
    def view(spec: Manifest) -> Manifest:
        s = copy.deepcopy(spec)
        for key in ("containers", "initContainers"):
            for c in s.get(key) or []:
                c.pop("image", None)
        for f in ("activeDeadlineSeconds", "tolerations"):
            s.pop(f, None)
        return s

    if view(old) != view(new):
        return True
    kept = new.get("tolerations") or []
    return any(t not in kept for t in old.get("tolerations") or [])


def _rsync_excluded(rel: str, patterns: Sequence[str]) -> bool:
    """rsync's exclude rules: ``/p`` matches the top-level entry only, ``p`` any path
    component at any depth (a matched directory takes its subtree with it), ``p/`` only
    directories."""
    parts = rel.split("/")
    for pat in patterns:
        dirs_only = pat.endswith("/")
        pat = pat.rstrip("/")
        candidates = parts[:-1] if dirs_only else parts
        if pat.startswith("/"):
            if candidates[:1] and fnmatch.fnmatchcase(candidates[0], pat[1:]):
                return True
        elif any(fnmatch.fnmatchcase(p, pat) for p in candidates):
            return True
    return False


def _read_tree(root: str) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → content), nothing filtered: the fake's
    rsync must apply its own exclude rules, not the checksum's."""
    out: dict[str, bytes] = {}
    for d, dirs, files in os.walk(root):
        for f in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if os.path.islink(p):  # rsync -a and tar copy a link as a link
                out[rel] = _LINK + os.readlink(p).encode()
                continue
            with open(p, "rb") as fh:
                out[rel] = fh.read()
    return out


# How the fake's volumes hold a symbolic link: a marker no real file content starts with.
_LINK = b"\0mlenv-fake-symlink\0"


def _listed(data: bytes) -> str:
    """One LIST_SCRIPT value: sha256 of a file, ``symlink:TARGET`` of a link."""
    if data.startswith(_LINK):
        return treehash.LINK_PREFIX + data[len(_LINK):].decode()
    return hashlib.sha256(data).hexdigest()


def _quantity(v: Any) -> float:
    """Kubernetes quantity → number (enough for counts and simple CPU/memory values)."""
    s = str(v)
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6,
             "G": 1e9, "m": 1e-3}
    for u, f in units.items():
        if s.endswith(u):
            return float(s[: -len(u)]) * f
    return float(s)


class FakeCluster:
    """In-memory fake implementing :class:`mlenv.cluster.api.Cluster` (see module doc)."""

    description = "fake (in-memory)"

    def __init__(self, *, server: str = "https://api.fake.example:6443",
                 user: str | None = "developer", openshift: bool = True,
                 exec_timeout: float = DEFAULT_EXEC_TIMEOUT) -> None:
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
        # argv prefix → {"rc", "stdout", "stderr", "hang"}; per pod first, then for any pod
        self.exec_responses: dict[str, dict[str, Any]] = {}
        self.pod_exec_responses: dict[str, dict[str, dict[str, Any]]] = {}
        self.exec_timeout = exec_timeout
        self.builds: dict[str, dict[str, Any]] = {}  # BuildConfig name → rc/log
        self.calls: list[list[str]] = []  # exec/interactive/port-forward/build history
        self.default_storage_class = "standard"
        self.rsync_failures: list[str] = []  # pods where rsync "succeeds" but copies nothing
        # "Kind/name" → how many more (non-dry-run) applies of it fail with a server error,
        # as a flaky API or an admission webhook timing out would
        self.apply_failures: dict[str, int] = {}

    # -- test setup -------------------------------------------------------------------

    def add_namespace(self, name: str) -> None:
        """Create a namespace (and its OpenShift Project view)."""
        self._store({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, None)

    def add_node(self, name: str, *, gpus: int = 8, ready: bool = True,
                 resources: dict[str, int] | None = None) -> None:
        """Add a worker node with allocatable GPUs and extended resources."""
        alloc = {"cpu": "128", "memory": "2048Gi", GPU: str(gpus)}
        alloc.update({k: str(v) for k, v in (resources or {}).items()})
        self._store({
            "apiVersion": "v1", "kind": "Node",
            # the NVIDIA GPU operator's feature discovery labels every GPU node so
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(
                {"nvidia.com/gpu.present": "true"} if gpus > 0 else {})}},
            "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]},
        }, None)

    def add_storage_class(self, name: str, *, default: bool = False,
                          provisioner: str = "fake.csi") -> None:
        """Add a StorageClass (PVCs naming a missing class stay Pending)."""
        meta: dict[str, Any] = {"name": name}
        if default:  # the annotation a real cluster marks its default class with
            meta["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
        self._store({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                     "metadata": meta, "provisioner": provisioner}, None)
        if default:
            self.default_storage_class = name

    def add_network(self, namespace: str, name: str) -> None:
        """Add a Multus NetworkAttachmentDefinition."""
        self._store({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                     "metadata": {"name": name, "namespace": namespace}, "spec": {"config": "{}"}},
                    namespace)

    @classmethod
    def typical(cls, namespace: str, nodes: Sequence[str], *, gpus: int = 8,
                resources: dict[str, int] | None = None, networks: Sequence[str] = (),
                storage_classes: Sequence[str] = ("standard",)) -> FakeCluster:
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
    def from_json(cls, text: str) -> FakeCluster:
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
    def load(cls, path: str) -> FakeCluster:
        """Read a state file written by :meth:`save`."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_json(fh.read())

    # -- helpers ----------------------------------------------------------------------

    def _check_reachable(self) -> None:
        if not self.reachable:
            raise Unreachable(f"Unable to connect to the server {self.server_url}: "
                              "dial tcp: connect: connection refused (fake)")
        if self.user is None:
            raise Unreachable("not logged in: oc login first (fake)")

    def _require(self, verb: str, resource: str) -> None:
        if not self.can_i(verb, resource):
            raise Forbidden(f'{resource} is forbidden: User "{self.user}" cannot {verb} '
                            f"resource \"{resource}\" (fake)")

    def _served(self, kind: str) -> None:
        """NotFound for kinds this API does not serve (OpenShift kinds on plain Kubernetes)."""
        if not self.openshift and kind in OPENSHIFT_KINDS:
            raise NotFound(f'the server doesn\'t have a resource type "{plural(kind)}" (fake)',
                           kind=kind)

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
            gen = int(old["metadata"].get("generation", 1))
            meta["generation"] = gen + (1 if old.get("spec") != obj.get("spec") else 0)
            if "status" not in obj and "status" in old:
                obj["status"] = old["status"]
        self.objects[k] = obj
        return obj

    def _event(self, namespace: str, kind: str, name: str, type_: str, reason: str,
               message: str) -> None:
        for e in self.event_log:
            if (e["namespace"], e["kind"], e["name"], e["reason"], e["message"]) == (
                    namespace, kind, name, reason, message):
                e["count"] += 1
                return
        self.event_log.append({"namespace": namespace, "kind": kind, "name": name,
                               "type": type_, "reason": reason, "message": message, "count": 1})

    # -- Cluster: identity ------------------------------------------------------------

    def server(self) -> str:
        """The fake's API server URL."""
        self._check_reachable()
        return self.server_url

    def whoami(self) -> str:
        """The fake's logged-in user."""
        self._check_reachable()
        assert self.user is not None
        return self.user

    def can_i(self, verb: str, resource: str, namespace: str | None = None, *,
              as_user: str | None = None) -> bool:
        """False for the ``"verb resource"`` pairs listed in ``denied`` (API group and
        resource name ignored). As a service account, "use SCC" is answered from the live
        SCC and RoleBindings; ``"impersonate serviceaccounts"`` in ``denied`` → Forbidden."""
        self._check_reachable()
        base, _, sub = resource.partition("/")
        base = base.split(".")[0]
        if as_user is not None:
            if "impersonate serviceaccounts" in self.denied:
                raise Forbidden(f'serviceaccounts "{as_user}" is forbidden: User "{self.user}" '
                                'cannot impersonate resource "serviceaccounts" (fake)')
            if verb == "use" and base == "securitycontextconstraints" and sub:
                _, _, rest = as_user.partition("system:serviceaccount:")
                ns, _, sa = rest.partition(":")
                scc = self.objects.get(_key("SecurityContextConstraints", None, sub))
                return scc is not None and self._sa_may_use(sub, as_user, ns, sa, scc)
            return True
        if sub in SUBRESOURCES:
            return f"{verb} {base}/{sub}" not in self.denied
        return f"{verb} {base}" not in self.denied and \
            (not sub or f"{verb} {base}/{sub}" not in self.denied)

    # -- Cluster: objects -------------------------------------------------------------

    def apply(self, manifest: Manifest, namespace: str | None, *,
              field_manager: str = FIELD_MANAGER, force_conflicts: bool = False,
              dry_run: bool = False) -> ApplyResult:
        """Server-side apply with field ownership, conflicts and immutable fields."""
        self._check_reachable()
        kind = manifest.get("kind", "")
        name = (manifest.get("metadata") or {}).get("name", "")
        if not kind or not name or not manifest.get("apiVersion"):
            raise Invalid("object has no apiVersion, kind or metadata.name", kind=kind, name=name)
        if kind == "Project" or (kind in OPENSHIFT_KINDS and not self.openshift):
            raise NotFound(f'no matches for kind "{kind}"', kind=kind, name=name)
        ns = None if kind in CLUSTER_SCOPED else (namespace or manifest["metadata"].get("namespace"))
        if kind not in CLUSTER_SCOPED and (not ns or not self._ns_exists(ns)):
            raise NotFound(f'namespaces "{ns}" not found', kind=kind, name=name)
        k = _key(kind, ns, name)
        if not dry_run and self.apply_failures.get(f"{kind}/{name}", 0) > 0:
            self.apply_failures[f"{kind}/{name}"] -= 1
            raise ApiError(f"Internal error occurred: failed calling webhook for {kind} "
                           f"{name}: context deadline exceeded (fake, injected)",
                           kind=kind, name=name)
        # server-side apply is a PATCH: creating needs create, changing an existing one patch
        self._require("patch" if k in self.objects else "create", plural(kind))
        config = copy.deepcopy(manifest)
        config.get("metadata", {}).pop("namespace", None)
        mine = _flatten(config)
        owners = copy.deepcopy(self.managers.get(k, {}))
        conflicts: list[tuple[str, str]] = []
        for mgr, cfg in owners.items():
            if mgr == field_manager:
                continue
            theirs = _flatten(cfg)
            clash = [p for p in mine if p in theirs and theirs[p] != mine[p]]
            if clash and not force_conflicts:
                conflicts += [(p, mgr) for p in clash]
            elif clash:
                owners[mgr] = _drop_paths(cfg, clash)
        if conflicts:
            detail = "; ".join(f'conflict with "{m}": .{p}' for p, m in conflicts)
            raise Conflict(f"Apply failed with {len(conflicts)} conflict(s): {detail}",
                           kind=kind, name=name, fields=conflicts)
        old = self.objects.get(k)
        # fields no apply manager set (scheduler's nodeName, controller defaults) stay,
        # as they belong to other managers on a real server
        previous: Manifest = {}
        for cfg in self.managers.get(k, {}).values():
            previous = _merge(previous, cfg)
        applied_paths = set(_flatten(previous))
        kept: Manifest = {}
        if old is not None:
            foreign = {p: v for p, v in _flatten(_content(old)).items()
                       if p not in applied_paths and not p.startswith("metadata.namespace")}
            for p, v in foreign.items():
                kept = _merge(kept, _unflatten(p, v))
        owners[field_manager] = config
        merged: Manifest = kept
        for mgr in sorted(owners, key=lambda m: m == field_manager):
            merged = _merge(merged, owners[mgr])
        if ns is not None:
            merged.setdefault("metadata", {})["namespace"] = ns
        if old is not None and _content(old) == _content(merged):
            if not dry_run:
                self.managers[k] = owners
            return ApplyResult(kind, name, "unchanged")
        if old is not None and kind == "StatefulSet":
            changed = [f for f in STS_IMMUTABLE
                       if (old.get("spec") or {}).get(f) != (merged.get("spec") or {}).get(f)]
            if changed:
                raise Invalid(
                    f'StatefulSet.apps "{name}" is invalid: spec: Forbidden: updates to '
                    "statefulset spec for fields other than 'replicas', 'ordinals', "
                    "'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' "
                    f"and 'minReadySeconds' are forbidden (changed: {', '.join(changed)})",
                    kind=kind, name=name)
        if old is not None and kind in ("RoleBinding", "ClusterRoleBinding") and \
                old.get("roleRef") != merged.get("roleRef"):
            raise Invalid(
                f'{kind}.rbac.authorization.k8s.io "{name}" is invalid: roleRef: Invalid '
                f"value: {merged.get('roleRef')!r}: cannot change roleRef", kind=kind, name=name)
        if old is not None and kind == "Pod" and _pod_update_forbidden(
                old.get("spec") or {}, merged.get("spec") or {}):
            raise Invalid(
                f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields '
                "other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
                "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
                "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if "
                "it was previously negative)", kind=kind, name=name)
        if dry_run:
            return ApplyResult(kind, name, "created" if old is None else "configured")
        self.managers[k] = owners
        self._store(merged, ns)
        if kind == "PersistentVolumeClaim":
            self.objects[k].setdefault("status", {"phase": "Pending"})
        return ApplyResult(kind, name, "created" if old is None else "configured")

    def get(self, kind: str, name: str, namespace: str | None) -> Manifest | None:
        """A deep copy of one object, or None."""
        self._check_reachable()
        self._served(kind)
        self._require("get", plural(kind))
        if kind == "Project":
            kind = "Namespace"
        obj = self.objects.get(_key(kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: str, namespace: str | None,
             selector: dict[str, str] | None = None) -> list[Manifest]:
        """Objects of a kind in a namespace (all namespaces for None) matching the selector."""
        self._check_reachable()
        self._served(kind)
        self._require("list", plural(kind))
        out = []
        for k, obj in sorted(self.objects.items()):
            okind, ons, _ = k.split("|", 2)
            if okind != kind or (namespace is not None and kind not in CLUSTER_SCOPED
                                 and ons != namespace):
                continue
            labels = obj["metadata"].get("labels") or {}
            if all(labels.get(lk) == lv for lk, lv in (selector or {}).items()):
                out.append(copy.deepcopy(obj))
        return out

    def delete(self, kind: str, name: str, namespace: str | None, *,
               cascade: Literal["background", "foreground", "orphan"] = "background") -> bool:
        """Delete an object; dependents too unless orphaned. PVCs are never dependents."""
        self._check_reachable()
        self._served(kind)
        self._require("delete", plural(kind))
        k = _key(kind, namespace, name)
        obj = self.objects.pop(k, None)
        self.managers.pop(k, None)
        if obj is None:
            return False
        uid = obj["metadata"]["uid"]
        if kind == "Namespace":
            for ok in [x for x in self.objects if x.split("|")[1] == name]:
                del self.objects[ok]
        if cascade != "orphan":
            for ok, o in list(self.objects.items()):
                refs = o["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    okind, ons, oname = ok.split("|", 2)
                    self.delete(okind, oname, ons or None)
        if kind == "PersistentVolumeClaim":
            self.volumes.pop(f"pvc:{namespace}/{name}", None)
        if kind == "Pod":
            for vid in [v for v in self.volumes if v.startswith(f"pod:{namespace}/{name}:")]:
                del self.volumes[vid]
        return True

    def events(self, namespace: str, kind: str | None = None,
               name: str | None = None) -> builtins.list[Event]:
        """Recorded events, filtered by involved object."""
        self._check_reachable()
        return [Event(e["kind"], e["name"], e["type"], e["reason"], e["message"], e["count"])
                for e in self.event_log if e["namespace"] == namespace
                and (kind is None or e["kind"] == kind) and (name is None or e["name"] == name)]

    # -- controllers ------------------------------------------------------------------

    def monotonic(self) -> float:
        """The fake's virtual clock."""
        return self.clock

    def pause(self, seconds: float) -> None:
        """Advance the virtual clock and run one controller tick."""
        self.clock += seconds
        self.tick()

    def tick(self) -> None:
        """One pass of the StatefulSet controller, PVC binder, scheduler and kubelet."""
        for k, sts in sorted(self.objects.items()):
            if k.startswith("StatefulSet|"):
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
        owner = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                  "uid": sts["metadata"]["uid"], "controller": True}]
        for k, pod in list(self.objects.items()):
            if k.startswith(f"Pod|{ns}|{name}-"):
                refs = pod["metadata"].get("ownerReferences") or []
                idx = pod["metadata"].get("labels", {}).get("apps.kubernetes.io/pod-index", "")
                if any(r.get("uid") == sts["metadata"]["uid"] for r in refs) and \
                        idx.isdigit() and int(idx) >= replicas:
                    self.delete("Pod", pod["metadata"]["name"], ns)
        ready = 0
        for i in range(replicas):
            pod_name = f"{name}-{i}"
            claims = []
            for vct in spec.get("volumeClaimTemplates") or []:
                cname = f"{vct['metadata']['name']}-{pod_name}"
                claims.append({"name": vct["metadata"]["name"],
                               "persistentVolumeClaim": {"claimName": cname}})
                if _key("PersistentVolumeClaim", ns, cname) not in self.objects:
                    labels = {**(vct["metadata"].get("labels") or {}), **sel}
                    self._store({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                 "metadata": {"name": cname, "labels": labels},
                                 "spec": copy.deepcopy(vct.get("spec") or {}),
                                 "status": {"phase": "Pending"}}, ns)
            existing = self.objects.get(_key("Pod", ns, pod_name))
            if existing is not None:
                ready += _pod_ready(existing)
                continue
            denial = self._scc_denial(tpl.get("spec") or {}, ns)
            if denial:
                self._event(ns, "StatefulSet", name, "Warning", "FailedCreate",
                            f"create Pod {pod_name} in StatefulSet {name} failed error: "
                            f"pods \"{pod_name}\" is forbidden: {denial}")
                continue
            pspec = copy.deepcopy(tpl.get("spec") or {})
            pspec["hostname"] = pod_name
            pspec["subdomain"] = spec.get("serviceName", "")
            pspec["volumes"] = list(pspec.get("volumes") or []) + claims
            labels = {**((tpl.get("metadata") or {}).get("labels") or {}),
                      "statefulset.kubernetes.io/pod-name": pod_name,
                      "apps.kubernetes.io/pod-index": str(i)}
            self._store({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": pod_name, "labels": labels,
                                      "annotations": copy.deepcopy(
                                          (tpl.get("metadata") or {}).get("annotations") or {}),
                                      "ownerReferences": copy.deepcopy(owner)},
                         "spec": pspec,
                         "status": {"phase": "Pending", "conditions": [
                             {"type": "PodScheduled", "status": "False"}]}}, ns)
        sts["status"] = {"replicas": replicas, "readyReplicas": ready,
                         "observedGeneration": sts["metadata"].get("generation", 1)}

    def _scc_denial(self, pspec: Manifest, ns: str) -> str:
        """Why SCC admission rejects a pod spec ("" when admitted), as OpenShift says it."""
        if not self.openshift:
            return ""
        caps: set[str] = set()
        privileged = False
        for c in pspec.get("containers") or []:
            sc = c.get("securityContext") or {}
            caps |= set((sc.get("capabilities") or {}).get("add") or [])
            privileged = privileged or bool(sc.get("privileged"))
        if not caps and not privileged:
            return ""  # the restricted SCC admits it
        sa = pspec.get("serviceAccountName", "default")
        for k, scc in self.objects.items():
            if not k.startswith("SecurityContextConstraints|"):
                continue
            allowed = set(scc.get("allowedCapabilities") or [])
            if not caps <= allowed or (privileged and not scc.get("allowPrivilegedContainer")):
                continue
            if self._sa_may_use(scc["metadata"]["name"], f"system:serviceaccount:{ns}:{sa}",
                                ns, sa, scc):
                return ""
        return ("unable to validate against any security context constraint: "
                f"[capabilities.add: Invalid value: {sorted(caps)}: capability may not be added]")

    def _sa_may_use(self, scc_name: str, user: str, ns: str, sa: str, scc: Manifest) -> bool:
        if user in (scc.get("users") or []):
            return True
        for k, rb in self.objects.items():
            if not k.startswith(f"RoleBinding|{ns}|"):
                continue
            if not any(s.get("kind") == "ServiceAccount" and s.get("name") == sa
                       for s in rb.get("subjects") or []):
                continue
            ref = rb.get("roleRef") or {}
            role = self.objects.get(_key(ref.get("kind", "Role"), ns, ref.get("name", "")))
            for rule in (role or {}).get("rules") or []:
                if "use" in (rule.get("verbs") or []) and \
                        "securitycontextconstraints" in (rule.get("resources") or []) and \
                        scc_name in (rule.get("resourceNames") or [scc_name]):
                    return True
        return False

    def _bind(self, pvc: Manifest) -> None:
        if (pvc.get("status") or {}).get("phase") == "Bound":
            return
        ns = pvc["metadata"]["namespace"]
        sc = (pvc.get("spec") or {}).get("storageClassName") or self.default_storage_class
        if _key("StorageClass", None, sc) in self.objects:
            pvc["status"] = {"phase": "Bound"}
        else:
            self._event(ns, "PersistentVolumeClaim", pvc["metadata"]["name"], "Warning",
                        "ProvisioningFailed", f'storageclass.storage.k8s.io "{sc}" not found')

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
                    self._event(ns, "Pod", name, "Warning", "FailedScheduling",
                                f"0/{len(self._nodes())} nodes are available: pod has "
                                "unbound immediate PersistentVolumeClaims.")
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
            self._event(ns, "Pod", name, "Warning", "FailedScheduling",
                        f"0/{len(self._nodes())} nodes are available: {detail}.")
            return
        spec["nodeName"] = chosen
        pod["status"] = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "main", "restartCount": 0, "ready": False,
                                   "state": {"waiting": {"reason": "ContainerCreating"}}}]}
        self._event(ns, "Pod", name, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {chosen}")

    def _nodes(self) -> builtins.list[Manifest]:
        return [o for k, o in sorted(self.objects.items()) if k.startswith("Node|")]

    def _node_misfit(self, node: Manifest, pod: Manifest, want: dict[str, float]) -> str:
        nname = node["metadata"]["name"]
        conds = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
        if conds.get("Ready") != "True":
            return "node(s) were not ready"
        aff = pod["spec"].get("affinity") or {}
        req = ((aff.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
               or {}).get("nodeSelectorTerms") or []
        if req and not any(all(self._match_expr(node, e) for e in t.get("matchExpressions") or [])
                           for t in req):
            return "node(s) didn't match Pod's node affinity/selector"
        for lk, lv in (pod["spec"].get("nodeSelector") or {}).items():
            if (node["metadata"].get("labels") or {}).get(lk) != lv:
                return "node(s) didn't match Pod's node affinity/selector"
        on_node = [o for k, o in self.objects.items() if k.startswith("Pod|")
                   and o["spec"].get("nodeName") == nname and o is not pod]
        anti = (aff.get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") or []
        for term in anti:
            ml = (term.get("labelSelector") or {}).get("matchLabels") or {}
            if any(all((o["metadata"].get("labels") or {}).get(a) == b for a, b in ml.items())
                   for o in on_node):
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
                self._event(ns, "Pod", name, "Warning", "FailedCreatePodSandBox",
                            f"Failed to create pod sandbox: multus: cannot find network-attachment-"
                            f"definition {nns or ns}/{nname}")
                return
        images = [c.get("image", "") for c in pod["spec"].get("containers") or []]
        bad = [i for i in images if i in self.image_pull_failures]
        cs = status["containerStatuses"][0]
        if bad:
            cs["state"] = {"waiting": {"reason": "ImagePullBackOff"}}
            self._event(ns, "Pod", name, "Warning", "Failed",
                        f'Failed to pull image "{bad[0]}": ErrImagePull (fake registry)')
            return
        ready = name not in self.unready_pods
        cs.update({"ready": ready, "state": {"running": {"startedAt": f"t={self.clock:.0f}"}}})
        status["phase"] = "Running"
        status["conditions"] = [{"type": "PodScheduled", "status": "True"},
                                {"type": "Ready", "status": "True" if ready else "False"}]
        status["podIP"] = f"10.128.0.{len(self.objects) % 250 + 2}"
        self._event(ns, "Pod", name, "Normal", "Started", "Started container main")

    # -- filesystem, exec ---------------------------------------------------------------

    def _running_pod(self, pod: str, namespace: str) -> Manifest:
        self._check_reachable()
        obj = self.objects.get(_key("Pod", namespace, pod))
        if obj is None:
            raise NotFound(f'pods "{pod}" not found', kind="Pod", name=pod)
        if (obj.get("status") or {}).get("phase") != "Running":
            raise ApiError(f"pod {pod} is not running (phase "
                           f"{(obj.get('status') or {}).get('phase')}): cannot exec into it",
                           kind="Pod", name=pod)
        return obj

    def _volume_for(self, pod: Manifest, path: str) -> tuple[str, str]:
        """(volume id, path inside that volume) for an absolute path in the pod."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        best = ("", "/")
        for c in pod["spec"].get("containers") or []:
            for m in c.get("volumeMounts") or []:
                mp = m["mountPath"].rstrip("/") or "/"
                if (path == mp or path.startswith(mp + "/")) and len(mp) > len(best[1]):
                    best = (m["name"], mp)
        vname, mp = best
        rel = path[len(mp):].strip("/") if mp != "/" else path.strip("/")
        claim = (vols.get(vname, {}).get("persistentVolumeClaim") or {}).get("claimName")
        vid = f"pvc:{ns}/{claim}" if claim else f"pod:{ns}/{name}:{mp}"
        return vid, rel

    def pod_files(self, pod: str, namespace: str, root: str) -> dict[str, bytes]:
        """The files under ``root`` in a pod (relative path → content); for tests too."""
        vid, rel = self._volume_for(self._running_pod(pod, namespace), root.rstrip("/"))
        pre = f"{rel}/" if rel else ""
        return {p[len(pre):]: base64.b64decode(d) for p, d in self.volumes.get(vid, {}).items()
                if p.startswith(pre)}

    def write_pod_file(self, pod: str, namespace: str, path: str, data: bytes) -> None:
        """Create a file in a pod (as a process in it would)."""
        vid, rel = self._volume_for(self._running_pod(pod, namespace), path)
        self.volumes.setdefault(vid, {})[rel] = base64.b64encode(data).decode()

    def exec(self, pod: str, namespace: str, argv: Sequence[str], *,
             stdin: str | None = None, check: bool = True,
             timeout: float | None = None) -> ExecResult:
        """Run the commands the fake understands: the tree checksum and scripted ones
        (``pod_exec_responses[pod]`` before ``exec_responses``, longest prefix first)."""
        obj = self._running_pod(pod, namespace)
        self._require("create", "pods/exec")
        args = tuple(argv)
        self.calls.append(["exec", pod, *args])
        limit = self.exec_timeout if timeout is None else timeout
        if len(args) == 4 and args[:2] == ("python3", "-c") and args[2] == treehash.SCRIPT:
            vid, rel = self._volume_for(obj, args[3].rstrip("/"))
            pre = f"{rel}/" if rel else ""
            files = [(p[len(pre):], base64.b64decode(d))
                     for p, d in self.volumes.get(vid, {}).items() if p.startswith(pre)]
            res = ExecResult(args, 0, treehash.digest_files(files) + "\n")
        elif len(args) == 4 and args[:2] == ("python3", "-c") and args[2] in (
                treehash.LIST_SCRIPT, treehash.REMOVE_SCRIPT):
            res = self._tree_script(obj, args[2], args[3], stdin)
        else:
            res = ExecResult(args, 127, "", f"exec: \"{args[0] if args else ''}\": executable "
                             "file not found in $PATH (fake)")
            line = " ".join(args)
            for table in (self.pod_exec_responses.get(pod, {}), self.exec_responses):
                match = [(p, r) for p, r in table.items() if line.startswith(p)]
                if not match:
                    continue
                _, resp = max(match, key=lambda x: len(x[0]))
                if resp.get("hang"):
                    if math.isinf(limit):
                        raise InfraError(f"fake: exec in {pod} hangs and has no timeout: "
                                         "it would never return")
                    self.clock += limit
                    raise ExecTimeout(f"exec of {' '.join(args[:3])}", pod, limit)
                res = ExecResult(args, int(resp.get("rc", 0)), str(resp.get("stdout", "")),
                                 str(resp.get("stderr", "")))
                break
        if check and res.returncode != 0:
            raise ExecFailed(pod, res)
        return res

    def _tree_script(self, obj: Manifest, script: str, root: str,
                     stdin: str | None) -> ExecResult:
        """What LIST_SCRIPT / REMOVE_SCRIPT do in a real pod, on the fake's volume."""
        vid, rel = self._volume_for(obj, root.rstrip("/"))
        vol = self.volumes.setdefault(vid, {})
        pre = f"{rel}/" if rel else ""
        args = ("python3", "-c", script, root)
        if script == treehash.LIST_SCRIPT:
            listing = {p[len(pre):]: _listed(base64.b64decode(d))
                       for p, d in vol.items() if p.startswith(pre)
                       and not any(x in ("__pycache__", ".git") for x in p[len(pre):].split("/")[:-1])}
            return ExecResult(args, 0, json.dumps(listing, sort_keys=True))
        n = 0
        for rp in json.loads(stdin or "[]"):
            if rp.startswith("/") or ".." in rp.split("/"):
                continue
            if vol.pop(f"{pre}{rp}", None) is not None:
                n += 1
        return ExecResult(args, 0, f"{n}\n")

    def exec_stream(self, pod: str, namespace: str, argv: Sequence[str], out: Output, *,
                    timeout: float | None = None) -> int:
        """Like :meth:`exec` (no limit unless ``timeout``), passing each line to ``out``."""
        res = self.exec(pod, namespace, argv, check=False,
                        timeout=math.inf if timeout is None else timeout)
        for line in (res.stdout + res.stderr).splitlines():
            out(line)
        return res.returncode

    def rsync(self, local_dir: str, pod: str, namespace: str, remote_dir: str, *,
              exclude: Sequence[str] = (), timeout: float | None = None) -> None:
        """Copy a local tree into the pod's volume with rsync's exclude semantics, adding
        and updating only (as the real clients do: nothing in the pod is deleted)."""
        obj = self._running_pod(pod, namespace)
        self._require("create", "pods/exec")
        self.calls.append(["rsync", pod, local_dir, remote_dir])
        if pod in self.rsync_failures:
            return
        vid, rel = self._volume_for(obj, remote_dir.rstrip("/"))
        vol = self.volumes.setdefault(vid, {})
        pre = f"{rel}/" if rel else ""
        files = {f"{pre}{p}": d for p, d in _read_tree(local_dir).items()
                 if not _rsync_excluded(p, exclude)}
        for p, d in files.items():
            vol[p] = base64.b64encode(d).decode()

    def logs(self, pod: str, namespace: str, *, follow: bool = False,
             out: Output | None = None, tail: int | None = None) -> str:
        """The fake container log: the events of the pod, one per line (the last ``tail``)."""
        self._check_reachable()
        if _key("Pod", namespace, pod) not in self.objects:
            raise NotFound(f'pods "{pod}" not found', kind="Pod", name=pod)
        lines = [f"[fake] {e.reason}: {e.message}\n" for e in self.events(namespace, "Pod", pod)]
        text = "".join(lines if tail is None else lines[len(lines) - tail:] if tail else [])
        self.calls.append(["logs", pod, *(["-f"] if follow else []),
                           *([f"--tail={tail}"] if tail is not None else [])])
        if out is not None:
            for line in text.splitlines():
                out(line)
        return text

    def interactive(self, pod: str, namespace: str, argv: Sequence[str]) -> int:
        """Record an interactive session (there is no terminal in a fake)."""
        self._running_pod(pod, namespace)
        self.calls.append(["interactive", pod, *argv])
        return 0

    def port_forward(self, pod: str, namespace: str, ports: Sequence[tuple[int, int]]) -> int:
        """Record a port-forward and return as if interrupted at once."""
        self._running_pod(pod, namespace)
        self.calls.append(["port-forward", pod, *(f"{a}:{b}" for a, b in ports)])
        return 0

    def start_build(self, name: str, namespace: str, out: Output) -> int:
        """Run the scripted build of a BuildConfig that must exist."""
        self._check_reachable()
        if _key("BuildConfig", namespace, name) not in self.objects:
            raise NotFound(f'buildconfigs.build.openshift.io "{name}" not found',
                           kind="BuildConfig", name=name)
        self.calls.append(["start-build", name])
        b = self.builds.get(name, {"rc": 0, "log": f"build {name}-1 started\nPush successful\n"})
        for line in str(b["log"]).splitlines():
            out(line)
        return int(b["rc"])


def _pod_ready(pod: Manifest) -> int:
    """1 when a pod object is Ready, else 0."""
    conds = (pod.get("status") or {}).get("conditions") or []
    return int(any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds))
