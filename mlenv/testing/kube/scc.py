"""SCC admission on the kube tier's OpenShift flavour: OpenShift's SecurityContextConstraints
plugin as a mutating admission webhook of the tier.

A pod is admitted when an SCC that the requesting user or the pod's service account may
``use`` (RBAC, asked of the API server with SubjectAccessReviews; or the SCC's own
``users``/``groups``) allows it; the SCCs are tried by priority, then most restrictive
first, then name, as OpenShift orders them, and the first that allows the pod wins. The
pod is then mutated as OpenShift mutates it: the UID from the namespace's
``openshift.io/sa.scc.uid-range`` (MustRunAsRange), fsGroup and supplemental groups, the
SCC's required drops, no privilege escalation, its seccomp profile, and the annotation
``openshift.io/scc: <name>``. A pod no usable SCC allows is refused with OpenShift's words
("unable to validate against any security context constraint: [provider ...]").

New namespaces get their ``openshift.io/sa.scc.uid-range`` and
``supplemental-groups`` annotations here too (OpenShift's cluster-policy-controller gives
each namespace a block of 10000), from the same process, so no pod meets a namespace
without them.

Why a webhook and not a ValidatingAdmissionPolicy: a VAP only validates (the UID and the
annotation are mutations), and one VAP with a parameter per SCC requires every parameter
to pass, where OpenShift admits through any one SCC; the webhook does both as OpenShift
does. docs/deploy.md "The kube tier" says so too.

The admission logic (:func:`admit`) is pure; :class:`Server` is its HTTPS front, started
by plane.py as ``python -m mlenv.testing.kube scc TIER PORT``.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import logging
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

SCC_ANNOTATION = "openshift.io/scc"
REQUIRED_SCC_ANNOTATION = "openshift.io/required-scc"
UID_RANGE = "openshift.io/sa.scc.uid-range"
SUPPLEMENTAL_GROUPS = "openshift.io/sa.scc.supplemental-groups"
# OpenShift's defaults: blocks of 10000 from 1000000000 (uid-range "1000680000/10000")
UID_BASE = 1_000_000_000
UID_BLOCK = 10_000
UID_BLOCKS = 100_000 - 1
WEBHOOK = "scc-admission.kube-tier.mlenv.dev"
NAMESPACE_WEBHOOK = "namespace-uid-range.kube-tier.mlenv.dev"
# the control plane's own namespaces: never gated (no pods of ours run there)
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")

log = logging.getLogger("mlenv.kube.scc")


def scc_object(name: str, **fields: Any) -> Obj:
    """An SCC named ``name`` that allows nothing beyond its ``fields`` (OpenShift's fields,
    each host feature off, no capability, no user or group)."""
    base: Obj = {
        "apiVersion": "security.openshift.io/v1",
        "kind": "SecurityContextConstraints",
        "metadata": {"name": name},
        "priority": None,
        "allowHostDirVolumePlugin": False,
        "allowHostIPC": False,
        "allowHostNetwork": False,
        "allowHostPID": False,
        "allowHostPorts": False,
        "allowPrivilegeEscalation": False,
        "allowPrivilegedContainer": False,
        "allowedCapabilities": None,
        "defaultAddCapabilities": None,
        "readOnlyRootFilesystem": False,
        "requiredDropCapabilities": None,
        "users": [],
        "groups": [],
    }
    base.update(fields)
    return base


def default_sccs() -> list[Obj]:
    """What the OpenShift flavour ships at ``up``: restricted-v2 (every authenticated user
    and service account may use it, through the ClusterRole and binding OpenShift ships)
    and privileged (cluster admins only, and whoever is bound to
    ``system:openshift:scc:privileged``, as the product's ``requires_privileged_scc``
    does). Their rules are OpenShift 4's."""
    restricted = scc_object(
        "restricted-v2",
        metadata={
            "name": "restricted-v2",
            "annotations": {
                "kubernetes.io/description": (
                    "restricted-v2 denies access to all host features and requires pods to "
                    "be run with a UID, and SELinux context that are allocated to the "
                    "namespace (as OpenShift ships it; enforced by the kube tier)"
                )
            },
        },
        allowedCapabilities=["NET_BIND_SERVICE"],
        requiredDropCapabilities=["ALL"],
        runAsUser={"type": "MustRunAsRange"},
        seLinuxContext={"type": "MustRunAs"},
        fsGroup={"type": "MustRunAs"},
        supplementalGroups={"type": "RunAsAny"},
        seccompProfiles=["runtime/default"],
        volumes=[
            "configMap",
            "csi",
            "downwardAPI",
            "emptyDir",
            "ephemeral",
            "persistentVolumeClaim",
            "projected",
            "secret",
        ],
    )
    privileged = scc_object(
        "privileged",
        allowHostDirVolumePlugin=True,
        allowHostIPC=True,
        allowHostNetwork=True,
        allowHostPID=True,
        allowHostPorts=True,
        allowPrivilegeEscalation=True,
        allowPrivilegedContainer=True,
        allowedCapabilities=["*"],
        allowedUnsafeSysctls=["*"],
        runAsUser={"type": "RunAsAny"},
        seLinuxContext={"type": "RunAsAny"},
        fsGroup={"type": "RunAsAny"},
        supplementalGroups={"type": "RunAsAny"},
        seccompProfiles=["*"],
        volumes=["*"],
        users=["system:admin"],
        groups=["system:cluster-admins", "system:nodes", "system:masters"],
    )
    roles = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"system:openshift:scc:{name}"},
            "rules": [
                {
                    "apiGroups": ["security.openshift.io"],
                    "resources": ["securitycontextconstraints"],
                    "resourceNames": [name],
                    "verbs": ["use"],
                }
            ],
        }
        for name in ("restricted-v2", "privileged")
    ]
    out = [restricted, privileged, *roles]
    return [
        *out,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:openshift:scc:restricted-v2"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:openshift:scc:restricted-v2",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Group",
                    "name": "system:authenticated",
                }
            ],
        },
    ]


