"""Who a kube tier pod's processes run as: the UID, groups and capabilities a kubelet and
its container runtime would give the container, from the pod's securityContext and, on
the OpenShift flavour, the namespace's ranges (what restricted-v2 admission writes).

The pod-root controller (podroots.py) computes one ``Identity`` per container and passes
it to confine.sh in the container's Exec environment; confine.sh drops to it with
util-linux ``setpriv`` after chrooting into the pod's root. The rules (docs/deploy.md,
"The kube tier"):

- UID: the container's ``runAsUser``, else the pod's; else, on the OpenShift flavour in a
  namespace annotated ``openshift.io/sa.scc.uid-range`` (``1000680000/10000``), for a pod
  no SCC admitted (no ``openshift.io/scc``: the tier's SCC admission writes the UID of
  the SCC it chose into the pod), the range's first UID; else root (the tier's "image"
  user: the pods run this machine's files, whose only user is root).
- GID: ``runAsGroup`` (container, then pod), else 0: OpenShift runs its random UIDs with
  GID 0, and an image's user without a group entry gets 0 too.
- Supplementary groups: ``fsGroup`` then ``supplementalGroups``. On the OpenShift flavour
  a pod without an ``fsGroup`` in a namespace with the ranges gets the first of
  ``openshift.io/sa.scc.supplemental-groups`` (else of the uid range), as restricted-v2's
  ``fsGroup: MustRunAs`` does.
- Capabilities: the runtime's default set (CRI-O's on the OpenShift flavour, containerd's
  on the plain one), minus ``drop`` (``ALL`` drops every one), plus ``add``, is the
  bounding set; ``privileged`` keeps every capability. Root's effective set is that
  bounding set; a non-root UID's is empty whatever ``add`` says, as CRI-O and containerd
  run it (they set no ambient capabilities, so the kernel clears them at exec).
- ``allowPrivilegeEscalation: false``: no_new_privs.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

UID_RANGE = "openshift.io/sa.scc.uid-range"
SCC_ANNOTATION = "openshift.io/scc"  # the SCC that admitted the pod
SUPPLEMENTAL_GROUPS = "openshift.io/sa.scc.supplemental-groups"

# Every capability setpriv knows (Linux's, by their names without CAP_).
KNOWN_CAPS = frozenset(
    """
    chown dac_override dac_read_search fowner fsetid kill setgid setuid setpcap
    linux_immutable net_bind_service net_broadcast net_admin net_raw ipc_lock ipc_owner
    sys_module sys_rawio sys_chroot sys_ptrace sys_pacct sys_admin sys_boot sys_nice
    sys_resource sys_time sys_tty_config mknod lease audit_write audit_control setfcap
    mac_override mac_admin syslog wake_alarm block_suspend audit_read perfmon bpf
    checkpoint_restore
    """.split()
)
# The capabilities a container starts with when its spec adds or drops none.
# CRI-O's default_capabilities (crio.conf), which OpenShift's nodes run:
CRIO_DEFAULT_CAPS = (
    "chown dac_override fsetid fowner setgid setuid setpcap net_bind_service kill".split()
)
# containerd's (the CRI plugin's default spec, Docker's list), which most other clusters run:
CONTAINERD_DEFAULT_CAPS = (
    "chown dac_override fsetid fowner mknod net_raw setgid setuid setfcap setpcap "
    "net_bind_service sys_chroot kill audit_write"
).split()
RUNTIME_DEFAULT_CAPS = {"openshift": CRIO_DEFAULT_CAPS, "plain": CONTAINERD_DEFAULT_CAPS}
# The plane flavours whose namespaces' ranges assign UIDs (OpenShift's SCC admission).
RANGE_FLAVORS = frozenset({"openshift"})


class IdentityError(ValueError):
    """A securityContext the runtime would refuse to start (the container's error)."""


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    groups: tuple[int, ...]
    caps: tuple[str, ...]  # the bounding set, setpriv's names, sorted
    no_new_privs: bool
    fs_group: int | None
    fs_group_policy: str  # "Always" or "OnRootMismatch"
    home: str

    def env(self) -> dict[str, str]:
        """What confine.sh reads (MLENV_KUBE_*), and the HOME a runtime sets for the UID."""
        return {
            "MLENV_KUBE_UID": str(self.uid),
            "MLENV_KUBE_GID": str(self.gid),
            "MLENV_KUBE_GROUPS": ",".join(str(g) for g in self.groups),
            "MLENV_KUBE_CAPS": ",".join(self.caps),
            "MLENV_KUBE_NNP": "1" if self.no_new_privs else "",
            "HOME": self.home,
        }


def range_start(value: str) -> int | None:
    """The first ID of an OpenShift range annotation (``1000680000/10000``; a list of them
    is comma-separated and the first range counts), or None when it is not one."""
    first = value.split(",")[0].strip()
    start, sep, size = first.partition("/")
    if not (start.isdigit() and (not sep or size.isdigit())):
        return None
    return int(start)


def _int(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IdentityError(f"{where}: {value!r} is not a non-negative integer")
    return value


def _cap_name(raw: Any) -> str:
    name = str(raw).strip().lower()
    return name[4:] if name.startswith("cap_") else name


def _home(uid: int) -> str:
    """The UID's home in the image's passwd (this machine's), else "/" as CRI-O and
    containerd set it for a UID the image does not know."""
    try:
        return pwd.getpwuid(uid).pw_dir or "/"
    except KeyError:
        return "/"


def pod_identity(pod: Obj, container: Obj, ns_annotations: dict[str, str], flavor: str) -> Identity:
    """The identity ``container`` of ``pod`` runs as (the rules above); IdentityError for
    a value no runtime would take."""
    psc: Obj = pod.get("spec", {}).get("securityContext") or {}
    csc: Obj = container.get("securityContext") or {}
    name = container.get("name", "")
    where = f"container {name!r} securityContext"
    uid = _int(csc.get("runAsUser"), f"{where}.runAsUser")
    if uid is None:
        uid = _int(psc.get("runAsUser"), "pod securityContext.runAsUser")
    fs_group = _int(psc.get("fsGroup"), "pod securityContext.fsGroup")
    # A pod the tier's SCC admission admitted (scc.py) already holds what its SCC assigns
    # (restricted-v2 writes the range's UID; privileged, RunAsAny, writes none and the
    # image's user runs): only a pod that went through no SCC gets the range here.
    admitted = SCC_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})
    if flavor in RANGE_FLAVORS and UID_RANGE in ns_annotations and not admitted:
        first = range_start(ns_annotations[UID_RANGE])
        if first is None:
            raise IdentityError(
                f"namespace annotation {UID_RANGE}={ns_annotations[UID_RANGE]!r}: "
                "expected FIRST/SIZE (e.g. 1000680000/10000)"
            )
        if uid is None:
            uid = first
        if fs_group is None:
            sup = range_start(ns_annotations.get(SUPPLEMENTAL_GROUPS, ""))
            fs_group = first if sup is None else sup
    uid = 0 if uid is None else uid
    gid = _int(csc.get("runAsGroup"), f"{where}.runAsGroup")
    if gid is None:
        gid = _int(psc.get("runAsGroup"), "pod securityContext.runAsGroup")
    gid = 0 if gid is None else gid
    groups: list[int] = []
    extra = [fs_group, *(psc.get("supplementalGroups") or [])]
    for i, g in enumerate(extra):
        n = _int(g, "pod securityContext.supplementalGroups" if i else "fsGroup")
        if n is not None and n not in groups:
            groups.append(n)
    caps_spec: Obj = csc.get("capabilities") or {}
    add = [_cap_name(c) for c in caps_spec.get("add") or []]
    drop = [_cap_name(c) for c in caps_spec.get("drop") or []]
    unknown = [c for c in add + drop if c not in KNOWN_CAPS and c != "all"]
    if unknown:
        raise IdentityError(f"{where}.capabilities: unknown capability {', '.join(unknown)}")
    if csc.get("privileged"):
        caps = set(KNOWN_CAPS)
    else:
        caps = set() if "all" in drop else set(RUNTIME_DEFAULT_CAPS[flavor]) - set(drop)
        caps |= KNOWN_CAPS if "all" in add else set(add)
    policy = str(psc.get("fsGroupChangePolicy") or "Always")
    return Identity(
        uid=uid,
        gid=gid,
        groups=tuple(groups),
        caps=tuple(sorted(caps)),
        no_new_privs=csc.get("allowPrivilegeEscalation") is False and not csc.get("privileged"),
        fs_group=fs_group,
        fs_group_policy=policy,
        home=_home(uid),
    )


