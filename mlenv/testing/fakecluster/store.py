"""The fake's object store as the API server serves it: server-side apply with field
managers (conflicts, forced takeover, fields a manager stops applying go away, an apply
that changes nothing changes nothing), get, list with an equality label selector,
delete with owner-reference cascades, and events."""

from __future__ import annotations

import builtins
import copy
import json
from collections.abc import Collection, Sequence
from typing import Any, Literal

from mlenv.cluster.api import (
    FIELD_MANAGER,
    OPENSHIFT_KINDS,
    ApiError,
    ApplyResult,
    Conflict,
    DryRunItem,
    Event,
    Forbidden,
    Invalid,
    Manifest,
    NotFound,
    ObjectRef,
    Unread,
    dry_run_each,
    plural,
    read_each,
)
from mlenv.cluster.nodemarks import HOSTNAME_LABEL, MarkCall, NodeMarks, mark_calls
from mlenv.cluster.nodetell import EVENT_NAMESPACE, NodeTell, merge_condition, tell_calls
from mlenv.testing.fakecluster.admission import Admission
from mlenv.testing.fakecluster.state import CLUSTER_SCOPED, _key

# Kinds whose delete takes time on a real cluster (grace periods, finalizers); the rest go
# at once.
GRACEFUL_KINDS = frozenset({"Pod", "StatefulSet", "PersistentVolumeClaim"})

SERVER_META = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "finalizers",
)


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


_DECIMAL = (
    (18, "E"),
    (15, "P"),
    (12, "T"),
    (9, "G"),
    (6, "M"),
    (3, "k"),
    (0, ""),
    (-3, "m"),
    (-6, "u"),
    (-9, "n"),
)
_BINARY = ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki"))


def canonical_quantity(text: str) -> str:
    """A quantity as the API server stores it (apimachinery's canonical form): binary
    suffixes stay binary with the largest exact one (``1024Gi`` → ``1Ti``, ``2048Mi`` →
    ``2Gi``); decimal ones take the largest exact power of 1000 (``1000m`` → ``1``,
    ``1000`` → ``1k``); below 1024 a binary quantity is written in decimal. the fake
    kept the text as sent, so string comparisons that the real server breaks passed here.
    Exponent forms and sub-nano fractions are left as sent (never rendered by mlenv)."""
    from decimal import Decimal

    from mlenv.config.rules import parse_quantity

    v = parse_quantity(text)
    if v is None or not v.is_finite() or "e" in text.lower().rstrip("ei"):
        return text
    if v == 0:
        return "0"
    if text.endswith("i") and v == v.to_integral_value() and abs(v) >= 1024:
        for exp, suf in _BINARY:
            m = v / (2**exp)
            if m == m.to_integral_value():
                return f"{int(m)}{suf}"
    for exp, suf in _DECIMAL:
        m = v / (Decimal(10) ** exp)
        if m == m.to_integral_value():
            return f"{int(m)}{suf}"
    return text