def webhooks(ca_pem: str, port: int) -> Obj:
    """The MutatingWebhookConfiguration: pods on create (SCC admission) and namespaces on
    create (their UID block). ``Fail``: as on OpenShift, where the plugin is in the API
    server, no pod is admitted past it."""
    bundle = base64.b64encode(ca_pem.encode()).decode()
    not_system = {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": list(SYSTEM_NAMESPACES),
            }
        ]
    }

    def hook(name: str, path: str, resource: str) -> Obj:
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "reinvocationPolicy": "Never",
            "namespaceSelector": not_system,
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle},
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": [resource],
                    "scope": "*",
                }
            ],
        }

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "kube-tier-openshift-scc"},
        "webhooks": [
            hook(WEBHOOK, "/pods", "pods"),
            hook(NAMESPACE_WEBHOOK, "/namespaces", "namespaces"),
        ],
    }


# ---------------------------------------------------------------------------------------
# The admission decision (pure)


@dataclass
class Decision:
    """``scc`` admitted the pod, mutated to ``pod``; or ``reasons`` per SCC refused it."""

    pod: Obj | None = None
    scc: str = ""
    reasons: list[str] = field(default_factory=list)

    @property
    def admitted(self) -> bool:
        return bool(self.scc)


def parse_range(text: str) -> tuple[int, int] | None:
    """``"1000680000/10000"`` (OpenShift's block form) or ``"1000680000-1000689999"``:
    (first, last), or None when it is neither."""
    text = (text or "").split(",")[0].strip()
    try:
        if "/" in text:
            start, size = (int(x) for x in text.split("/", 1))
            return (start, start + size - 1) if size > 0 and start >= 0 else None
        if "-" in text:
            start, end = (int(x) for x in text.split("-", 1))
            return (start, end) if 0 <= start <= end else None
    except ValueError:
        return None
    return None


def _strategy(scc: Obj, key: str) -> str:
    return str((scc.get(key) or {}).get("type") or "RunAsAny")


def _cap(name: str) -> str:
    n = str(name).upper()
    return n[4:] if n.startswith("CAP_") else n


def _volume_type(vol: Obj) -> str:
    for k in vol:
        if k != "name":
            return str(k)
    return "emptyDir"


def _seccomp_name(profile: Obj | None) -> str:
    if not profile:
        return ""
    t = str(profile.get("type") or "")
    if t == "RuntimeDefault":
        return "runtime/default"
    if t == "Unconfined":
        return "unconfined"
    if t == "Localhost":
        return f"localhost/{profile.get('localhostProfile', '')}"
    return t