# What a kubelet ORs into a volume's modes when it hands the volume to an fsGroup
# (pkg/volume/volume_linux.go): group read-write (read for a read-only volume: Secrets,
# ConfigMaps), and on folders setgid (new files inherit the group) and group traversal.
RW_MASK, RO_MASK, DIR_MASK = 0o660, 0o440, 0o2110


def _owned(st: os.stat_result, fs_group: int, mask: int) -> bool:
    return st.st_gid == fs_group and st.st_mode & (mask | DIR_MASK) == mask | DIR_MASK


def set_volume_ownership(root: Path, fs_group: int, read_only: bool, policy: str) -> int:
    """Give the volume at ``root`` to ``fs_group`` as a kubelet does at mount for volumes
    that support ownership management (claims, emptyDirs, Secrets, ConfigMaps): every
    file and folder group-owned by it, group-readable (and writable unless ``read_only``),
    folders setgid. ``OnRootMismatch``: nothing when the root already matches. Links are
    re-grouped, never followed. The count of entries changed."""
    mask = RO_MASK if read_only else RW_MASK
    if policy == "OnRootMismatch" and _owned(root.stat(), fs_group, mask):
        return 0
    changed = 0
    for folder, dirs, files in os.walk(root):
        for entry in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            st = os.lstat(entry)
            want = st.st_mode & 0o7777 | mask
            if stat.S_ISDIR(st.st_mode):
                want |= DIR_MASK
            if st.st_gid != fs_group:
                os.lchown(entry, -1, fs_group)
                changed += 1
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o7777 != want:
                os.chmod(entry, want)  # after chown, which clears setgid on some filesystems
                changed += 1
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
    return changed
