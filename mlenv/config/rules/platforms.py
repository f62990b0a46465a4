"""Which keys the config's platform reads: a ``slurm:``/``hosts:`` section under another
platform, and the Kubernetes-only keys on slurm/hosts, are warnings; then each platform's
own section (:mod:`.slurm`, :mod:`.hosts`)."""

from __future__ import annotations

from mlenv import contract
from mlenv.config.rules import hosts, slurm
from mlenv.config.rules.common import Checker, _get

# Keys only the Kubernetes/OpenShift renderer reads, and what they are.
_K8S_ONLY = {
    "storage": "the pods' volumes",
    "security": "the pods' service account and SCC",
    "dev_tools": "the dev tools' Routes",
    "scheduling": "the pods' tolerations and node selector",
    "resources": "the containers' requests and limits",
    "shm_size": "the pods' /dev/shm size",
    "ssh_port": "the pods' launcher sshd port",
}


def check(c: Checker) -> None:
    """``slurm:``/``hosts:`` values reach batch scripts and ssh command lines: each is
    checked here (and quoted there). Keys meant for another platform are warnings."""
    plat = c.data.get("platform", "openshift")
    if not isinstance(plat, str):
        return
    for section in ("slurm", "hosts"):
        if section in c.data and plat != section:
            c.warn(
                (section,),
                f"'{section}:' applies to platform: {section}, but this config's "
                f"platform is {plat}: it is ignored",
                f"set 'platform: {section}' or remove the section",
                key=True,
            )
    if plat in ("slurm", "hosts"):
        shared = plat == "slurm" and _get(c.data, "slurm", "exclusive") is False
        for key, why in _K8S_ONLY.items():
            if key not in c.data:
                continue
            if key == "resources" and shared:
                # slurm.exclusive: false asks for resources.requests (--cpus-per-task,
                # --mem); only the limits mean nothing there
                if _get(c.data, "resources", "limits"):
                    c.warn(
                        ("resources", "limits"),
                        "resources.limits are the containers' limits; platform slurm "
                        "ignores them (resources.requests become --cpus-per-task and --mem)",
                        key=True,
                    )
                continue
            c.warn((key,), f"'{key}' is {why}; platform {plat} ignores it", key=True)
        ref = _get(c.data, "image", "ref")
        if isinstance(ref, str) and ref:
            where = "slurm.container_image" if plat == "slurm" else "the hosts' own Python"
            c.warn(
                ("image", "ref"),
                f"image.ref is the pods' image; platform {plat} ignores it (use {where})",
            )
    slurm.check(c, plat == "slurm")
    hosts.check(c, plat == "hosts")
    if plat not in ("slurm", "hosts"):
        quarantine_tolerated(c)


def quarantine_tolerated(c: Checker) -> None:
    """A worker toleration that matches the quarantine taint (``ml-dev-env.io/health=fail:
    NoSchedule``) lets the workers back onto the nodes `mlenv quarantine` took out, so the
    next run measures the node it was meant to avoid: a warning, since a site may want it.
    An empty key with ``operator: Exists`` tolerates every taint, this one included."""
    tolerations = _get(c.data, "scheduling", "tolerations")
    if not isinstance(tolerations, list):
        return
    for i, t in enumerate(tolerations):
        if not isinstance(t, dict):
            continue
        key, op = t.get("key") or "", t.get("operator") or "Equal"
        effect = t.get("effect") or ""
        if effect not in ("", contract.TAINT_EFFECT):
            continue
        if key == "" and op == "Exists":
            what = "tolerates every taint (empty key, operator: Exists)"
        elif key == contract.LABEL_HEALTH and (
            op == "Exists" or t.get("value", "") == contract.HEALTH_FAIL
        ):
            what = f"tolerates the quarantine taint {contract.LABEL_HEALTH}"
        else:
            continue
        c.warn(
            ("scheduling", "tolerations", i),
            f"this toleration {what}, so the workers still land on nodes that "
            "`mlenv quarantine --apply` took out of service",
            "give it the key of the taint it is meant for",
        )
