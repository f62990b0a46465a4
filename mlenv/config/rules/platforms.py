"""Which keys the config's platform reads: a ``slurm:``/``hosts:`` section under another
platform, and the Kubernetes-only keys on slurm/hosts, are warnings; then each platform's
own section (:mod:`.slurm`, :mod:`.hosts`)."""

from __future__ import annotations

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