def _seccomp_allowed(name: str, allowed: list[str]) -> bool:
    if "*" in allowed or name in allowed:
        return True
    if name == "runtime/default" and "docker/default" in allowed:
        return True
    return name.startswith("localhost/") and "localhost/*" in allowed


def points(scc: Obj) -> int:
    """How permissive an SCC is (lower: more restrictive), the order OpenShift tries SCCs
    of one priority in: privileged and host access weigh most, then the volumes it allows,
    then its UID strategy, then capabilities. (OpenShift's scale, simplified.)"""
    p = 0
    if scc.get("allowPrivilegedContainer"):
        p += 1_000_000
    if any(
        scc.get(k) for k in ("allowHostNetwork", "allowHostPorts", "allowHostPID", "allowHostIPC")
    ):
        p += 400_000
    vols = set(scc.get("volumes") or [])
    if "*" in vols or "hostPath" in vols or scc.get("allowHostDirVolumePlugin"):
        p += 100_000
    elif vols - {
        "configMap",
        "downwardAPI",
        "emptyDir",
        "persistentVolumeClaim",
        "projected",
        "secret",
        "csi",
        "ephemeral",
    }:
        p += 50_000
    p += {"RunAsAny": 40_000, "MustRunAsNonRoot": 30_000, "MustRunAsRange": 20_000}.get(
        _strategy(scc, "runAsUser"), 10_000
    )
    caps = [_cap(c) for c in scc.get("allowedCapabilities") or []]
    p += 4_000 if "*" in caps else 300 * len(caps)
    p += 5_000 * len(scc.get("defaultAddCapabilities") or [])
    return p


def order(sccs: list[Obj]) -> list[Obj]:
    """By priority (highest first, none = 0), then most restrictive, then name."""
    return sorted(
        sccs,
        key=lambda s: (-(s.get("priority") or 0), points(s), str(s["metadata"]["name"])),
    )


def _group_range(scc: Obj, key: str, ns_ann: dict[str, str]) -> tuple[int, int] | str:
    ranges = (scc.get(key) or {}).get("ranges") or []
    if ranges:
        r = ranges[0]
        return int(r.get("min", 0)), int(r.get("max", 0))
    for ann in (SUPPLEMENTAL_GROUPS, UID_RANGE):
        got = parse_range(ns_ann.get(ann, ""))
        if got:
            return got
    return f"unable to find annotation {SUPPLEMENTAL_GROUPS}"


def _uid_range(scc: Obj, ns_ann: dict[str, str]) -> tuple[int, int] | str:
    ru = scc.get("runAsUser") or {}
    if ru.get("uidRangeMin") is not None and ru.get("uidRangeMax") is not None:
        return int(ru["uidRangeMin"]), int(ru["uidRangeMax"])
    got = parse_range(ns_ann.get(UID_RANGE, ""))
    return got if got else f"unable to find annotation {UID_RANGE}"


def _host_and_volumes(spec: Obj, scc: Obj) -> list[str]:
    errs = []
    for field_, allow, what in (
        ("hostNetwork", "allowHostNetwork", "Host network"),
        ("hostPID", "allowHostPID", "Host PID"),
        ("hostIPC", "allowHostIPC", "Host IPC"),
    ):
        if spec.get(field_) and not scc.get(allow):
            errs.append(
                f"spec.securityContext.{field_}: Invalid value: true: {what} is not allowed to be used"
            )
    allowed_vols = set(scc.get("volumes") or [])
    for i, vol in enumerate(spec.get("volumes") or []):
        vt = _volume_type(vol)
        if vt == "hostPath" and not scc.get("allowHostDirVolumePlugin"):
            errs.append(
                f'spec.volumes[{i}]: Invalid value: "hostPath": hostPath volumes are not '
                "allowed to be used"
            )
        elif "*" not in allowed_vols and vt not in allowed_vols:
            errs.append(
                f'spec.volumes[{i}]: Invalid value: "{vt}": {vt} volumes are not allowed to be used'
            )
    return errs


