"""Admission in the fake: RBAC (``denied`` pairs, ``auth can-i``, service accounts and
SCCs from live RoleBindings), the kinds a plain Kubernetes API does not serve, SCC
admission of pod specs, and the fields the API server refuses to update."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from mlenv.cluster.api import (
    OPENSHIFT_KINDS,
    Forbidden,
    Invalid,
    Manifest,
    NotFound,
    Question,
    plural,
)
from mlenv.testing.fakecluster.state import FakeState, _key

STS_IMMUTABLE = ("selector", "volumeClaimTemplates", "serviceName", "podManagementPolicy")


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


class Admission(FakeState):
    """Who may do what, and which updates the API server refuses."""

    def can_i(
        self,
        verb: str,
        resource: str,
        namespace: str | None = None,
        *,
        as_user: str | None = None,
        subresource: str | None = None,
    ) -> bool:
        """False for the ``"verb resource"`` pairs listed in ``denied`` (API group ignored;
        a subresource is listed ``"create pods/exec"``). As a service account, "use SCC"
        is answered from the live SCC and RoleBindings; ``"impersonate serviceaccounts"``
        in ``denied`` → Forbidden.

        As the real API server reads ``auth can-i``: ``RESOURCE/NAME`` names an
        object (``pods/exec`` is a pod named exec, answered by the ``pods`` permission);
        a subresource is asked only with ``subresource`` (``--subresource=exec``)."""
        self._check_reachable()
        base, _, name = resource.partition("/")
        base = base.split(".")[0]
        if as_user is not None:
            if "impersonate serviceaccounts" in self.denied:
                raise Forbidden(
                    f'serviceaccounts "{as_user}" is forbidden: User "{self.user}" '
                    'cannot impersonate resource "serviceaccounts" (fake)'
                )
            if verb == "use" and base == "securitycontextconstraints" and name:
                _, _, rest = as_user.partition("system:serviceaccount:")
                ns, _, sa = rest.partition(":")
                scc = self.objects.get(_key("SecurityContextConstraints", None, name))
                return scc is not None and self._sa_may_use(name, as_user, ns, sa, scc)
            return True
        if subresource:
            return f"{verb} {base}/{subresource}" not in self.denied
        return f"{verb} {base}" not in self.denied

    def can_i_many(self, questions: Sequence[Question]) -> list[bool]:
        """Each question as :meth:`can_i` answers it (the real client asks them in one
        List of SelfSubjectAccessReviews; the fake kubectl answers that with this logic)."""
        self._check_reachable()
        return [
            self.can_i(q.verb, q.resource, q.namespace, subresource=q.subresource)
            for q in questions
        ]

    def _require(self, verb: str, resource: str, kind: str = "", name: str = "") -> None:
        """Forbidden (403) naming the object, as the API server words it, unless allowed
        (``resource`` may be ``pods/exec``: here always the subresource, as a request to
        it is)."""
        base, _, sub = resource.partition("/")
        if not self.can_i(verb, base, subresource=sub or None):
            what = f'{resource} "{name}"' if name else resource
            raise Forbidden(
                f'{what} is forbidden: User "{self.user}" cannot {verb} '
                f'resource "{resource}" (fake)',
                kind=kind,
                name=name,
            )

    def _refuse_escalation(self, binding: Manifest, ns: str | None, name: str) -> None:
        """RBAC's escalation check, as the real API server runs it on every create or
        update of a RoleBinding (dry runs too): binding a role needs ``bind`` (or
        ``escalate``) on it, or holding every rule it grants. the fake accepted any
        RoleBinding create/patch allowed, and a non-admin's RDMA deploy that the real
        server refused passed here; the message is the real one (kube tier, v1.34)."""
        ref = binding.get("roleRef") or {}
        rkind, rname = str(ref.get("kind", "")), str(ref.get("name", ""))
        res = "clusterroles" if rkind == "ClusterRole" else "roles"
        if self.can_i("bind", f"{res}/{rname}", ns) or self.can_i("escalate", f"{res}/{rname}", ns):
            return
        role = self.objects.get(_key(rkind, None if rkind == "ClusterRole" else ns, rname))
        if role is None and rkind == "Role":
            # the real server reads the role to compare grants; a missing one is a
            # refusal, not an empty role (dry runs too). (A missing ClusterRole stays
            # empty here: the fake does not hold OpenShift's system roles.)
            raise Forbidden(
                f'rolebindings.rbac.authorization.k8s.io "{name}" is forbidden: '
                f'roles.rbac.authorization.k8s.io "{rname}" not found (fake)',
                kind="RoleBinding",
                name=name,
            )
        role = role or {}
        missing = []
        for rule in role.get("rules") or []:
            for verb in rule.get("verbs") or []:
                for r in rule.get("resources") or []:
                    base, _, sub = r.partition("/")  # a rule's pods/exec is the subresource
                    if not self.can_i(verb, base, ns, subresource=sub or None):
                        groups = " ".join(f'"{g}"' for g in rule.get("apiGroups") or [])
                        names = " ".join(f'"{n}"' for n in rule.get("resourceNames") or [])
                        missing.append(
                            f'{{APIGroups:[{groups}], Resources:["{r}"], '
                            f'ResourceNames:[{names}], Verbs:["{verb}"]}}'
                        )
        if missing:
            raise Forbidden(
                f'rolebindings.rbac.authorization.k8s.io "{name}" is forbidden: user "{self.user}" '
                "is attempting to grant RBAC permissions not currently held:\n"
                + "\n".join(missing)
                + " (fake)",
                kind="RoleBinding",
                name=name,
            )

    def _served(self, kind: str) -> None:
        """NotFound for kinds this API does not serve (OpenShift kinds on plain Kubernetes)."""
        if not self.openshift and kind in OPENSHIFT_KINDS:
            raise NotFound(
                f'the server doesn\'t have a resource type "{plural(kind)}" (fake)', kind=kind
            )

    def _refuse_update(self, kind: str, name: str, old: Manifest, merged: Manifest) -> None:
        """Invalid (422) for an update the API server refuses, with its message."""
        if old is not None and kind == "StatefulSet":
            changed = [
                f
                for f in STS_IMMUTABLE
                if (old.get("spec") or {}).get(f) != (merged.get("spec") or {}).get(f)
            ]
            if changed:
                raise Invalid(
                    f'StatefulSet.apps "{name}" is invalid: spec: Forbidden: updates to '
                    "statefulset spec for fields other than 'replicas', 'ordinals', "
                    "'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' "
                    f"and 'minReadySeconds' are forbidden (changed: {', '.join(changed)})",
                    kind=kind,
                    name=name,
                )
        if (
            old is not None
            and kind in ("RoleBinding", "ClusterRoleBinding")
            and old.get("roleRef") != merged.get("roleRef")
        ):
            raise Invalid(
                f'{kind}.rbac.authorization.k8s.io "{name}" is invalid: roleRef: Invalid '
                f"value: {merged.get('roleRef')!r}: cannot change roleRef",
                kind=kind,
                name=name,
            )
        if old is not None and kind == "PersistentVolumeClaim" and _pvc_shrinks(old, merged):
            # the real server's words (ValidatePersistentVolumeClaimUpdate, 1.34): a bound
            # claim grows where its class allows expansion, never shrinks
            raise Invalid(
                f'PersistentVolumeClaim "{name}" is invalid: spec.resources.requests.storage: '
                "Forbidden: field can not be less than status.capacity",
                kind=kind,
                name=name,
            )
        if (
            old is not None
            and kind == "Pod"
            and _pod_update_forbidden(old.get("spec") or {}, merged.get("spec") or {})
        ):
            raise Invalid(
                f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields '
                "other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
                "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
                "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if "
                "it was previously negative)",
                kind=kind,
                name=name,
            )

    def _scc_admission(self, pspec: Manifest, ns: str) -> tuple[str, str]:
        """(the SCC that admits a pod spec, "") or ("", why SCC admission refuses it); on
        plain Kubernetes ("", ""). The admitted pod carries the SCC's name in its
        ``openshift.io/scc`` annotation, as OpenShift writes it."""
        if not self.openshift:
            return "", ""
        caps: set[str] = set()
        privileged = False
        for c in pspec.get("containers") or []:
            sc = c.get("securityContext") or {}
            caps |= set((sc.get("capabilities") or {}).get("add") or [])
            privileged = privileged or bool(sc.get("privileged"))
        if not caps and not privileged:
            return "restricted-v2", ""  # the default SCC admits it
        sa = pspec.get("serviceAccountName", "default")
        for k, scc in self.objects.items():
            if not k.startswith("SecurityContextConstraints|"):
                continue
            allowed = set(scc.get("allowedCapabilities") or [])
            if not caps <= allowed or (privileged and not scc.get("allowPrivilegedContainer")):
                continue
            if self._sa_may_use(
                scc["metadata"]["name"], f"system:serviceaccount:{ns}:{sa}", ns, sa, scc
            ):
                return str(scc["metadata"]["name"]), ""
        return "", (
            "unable to validate against any security context constraint: "
            f"[capabilities.add: Invalid value: {sorted(caps)}: capability may not be added]"
        )

    def _sa_may_use(self, scc_name: str, user: str, ns: str, sa: str, scc: Manifest) -> bool:
        if user in (scc.get("users") or []):
            return True
        for k, rb in self.objects.items():
            if not k.startswith(f"RoleBinding|{ns}|"):
                continue
            if not any(
                s.get("kind") == "ServiceAccount" and s.get("name") == sa
                for s in rb.get("subjects") or []
            ):
                continue
            ref = rb.get("roleRef") or {}
            role = self.objects.get(_key(ref.get("kind", "Role"), ns, ref.get("name", "")))
            for rule in (role or {}).get("rules") or []:
                if (
                    "use" in (rule.get("verbs") or [])
                    and "securitycontextconstraints" in (rule.get("resources") or [])
                    and scc_name in (rule.get("resourceNames") or [scc_name])
                ):
                    return True
        return False


def _pvc_shrinks(old: Manifest, new: Manifest) -> bool:
    """Whether ``new`` asks a bound claim for less than it has (its capacity, else its request)."""
    from mlenv.config.rules import parse_quantity

    status = old.get("status") or {}
    if status.get("phase") != "Bound":
        return False
    have = (status.get("capacity") or {}).get("storage") or (
        ((old.get("spec") or {}).get("resources") or {}).get("requests") or {}
    ).get("storage")
    want = (((new.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    if have is None or want is None:
        return False
    a, b = parse_quantity(str(want)), parse_quantity(str(have))
    return a is not None and b is not None and a < b