def _canonical(obj: Any) -> Any:
    """``obj`` with every ``requests``/``limits`` map under ``resources`` (containers,
    claims, claim templates) and every ``sizeLimit`` in canonical form."""
    if isinstance(obj, list):
        return [_canonical(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if k == "resources" and isinstance(v, dict):
            out[k] = {
                rk: (
                    {q: canonical_quantity(str(x)) for q, x in rv.items()}
                    if rk in ("requests", "limits") and isinstance(rv, dict)
                    else _canonical(rv)
                )
                for rk, rv in v.items()
            }
        elif k == "sizeLimit" and isinstance(v, str):
            out[k] = canonical_quantity(v)
        else:
            out[k] = _canonical(v)
    return out


def _content(obj: Manifest) -> Manifest:
    """An object without server-populated metadata and status, for change detection."""
    o = copy.deepcopy(obj)
    for f in SERVER_META:
        o.get("metadata", {}).pop(f, None)
    o.pop("status", None)
    return o


class ObjectStore(Admission):
    """Identity and the object verbs of :class:`mlenv.cluster.api.ClusterClient`."""

    def server(self) -> str:
        """The fake's API server URL."""
        self._check_reachable()
        return self.server_url

    def whoami(self) -> str:
        """The fake's logged-in user."""
        self._check_reachable()
        assert self.user is not None
        return self.user

    def apply(
        self,
        manifest: Manifest,
        namespace: str | None,
        *,
        field_manager: str = FIELD_MANAGER,
        force_conflicts: bool = False,
        dry_run: bool = False,
        live: Manifest | None | Unread = Unread.UNREAD,
    ) -> ApplyResult:
        """Server-side apply with field ownership, conflicts and immutable fields (``live``
        is ignored: the fake judges the action against its own state, which is live)."""
        self._check_reachable()
        kind = manifest.get("kind", "")
        name = (manifest.get("metadata") or {}).get("name", "")
        if not kind or not name or not manifest.get("apiVersion"):
            raise Invalid("object has no apiVersion, kind or metadata.name", kind=kind, name=name)
        if kind == "Project" or (kind in OPENSHIFT_KINDS and not self.openshift):
            raise NotFound(f'no matches for kind "{kind}"', kind=kind, name=name)
        ns = (
            None if kind in CLUSTER_SCOPED else (namespace or manifest["metadata"].get("namespace"))
        )
        if kind not in CLUSTER_SCOPED and (not ns or not self._ns_exists(ns)):
            raise NotFound(f'namespaces "{ns}" not found', kind=kind, name=name)
        k = _key(kind, ns, name)
        if not dry_run and self.apply_failures.get(f"{kind}/{name}", 0) > 0:
            self.apply_failures[f"{kind}/{name}"] -= 1
            raise ApiError(
                f"Internal error occurred: failed calling webhook for {kind} "
                f"{name}: context deadline exceeded (fake, injected)",
                kind=kind,
                name=name,
            )
        # server-side apply is a PATCH: creating needs create, changing an existing one patch
        self._require("patch" if k in self.objects else "create", plural(kind), kind, name)
        if kind == "RoleBinding":
            self._refuse_escalation(manifest, ns, name)
        config = _canonical(copy.deepcopy(manifest))  # stored as the real server stores it
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
            raise Conflict(
                f"Apply failed with {len(conflicts)} conflict(s): {detail}",
                kind=kind,
                name=name,
                fields=conflicts,
            )
        old = self.objects.get(k)
        # fields no apply manager set (scheduler's nodeName, controller defaults) stay,
        # as they belong to other managers on a real server
        previous: Manifest = {}
        for cfg in self.managers.get(k, {}).values():
            previous = _merge(previous, cfg)
        applied_paths = set(_flatten(previous))
        kept: Manifest = {}
        if old is not None:
            foreign = {
                p: v
                for p, v in _flatten(_content(old)).items()
                if p not in applied_paths and not p.startswith("metadata.namespace")
            }
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
        if old is not None:
            self._refuse_update(kind, name, old, merged)
        if dry_run:
            return ApplyResult(
                kind,
                name,
                "created" if old is None else "configured",
                tuple(self.dry_run_warnings.get(kind, ())),
            )
        self.managers[k] = owners
        self._store(merged, ns)
        if kind == "PersistentVolumeClaim":
            self.objects[k].setdefault("status", {"phase": "Pending"})
        if kind == "BuildConfig" and old is None and self.builds_finish:
            # its ConfigChange trigger builds at once here; on OpenShift this takes tens of
            # minutes (builds_finish = False: the first build is still running)
            self._push_build(self.objects[k])
        return ApplyResult(kind, name, "created" if old is None else "configured")

    def _push_build(self, bc: Manifest) -> None:
        """A finished build: the BuildConfig's output tag appears in its ImageStream's
        status, as the registry reports a push."""
        ns = bc["metadata"].get("namespace")
        to = str((((bc.get("spec") or {}).get("output") or {}).get("to") or {}).get("name", ""))
        stream, _, tag = to.partition(":")
        live = self.objects.get(_key("ImageStream", ns, stream))
        if live is None:
            return
        tags = [
            t
            for t in (live.setdefault("status", {}).get("tags") or [])
            if t.get("tag") != (tag or "latest")
        ]
        tags.append(
            {
                "tag": tag or "latest",
                "items": [{"image": f"sha256:{len(self.builds_pushed) + 1:064x}", "generation": 1}],
            }
        )
        live["status"]["tags"] = tags
        self.builds_pushed.append(f"{ns}/{stream}:{tag or 'latest'}")

    def get(self, kind: str, name: str, namespace: str | None) -> Manifest | None:
        """A deep copy of one object, or None."""
        self._check_reachable()
        self._served(kind)
        self._require("get", plural(kind), kind, name)
        if kind == "Project":
            kind = "Namespace"
        obj = self.objects.get(_key(kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def dry_run_many(
        self, items: Sequence[DryRunItem], *, field_manager: str = FIELD_MANAGER
    ) -> list[ApplyResult | ApiError]:
        """Each item as :meth:`apply` answers its dry run alone (result or refusal)."""
        self._check_reachable()
        return dry_run_each(self.apply, items, field_manager)

    def get_many(self, refs: Sequence[ObjectRef]) -> dict[ObjectRef, Manifest | None]:
        """Each ref as :meth:`get` answers it; one :meth:`get` would refuse is left out."""
        self._check_reachable()
        return read_each(self.get, refs)

    def list(
        self, kind: str, namespace: str | None, selector: dict[str, str] | None = None
    ) -> list[Manifest]:
        """Objects of a kind in a namespace (all namespaces for None) matching the selector."""
        self._check_reachable()
        self._served(kind)
        self._require("list", plural(kind), kind)
        out = []
        for k, obj in sorted(self.objects.items()):
            okind, ons, _ = k.split("|", 2)
            if okind != kind or (
                namespace is not None and kind not in CLUSTER_SCOPED and ons != namespace
            ):
                continue
            labels = obj["metadata"].get("labels") or {}
            if all(labels.get(lk) == lv for lk, lv in (selector or {}).items()):
                out.append(copy.deepcopy(obj))
        return out

    def list_many(
        self, kinds: Sequence[str], namespace: str, selector: dict[str, str] | None = None
    ) -> dict[str, builtins.list[Manifest]]:
        """Each kind as :meth:`list` answers it (one call, as the real client's batch)."""
        return {k: self.list(k, namespace, selector) for k in dict.fromkeys(kinds)}

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None,
        *,
        cascade: Literal["background", "foreground", "orphan"] = "background",
    ) -> bool:
        """Delete an object; dependents too unless orphaned. PVCs are never dependents."""
        self._check_reachable()
        self._served(kind)
        self._require("delete", plural(kind), kind, name)
        k = _key(kind, namespace, name)
        if self.grace_s > 0 and kind in GRACEFUL_KINDS and k in self.objects:
            return self._terminate(k, cascade)
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

    def _terminate(self, k: str, cascade: str) -> bool:
        """A delete that takes time, as on a real cluster with ``grace_s`` set: a pod stays
        Terminating (``deletionTimestamp`` set) for its grace period; a foreground delete
        keeps its owner (finalizer ``foregroundDeletion``) until the dependents are gone; a
        claim a pod still mounts keeps its ``kubernetes.io/pvc-protection`` finalizer.
        :meth:`reap` removes them as time passes."""
        obj = self.objects[k]
        meta = obj["metadata"]
        if "deletionTimestamp" in meta:
            return True  # a second delete of a Terminating object changes nothing
        kind, ns, name = k.split("|", 2)
        meta["deletionTimestamp"] = f"t={self.clock + self.grace_s:.0f}"
        self.terminating[k] = self.clock + (self.grace_s if kind == "Pod" else 0.0)
        if kind == "Pod":
            return True
        if kind == "PersistentVolumeClaim":
            meta["finalizers"] = ["kubernetes.io/pvc-protection"]
            return True
        if cascade == "foreground":
            meta["finalizers"] = ["foregroundDeletion"]
        uid = meta["uid"]
        for ok, o in builtins.list(self.objects.items()):
            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or []):
                okind, ons, oname = ok.split("|", 2)
                self.delete(okind, oname, ons or None)
        if cascade != "foreground":
            self.objects.pop(k, None)
            self.managers.pop(k, None)
            self.terminating.pop(k, None)
        return True

    def reap(self) -> None:
        """Remove the Terminating objects whose time has come: pods past their grace
        period, then owners in foreground deletion with no dependent left, then claims no
        pod mounts any more (the garbage collector and the pvc-protection controller)."""
        for k, when in sorted(self.terminating.items()):
            if k.startswith("Pod|") and when <= self.clock:
                self._forget(k)
        for k in sorted(self.terminating):
            if k.startswith("Pod|") or k not in self.objects:
                continue
            uid = self.objects[k]["metadata"]["uid"]
            kind, ns, name = k.split("|", 2)
            if kind == "PersistentVolumeClaim":
                busy = any(
                    (v.get("persistentVolumeClaim") or {}).get("claimName") == name
                    for ok, pod in self.objects.items()
                    if ok.startswith(f"Pod|{ns}|")
                    for v in (pod.get("spec") or {}).get("volumes") or []
                )
            else:
                busy = any(
                    any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])
                    for o in self.objects.values()
                )
            if not busy:
                self._forget(k)

    def _forget(self, k: str) -> None:
        self.objects.pop(k, None)
        self.managers.pop(k, None)
        self.terminating.pop(k, None)
        kind, ns, name = k.split("|", 2)
        if kind == "Pod":
            for vid in [v for v in self.volumes if v.startswith(f"pod:{ns}/{name}:")]:
                del self.volumes[vid]
        if kind == "PersistentVolumeClaim":
            self.volumes.pop(f"pvc:{ns}/{name}", None)

    def mark_nodes(
        self,
        marks: Sequence[NodeMarks],
        *,
        remove: bool = False,
        by_hostname: Collection[str] = (),
    ) -> builtins.list[str]:
        """The quarantine label, annotation and taint on Nodes (``remove``: off), call by
        call as :func:`mark_calls` builds them (``calls`` gets ``[verb, NODE…]`` per call),
        each name as kubectl treats it: a node that does not exist, or a user without
        ``patch nodes``, is a line of its own and the other names are marked; adding the
        taint to a node that has it, or taking it off one that has not, is refused for
        that node (kubectl's words)."""
        return self.run_marks(mark_calls(marks, remove=remove, by_hostname=by_hostname))

    def run_marks(self, calls: Sequence[MarkCall]) -> builtins.list[str]:
        """Each call's mark node by node as kubectl puts it (see :meth:`mark_nodes`);
        ``label`` without ``--overwrite`` refuses a key that holds another value. A call
        choosing its nodes by hostname lists them first (``list nodes``) and passes over
        a name no node carries, as a selector does."""
        self._check_reachable()
        said: builtins.list[str] = []
        for call in calls:
            self.calls.append([call.verb, *call.nodes])
            names = list(call.nodes)
            if call.by_hostname:
                try:
                    self._require("list", "nodes")
                except Forbidden as e:
                    said.append(f"Error from server (Forbidden): {e}")
                    continue
                chosen = set(names)
                names = [
                    str(o["metadata"]["name"])
                    for k, o in sorted(self.objects.items())
                    if k.startswith("Node|")
                    and (o["metadata"].get("labels") or {}).get(HOSTNAME_LABEL) in chosen
                ]
            for name in names:
                try:
                    self._require("patch", "nodes", "Node", name)
                except Forbidden as e:
                    said.append(f"Error from server (Forbidden): {e}")
                    continue
                k = _key("Node", None, name)
                if k not in self.objects:
                    said.append(f'Error from server (NotFound): nodes "{name}" not found')
                    continue
                node = copy.deepcopy(self.objects[k])
                why = _put_mark(node, call.verb, call.mark, "--overwrite" in call.options)
                if why:
                    said.append(why)
                    continue
                self._store(node, None)
        return said

    def tell_nodes(self, tells: Sequence[NodeTell]) -> builtins.list[str]:
        """:meth:`tell_node` call by call as :func:`tell_calls` builds them (``calls`` gets
        ``[create-events|patch-status, NODE…]`` per call); a tell refused is a line."""
        said: builtins.list[str] = []
        by_node = {t.node: t for t in tells}
        for _words, body, nodes in tell_calls(tells):
            self.calls.append(["create-events" if body is not None else "patch-status", *nodes])
            for name in nodes:
                t = by_node[name]
                try:
                    if body is not None:
                        self._tell_event(t)
                    else:
                        self._condition(t)
                except ApiError as e:
                    said.append(f"Error from server: {e}")
        return said

    def tell_node(self, tell: NodeTell) -> None:
        """The Event about a Node (``create events`` in its namespace) and, with
        ``tell.condition``, the ``MlenvAcceptance`` condition merged into its status by type
        (``patch nodes/status``), each refused as the API server refuses it."""
        self._check_reachable()
        if tell.condition:  # the same validation the real client's argv gets
            tell.condition_command()
            self._require("patch", "nodes/status", "Node", tell.node)
            if _key("Node", None, tell.node) not in self.objects:
                raise NotFound(f'nodes "{tell.node}" not found (fake)', kind="Node", name=tell.node)
        self._tell_event(tell)
        self.calls.append(["tell-node", tell.node, tell.reason])
        if tell.condition:
            self._condition(tell)

    def _tell_event(self, tell: NodeTell) -> None:
        """``create`` one tell's Event (``create events`` in its namespace)."""
        _, body = tell.event_command()
        event = json.loads(body)
        self._require("create", "events", "Event", event["metadata"]["generateName"])
        self._event(
            EVENT_NAMESPACE,
            "Node",
            tell.node,
            event["type"],
            event["reason"],
            event["message"],
        )

    def _condition(self, tell: NodeTell) -> None:
        """``patch nodes/status`` of one Node's ``MlenvAcceptance`` condition."""
        self._check_reachable()
        tell.condition_command()
        self._require("patch", "nodes/status", "Node", tell.node)
        k = _key("Node", None, tell.node)
        if k not in self.objects:
            raise NotFound(f'nodes "{tell.node}" not found (fake)', kind="Node", name=tell.node)
        node = copy.deepcopy(self.objects[k])
        merge_condition(node, tell.condition_entry())
        self._store(node, None)

    def events(
        self,
        namespace: str,
        kind: str | None = None,
        name: str | None = None,
        *,
        warnings: bool = False,
    ) -> builtins.list[Event]:
        """Recorded events, filtered by involved object (and type)."""
        self._check_reachable()
        return [
            Event(
                e["kind"],
                e["name"],
                e["type"],
                e["reason"],
                e["message"],
                e["count"],
                e.get("uid", ""),
            )
            for e in self.event_log
            if e["namespace"] == namespace
            and (kind is None or e["kind"] == kind)
            and (name is None or e["name"] == name)
            and (not warnings or e["type"] == "Warning")
        ]