def _pod_groups(psc: Obj, scc: Obj, ns_ann: dict[str, str]) -> list[str]:
    """fsGroup and supplemental groups: assigned from the range when unset (MustRunAs),
    refused outside it."""
    errs = []
    if _strategy(scc, "fsGroup") == "MustRunAs":
        rng = _group_range(scc, "fsGroup", ns_ann)
        if isinstance(rng, str):
            errs.append(rng)
        elif psc.get("fsGroup") is None:
            psc["fsGroup"] = rng[0]
        elif not rng[0] <= int(psc["fsGroup"]) <= rng[1]:
            errs.append(
                f"spec.securityContext.fsGroup: Invalid value: []int64{{{psc['fsGroup']}}}: "
                f"{psc['fsGroup']} is not an allowed group"
            )
    if _strategy(scc, "supplementalGroups") == "MustRunAs":
        rng = _group_range(scc, "supplementalGroups", ns_ann)
        if isinstance(rng, str):
            errs.append(rng)
        elif not psc.get("supplementalGroups"):
            psc["supplementalGroups"] = [rng[0]]
        else:
            errs += [
                f"spec.securityContext.supplementalGroups: Invalid value: []int64{{{g}}}: "
                f"{g} is not an allowed group"
                for g in psc["supplementalGroups"]
                if not rng[0] <= int(g) <= rng[1]
            ]
    return errs


def _pod_seccomp(psc: Obj, seccomps: list[str]) -> list[str]:
    """The pod's seccomp profile: the SCC's first when unset, refused when not allowed."""
    if not seccomps:
        return []
    name = _seccomp_name(psc.get("seccompProfile"))
    if not name and "*" not in seccomps:
        first = seccomps[0]
        psc["seccompProfile"] = (
            {"type": "RuntimeDefault"}
            if first in ("runtime/default", "docker/default")
            else {"type": "Localhost", "localhostProfile": first.split("/", 1)[1]}
            if first.startswith("localhost/")
            else {"type": "Unconfined"}
        )
    elif name and not _seccomp_allowed(name, seccomps):
        return [
            f'spec.securityContext.seccompProfile.type: Invalid value: "{name}": '
            f"{name} is not an allowed seccomp profile. Valid values are {', '.join(seccomps)}"
        ]
    return []


def _capabilities(sc: Obj, at: str, scc: Obj) -> list[str]:
    """Added capabilities must be allowed (or default); the SCC's defaults are added and
    its required drops dropped."""
    allowed = {_cap(c) for c in scc.get("allowedCapabilities") or []}
    default = [_cap(c) for c in scc.get("defaultAddCapabilities") or []]
    required_drop = [_cap(c) for c in scc.get("requiredDropCapabilities") or []]
    caps = sc.get("capabilities") or {}
    add = [_cap(x) for x in caps.get("add") or []]
    errs = [
        f'.{at}.capabilities.add: Invalid value: "{cap}": capability may not be added'
        for cap in add
        if "*" not in allowed and cap not in allowed and cap not in default
    ]
    drop = [_cap(x) for x in caps.get("drop") or []]
    new_add = add + [d for d in default if d not in add and d not in drop]
    new_drop = drop + [d for d in required_drop if d not in drop and d not in new_add]
    if new_add or new_drop:
        sc["capabilities"] = {
            **({"add": new_add} if new_add else {}),
            **({"drop": new_drop} if new_drop else {}),
        }
    return errs


