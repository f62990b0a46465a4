"""What the namespace's admission will refuse, read before anything is applied.

Preflight asks two questions of the plan's pods (the StatefulSet's template, once per
replica, and the dev Pod) that the API server's admission would otherwise answer only
after the apply, as a FailedCreate event of the StatefulSet:

- **Pod Security admission**: the level the namespace enforces (its label
  ``pod-security.kubernetes.io/enforce``) against each container's securityContext and
  the pod's host access and volume types, with the checks of the Kubernetes "Pod
  Security Standards" page (baseline, then restricted);
- **ResourceQuota**: each quota's free room (``status.hard`` − ``status.used``, this
  deployment's own pods given back) against what the plan's pods request, and a compute
  quota's rule that every container states the resource it limits.

Both are pure functions of the objects read; preflight turns their lines into problems.
"""

from __future__ import annotations

from typing import Any

from mlenv.cluster.api import Manifest
from mlenv.workload import worker_of

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
# Capabilities the baseline level lets a container add (Pod Security Standards).
BASELINE_CAPS = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)


def planned_pods(manifests: list[Manifest]) -> list[tuple[str, Manifest, int]]:
    """(object, pod spec, how many pods) for each workload of the plan."""
    out: list[tuple[str, Manifest, int]] = []
    for m in manifests:
        spec = m.get("spec") or {}
        ref = f"{str(m.get('kind', '')).lower()}/{(m.get('metadata') or {}).get('name', '')}"
        wl = worker_of(m)
        if wl is not None:
            pod = wl.pod_template(m).get("spec") or {}
            out.append((ref, pod, wl.desired(m)))
        elif m.get("kind") == "Pod":
            out.append((ref, spec, 1))
    return out


def _containers(pod: Manifest) -> list[Manifest]:
    return list(pod.get("initContainers") or []) + list(pod.get("containers") or [])


def _baseline(pod: Manifest) -> list[str]:
    out: list[str] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(f"{key}=true")
    for v in pod.get("volumes") or []:
        if "hostPath" in v:
            out.append(f"hostPath volume {v.get('name')}")
    for c in _containers(pod):
        sc = c.get("securityContext") or {}
        name = c.get("name")
        if sc.get("privileged"):
            out.append(f'container "{name}" is privileged')
        added = set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPS
        if added:
            out.append(f'container "{name}" adds {", ".join(sorted(added))}')
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f'container "{name}" uses a hostPort')
    return out


def _restricted(pod: Manifest) -> list[str]:
    out: list[str] = []
    psc = pod.get("securityContext") or {}
    for v in pod.get("volumes") or []:
        kinds = set(v) - {"name"}
        if kinds and not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v.get('name')} of type {', '.join(sorted(kinds))}")
    for c in _containers(pod):
        sc = c.get("securityContext") or {}
        name = c.get("name")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f'container "{name}" does not set allowPrivilegeEscalation=false')
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f'container "{name}" does not drop ALL capabilities')
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f'container "{name}" adds capabilities besides NET_BIND_SERVICE')
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            out.append(f'container "{name}" does not set runAsNonRoot=true')
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f'container "{name}" has no RuntimeDefault seccompProfile')
    return out


def pod_security_refusals(namespace: Manifest | None, manifests: list[Manifest]) -> list[str]:
    """One line per planned workload the namespace's enforced Pod Security level refuses."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = str(labels.get(ENFORCE_LABEL, "privileged"))
    if level not in LEVELS[1:]:
        return []
    out = []
    for ref, pod, _n in planned_pods(manifests):
        why = _baseline(pod) + (_restricted(pod) if level == "restricted" else [])
        if why:
            out.append(
                f"namespace {(namespace or {}).get('metadata', {}).get('name')} enforces Pod "
                f"Security {level!r} ({ENFORCE_LABEL}), which refuses the pods of {ref}: "
                f"{'; '.join(why)}"
            )
    return out


_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "m": 1e-3,
}


def quantity(v: object) -> float:
    """A Kubernetes quantity as a number (``500m`` → 0.5, ``2Gi`` → 2147483648)."""
    s = str(v).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * _SUFFIX[suffix]
    return float(s)


def _pod_usage(pod: Manifest) -> dict[str, float]:
    """What one pod counts against a quota: ``pods``, and ``requests.X``/``limits.X``
    (and bare ``X`` for requests) summed over its containers."""
    use: dict[str, float] = {"pods": 1.0}
    for c in pod.get("containers") or []:
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for r, v in (res.get(part) or {}).items():
                use[f"{part}.{r}"] = use.get(f"{part}.{r}", 0.0) + quantity(v)
                if part == "requests":
                    use[r] = use.get(r, 0.0) + quantity(v)
    return use


COMPUTE_KEYS = ("requests.cpu", "requests.memory", "limits.cpu", "limits.memory", "cpu", "memory")


def quota_refusals(
    quotas: list[Manifest], manifests: list[Manifest], ours_now: list[Manifest]
) -> list[str]:
    """One line per ResourceQuota that has no room for the plan's pods (their usage
    less what this deployment's live pods ``ours_now`` already count), or that limits a
    compute resource some planned container does not state (admission refuses those)."""
    need: dict[str, float] = {}
    unstated: dict[str, list[str]] = {}
    for ref, pod, n in planned_pods(manifests):
        for k, v in _pod_usage(pod).items():
            need[k] = need.get(k, 0.0) + v * n
        for c in pod.get("containers") or []:
            res = c.get("resources") or {}
            for key in COMPUTE_KEYS:
                part, _, r = key.rpartition(".")
                if not (res.get(part or "requests") or {}).get(r):
                    unstated.setdefault(key, []).append(f'{ref} container "{c.get("name")}"')
    have: dict[str, float] = {}
    for pod in ours_now:
        for k, v in _pod_usage(pod.get("spec") or {}).items():
            have[k] = have.get(k, 0.0) + v
    out = []
    for q in quotas:
        name = (q.get("metadata") or {}).get("name")
        hard: dict[str, Any] = (
            (q.get("status") or {}).get("hard") or (q.get("spec") or {}).get("hard") or {}
        )
        used: dict[str, Any] = (q.get("status") or {}).get("used") or {}
        for key in sorted(hard):
            if key in unstated:
                out.append(
                    f"ResourceQuota {name} limits {key}, which {', '.join(unstated[key])} does "
                    "not state (admission refuses such a pod): set it in the config's "
                    "resources (resources.dev_pod for the dev Pod)"
                )
                continue
            if key not in need:
                continue
            free = quantity(hard[key]) - quantity(used.get(key, 0)) + have.get(key, 0.0)
            if need[key] > free + 1e-9:
                out.append(
                    f"ResourceQuota {name}: the pods need {_fmt(need[key])} {key}, "
                    f"{_fmt(max(free, 0.0))} of {hard[key]} is free: deploy fewer pods "
                    "(--nodes) or smaller ones, or ask the namespace's admin for more"
                )
    return out


def _fmt(v: float) -> str:
    return f"{v:g}" if v < 2**20 else f"{v / 2**30:g}Gi"