def _put_mark(node: Manifest, verb: str, mark: str, overwrite: bool = True) -> str | None:
    """One :class:`MarkCall`'s mark on a Node object in place, as kubectl ``label``,
    ``annotate`` and ``taint`` put it; what kubectl says when it refuses, else None."""
    meta = node["metadata"]
    name = meta["name"]
    if verb == "taint":
        spec, off = (mark[:-1], True) if mark.endswith("-") else (mark, False)
        kv, _, effect = spec.rpartition(":")
        key, _, value = kv.partition("=")
        taints = node.setdefault("spec", {}).get("taints") or []
        same = [t for t in taints if t.get("key") == key and t.get("effect") == effect]
        if off:
            if not same:
                return f'taint "{key}:{effect}" not found'
            node["spec"]["taints"] = [t for t in taints if t not in same]
        elif same:
            return (
                f"error: node {name} already has {key} taint(s) with same effect(s) "
                "and --overwrite is false"
            )
        else:
            node["spec"]["taints"] = [*taints, {"key": key, "value": value, "effect": effect}]
        return None
    where = meta.setdefault("labels" if verb == "label" else "annotations", {})
    if mark.endswith("-"):
        where.pop(mark[:-1], None)
    else:
        key, _, value = mark.partition("=")
        if not overwrite and where.get(key, value) != value:
            return f"error: '{key}' already has a value ({where[key]}), and --overwrite is false"
        where[key] = value
    return None