def _container(c: Obj, at: str, scc: Obj, seccomps: list[str]) -> list[str]:
    """Privilege, capabilities, host ports, privilege escalation, read-only root and
    seccomp of one container (its securityContext mutated in place)."""
    sc = c.setdefault("securityContext", {})
    errs = []
    if sc.get("privileged") and not scc.get("allowPrivilegedContainer"):
        errs.append(f".{at}.privileged: Invalid value: true: Privileged containers are not allowed")
    errs += _capabilities(sc, at, scc)
    for j, port in enumerate(c.get("ports") or []):
        if port.get("hostPort") and not scc.get("allowHostPorts"):
            errs.append(
                f".{at}.ports[{j}].hostPort: Invalid value: {port['hostPort']}: Host "
                "ports are not allowed to be used"
            )
    if scc.get("allowPrivilegeEscalation") is False:
        if sc.get("allowPrivilegeEscalation") is True:
            errs.append(
                f".{at}.allowPrivilegeEscalation: Invalid value: true: Allowing "
                "privilege escalation for containers is not allowed"
            )
        sc["allowPrivilegeEscalation"] = False
    elif (
        sc.get("allowPrivilegeEscalation") is None
        and scc.get("defaultAllowPrivilegeEscalation") is not None
    ):
        sc["allowPrivilegeEscalation"] = bool(scc["defaultAllowPrivilegeEscalation"])
    if scc.get("readOnlyRootFilesystem"):
        if sc.get("readOnlyRootFilesystem") is False:
            errs.append(
                f".{at}.readOnlyRootFilesystem: Invalid value: false: "
                "ReadOnlyRootFilesystem must be set to true"
            )
        sc["readOnlyRootFilesystem"] = True
    name = _seccomp_name(sc.get("seccompProfile"))
    if name and seccomps and not _seccomp_allowed(name, seccomps):
        errs.append(
            f'.{at}.seccompProfile.type: Invalid value: "{name}": {name} is not an '
            "allowed seccomp profile"
        )
    return errs


def _container_uid(
    sc: Obj, at: str, scc: Obj, psc: Obj, uid_rng: tuple[int, int] | None
) -> list[str]:
    """The container's UID by the SCC's runAsUser strategy: the range's first UID (or the
    SCC's UID) when unset, refused when outside; MustRunAsNonRoot refuses root."""
    ru = _strategy(scc, "runAsUser")
    uid = sc.get("runAsUser", psc.get("runAsUser"))
    non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
    if ru == "MustRunAsRange" and uid_rng is not None:
        if uid is None:
            sc["runAsUser"] = uid_rng[0]
        elif not uid_rng[0] <= int(uid) <= uid_rng[1]:
            return [
                f".{at}.runAsUser: Invalid value: {uid}: must be in the ranges: "
                f"[{uid_rng[0]}, {uid_rng[1]}]"
            ]
    elif ru == "MustRunAs":
        want = (scc.get("runAsUser") or {}).get("uid")
        if uid is None and want is not None:
            sc["runAsUser"] = int(want)
        elif uid is not None and want is not None and int(uid) != int(want):
            return [f".{at}.runAsUser: Invalid value: {uid}: must be: {want}"]
    elif ru == "MustRunAsNonRoot":
        if uid is not None and int(uid) == 0:
            return [f".{at}.runAsUser: Invalid value: 0: running with the root UID is forbidden"]
        if uid is None and non_root is False:
            return [f".{at}.runAsNonRoot: Invalid value: false: must be true"]
        if uid is None and non_root is None:
            sc["runAsNonRoot"] = True
    return []


def try_scc(pod: Obj, scc: Obj, ns_ann: dict[str, str]) -> tuple[Obj | None, list[str]]:
    """The pod as ``scc`` mutates it, or the reasons it refuses it (OpenShift's field
    paths and words)."""
    p = copy.deepcopy(pod)
    spec = p.setdefault("spec", {})
    psc = spec.get("securityContext") or {}
    seccomps = list(scc.get("seccompProfiles") or [])
    errs = _host_and_volumes(spec, scc) + _pod_groups(psc, scc, ns_ann)
    errs += _pod_seccomp(psc, seccomps)
    uid_rng: tuple[int, int] | None = None
    if _strategy(scc, "runAsUser") == "MustRunAsRange":
        got = _uid_range(scc, ns_ann)
        if isinstance(got, str):
            errs.append(got)
        else:
            uid_rng = got
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            at = f"{kind}[{i}]"
            errs += _container(c, at, scc, seccomps)
            errs += _container_uid(c["securityContext"], at, scc, psc, uid_rng)
            if not c["securityContext"]:
                del c["securityContext"]
    if psc:
        spec["securityContext"] = psc
    if errs:
        return None, errs
    meta = p.setdefault("metadata", {})
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        SCC_ANNOTATION: scc["metadata"]["name"],
    }
    return p, []


def admit(
    pod: Obj,
    sccs: list[Obj],
    ns_ann: dict[str, str],
    may_use: Callable[[Obj], bool],
) -> Decision:
    """OpenShift's choice: the SCCs in :func:`order` (only the one the pod's
    ``openshift.io/required-scc`` names, when it names one); the first the user or the
    service account may use (``may_use``) and that allows the pod admits it, mutated."""
    required = ((pod.get("metadata") or {}).get("annotations") or {}).get(REQUIRED_SCC_ANNOTATION)
    if required:
        sccs = [s for s in sccs if s["metadata"]["name"] == required]
        if not sccs:
            return Decision(reasons=[f'required scc "{required}" not found'])
    reasons = []
    for scc in order(sccs):
        name = scc["metadata"]["name"]
        if not may_use(scc):
            reasons.append(f'provider "{name}": Forbidden: not usable by user or serviceaccount')
            continue
        mutated, errs = try_scc(pod, scc, ns_ann)
        if mutated is not None:
            return Decision(pod=mutated, scc=name)
        reasons.append(f"provider {name}: " + ", ".join(errs))
    return Decision(reasons=reasons)


def refusal(pod_name: str, decision: Decision) -> str:
    """OpenShift's message for a pod no SCC admits."""
    return (
        f'pods "{pod_name}" is forbidden: unable to validate against any security context '
        f"constraint: [{', '.join(decision.reasons)}]"
    )


def listed_in_scc(scc: Obj, user: str, groups: list[str]) -> bool:
    """The SCC's own ``users``/``groups`` fields (OpenShift's older grant, still honoured)."""
    return user in (scc.get("users") or []) or bool(set(groups) & set(scc.get("groups") or []))


def sa_identity(namespace: str, sa: str) -> tuple[str, list[str]]:
    return (
        f"system:serviceaccount:{namespace}:{sa}",
        ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
    )


def json_patch(old: Obj, new: Obj) -> list[Obj]:
    """The patch from the admitted pod to its mutated form: its annotations and its spec,
    each replaced whole (what the SCC changes lives only there)."""
    ops: list[Obj] = []
    if not old.get("metadata", {}).get("annotations"):
        ops.append(
            {"op": "add", "path": "/metadata/annotations", "value": new["metadata"]["annotations"]}
        )
    else:
        ops.append(
            {
                "op": "replace",
                "path": "/metadata/annotations",
                "value": new["metadata"]["annotations"],
            }
        )
    if old.get("spec") != new.get("spec"):
        ops.append({"op": "replace", "path": "/spec", "value": new["spec"]})
    return ops


def next_block(taken: list[str]) -> int:
    """The first UID block (its first UID) that no namespace's uid-range holds."""
    used = set()
    for text in taken:
        got = parse_range(text)
        if got and got[0] >= UID_BASE:
            used.add((got[0] - UID_BASE) // UID_BLOCK)
    for i in range(UID_BLOCKS):
        if i not in used:
            return UID_BASE + i * UID_BLOCK
    raise RuntimeError("no free UID block")


# ---------------------------------------------------------------------------------------
# The server


class Api:
    """The API server as the admin, over one kept-alive TLS connection per thread."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path) -> None:
        host, _, port = server.removeprefix("https://").partition(":")
        self.host, self.port = host, int(port or 443)
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.ctx.load_cert_chain(str(cert), str(key))
        self.local = threading.local()

    def call(self, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
        for attempt in (0, 1):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = http.client.HTTPSConnection(
                    self.host, self.port, context=self.ctx, timeout=5
                )
                self.local.conn = conn
            try:
                data = json.dumps(body).encode() if body is not None else None
                conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
                res = conn.getresponse()
                raw = res.read()
                return res.status, json.loads(raw or b"{}")
            except (OSError, http.client.HTTPException, ValueError):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def allowed(
        self, user: str, groups: list[str], ns: str, scc: str, extra: Obj | None = None
    ) -> bool:
        review: Obj = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": groups,
                "resourceAttributes": {
                    "group": "security.openshift.io",
                    "resource": "securitycontextconstraints",
                    "name": scc,
                    "verb": "use",
                    "namespace": ns,
                },
            },
        }
        if extra:
            review["spec"]["extra"] = extra
        code, out = self.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        return code == 201 and bool((out.get("status") or {}).get("allowed"))


class Admission:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.ns_lock = threading.Lock()
        self.given: list[str] = []  # blocks handed out by this process, not yet listed

    def pod(self, req: Obj) -> Obj:
        pod = req.get("object") or {}
        ns = str(req.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "")
        name = str((pod.get("metadata") or {}).get("name") or req.get("name") or "")
        if not name:
            name = str((pod.get("metadata") or {}).get("generateName") or "")
        code, nsobj = self.api.call("GET", f"/api/v1/namespaces/{ns}")
        if code != 200:
            return _deny(f"namespace {ns}: HTTP {code}", 500)
        ns_ann = (nsobj.get("metadata") or {}).get("annotations") or {}
        code, listed = self.api.call(
            "GET", "/apis/security.openshift.io/v1/securitycontextconstraints"
        )
        if code != 200:
            return _deny(f"listing SecurityContextConstraints: HTTP {code}", 500)
        info = req.get("userInfo") or {}
        user, groups = str(info.get("username", "")), list(info.get("groups") or [])
        sa = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
        sa_user, sa_groups = sa_identity(ns, sa)

        def may_use(scc: Obj) -> bool:
            n = scc["metadata"]["name"]
            return (
                listed_in_scc(scc, user, groups)
                or listed_in_scc(scc, sa_user, sa_groups)
                or self.api.allowed(user, groups, ns, n, info.get("extra"))
                or self.api.allowed(sa_user, sa_groups, ns, n)
            )

        decision = admit(pod, list(listed.get("items") or []), ns_ann, may_use)
        if not decision.admitted or decision.pod is None:
            log.info("refused %s/%s: %s", ns, name, decision.reasons)
            return _deny(refusal(name, decision), 403)
        log.info("admitted %s/%s under %s", ns, name, decision.scc)
        return _patch(json_patch(pod, decision.pod))

    def namespace(self, req: Obj) -> Obj:
        obj = req.get("object") or {}
        ann = (obj.get("metadata") or {}).get("annotations") or {}
        if parse_range(ann.get(UID_RANGE, "")):
            return {"allowed": True}
        with self.ns_lock:
            code, listed = self.api.call("GET", "/api/v1/namespaces")
            if code != 200:
                return _deny(f"listing namespaces: HTTP {code}", 500)
            taken = [
                ((n.get("metadata") or {}).get("annotations") or {}).get(UID_RANGE, "")
                for n in listed.get("items") or []
            ]
            start = next_block(taken + self.given)
            block = f"{start}/{UID_BLOCK}"
            self.given = [*self.given[-999:], block]
        new_ann = {**ann, UID_RANGE: block, SUPPLEMENTAL_GROUPS: block}
        op = "replace" if (obj.get("metadata") or {}).get("annotations") else "add"
        return _patch([{"op": op, "path": "/metadata/annotations", "value": new_ann}])


def _deny(message: str, code: int) -> Obj:
    return {
        "allowed": False,
        "status": {
            "code": code,
            "reason": "Forbidden" if code == 403 else "InternalError",
            "message": message,
        },
    }


def _patch(ops: list[Obj]) -> Obj:
    b64 = base64.b64encode(json.dumps(ops).encode()).decode()
    return {"allowed": True, "patchType": "JSONPatch", "patch": b64}


def serve(tier: Path, port: int) -> None:
    """Serve the webhook on 127.0.0.1:``port`` with the tier's serving certificate."""
    state = json.loads((tier / "scc-admission.json").read_text())
    pki = tier / "pki"
    api = Api(state["server"], pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
    adm = Admission(api)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            try:
                length = int(self.headers.get("Content-Length") or 0)
                review = json.loads(self.rfile.read(length) or b"{}")
                req = review.get("request") or {}
                if self.path.startswith("/pods"):
                    resp = adm.pod(req)
                elif self.path.startswith("/namespaces"):
                    resp = adm.namespace(req)
                else:
                    resp = _deny(f"no such hook {self.path}", 404)
            except Exception as e:  # one bad review must not take the server down
                log.exception("admission failed")
                resp = _deny(f"kube tier SCC admission failed: {e}", 500)
                req = {}
            resp["uid"] = req.get("uid", "")
            body = json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    httpd.daemon_threads = True
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(pki / "serving.crt"), str(pki / "serving.key"))
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    log.info("SCC admission serving on 127.0.0.1:%d", port)
    httpd.serve_forever()


def main(argv: list[str]) -> int:
    tier, port = argv
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    serve(Path(tier), int(port))
    return 0
