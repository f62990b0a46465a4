"""Helpers of the kube tier's tests: a real control plane per flavour, started once per session.

``make kube-test`` starts the OpenShift flavour (``python -m mlenv.testing.kube up``) before
pytest; a test that needs it finds it up and leaves it for ``kube-down``. A flavour that is
not up is started here, in a folder of its own under ``.mlenv/``, and stopped at the end of
the session. Without the tier's binaries (built by ``make kube-up``, tens of minutes cold)
every test here skips and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlenv.testing.kube import build, plane

ROOT = Path(__file__).resolve().parents[2]
# An image the ErrImagePull stage fails on every plane (anything under registry.invalid/;
# the tier also fails images named in KUBE_MISSING_IMAGES).
MISSING_IMAGE = "registry.invalid/mlenv-tests/never-built:missing"
# An image the tier "pulls" (its pods run the host's files, not an image).
PULLABLE = "registry.access.redhat.com/ubi9/ubi-minimal:latest"


@dataclass
class Plane:
    tier: plane.Tier
    flavor: str
    owned: bool  # started by this session (and stopped by it)

    @property
    def kubectl(self) -> str:
        return str(build.paths().kube("kubectl"))

    def kubeconfig(self, user: bool = False) -> Path:
        return self.tier.user_kubeconfig if user else self.tier.admin_kubeconfig

    def env(self, user: bool = False) -> dict[str, str]:
        """The environment a developer would have: KUBECONFIG, and the tier's kubectl first."""
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig(user)),
            "PATH": f"{build.paths().kube_bin}:{os.environ.get('PATH', '')}",
        }

    def run(
        self, *args: str, user: bool = False, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.kubectl, f"--kubeconfig={self.kubeconfig(user)}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    def ok(self, *args: str, user: bool = False, stdin: str | None = None) -> str:
        res = self.run(*args, user=user, stdin=stdin)
        assert res.returncode == 0, f"kubectl {' '.join(args)}: {res.stderr}"
        return res.stdout

    def json(self, *args: str, user: bool = False) -> dict:
        out: dict = json.loads(self.ok(*args, "-o", "json", user=user))
        return out

    def apply(self, *objs: dict, user: bool = False) -> None:
        self.ok(
            "apply",
            "-f",
            "-",
            user=user,
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}),
        )

    def namespace(self, prefix: str, user_role: str | None = "admin") -> str:
        """A fresh namespace; the non-admin user gets ``user_role`` in it (None: nothing)."""
        ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
        if user_role:
            plane.grant(ns, user_role, folder=self.tier.folder)
        else:
            self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        return ns

    def pod_dir(self, ns: str, pod: str) -> Path:
        return self.tier.folder / "pods" / ns / pod

    def volume_dir(self, ns: str, claim: str) -> Path:
        pv = self.ok("get", "pvc", "-n", ns, claim, "-o", "jsonpath={.spec.volumeName}").strip()
        assert pv, f"claim {ns}/{claim} is not bound"
        return self.tier.folder / "volumes" / pv


def until(what: str, check: Callable[[], Any], seconds: float = 60, step: float = 0.5) -> Any:
    """``check()``'s first truthy answer within ``seconds``; an AssertionError naming
    ``what`` and the last answer otherwise."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"{what}: not within {seconds} s (last: {last!r})")


def binaries_built() -> bool:
    b = build.paths()
    return (
        all(b.kube(n).exists() for n in build.KUBE_BINARIES) and b.etcd.exists() and b.kwok.exists()
    )


class Planes:
    def __init__(self) -> None:
        self.started: dict[str, Plane] = {}

    def get(self, flavor: str, slot: str = "") -> Plane:
        """The flavour's plane (``slot``: which one of it, "" the first), started once."""
        key = flavor + (f"-{slot}" if slot else "")
        if key in self.started:
            return self.started[key]
        if not binaries_built():
            pytest.skip(
                "the kube tier's binaries are not built: `make kube-up` builds them "
                f"(cached in {build.cache_root()})"
            )
        default = plane.Tier(plane.tier_dir())
        st = plane.status(default)
        if st["up"] and st.get("flavor") == flavor and not slot:
            p = Plane(default, flavor, owned=False)
        else:
            folder = ROOT / ".mlenv" / f"kube-tests-{key}"
            tier = plane.up(flavor, folder=folder, missing_images=(MISSING_IMAGE,))
            p = Plane(tier, flavor, owned=True)
        self.started[key] = p
        return p

    def stop(self) -> None:
        for p in self.started.values():
            if p.owned:
                plane.down(folder=p.tier.folder)


def mlenv(
    root: Path,
    p: Plane,
    *args: str,
    user: bool = False,
    timeout: float = 300,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``mlenv ARGS`` as a process, as a developer runs it: the checkout at ``root``, the
    plane's kubeconfig (admin, or the non-admin user), the tier's kubectl on PATH."""
    env = {
        **p.env(user),
        "MLENV_ROOT": str(root),
        "MLENV_STATE_DIR": str(root / ".mlenv"),
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "mlenv", *args],
        cwd=root,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def checkout(tmp: Path, name: str, base: str, namespace: str, mode: str, flavor: str) -> Path:
    """A checkout of ours with one test config: the example ``base`` in ``namespace``,
    ``cluster.api`` empty (preflight compares it with the server), nodes from the plane."""
    data = yaml.safe_load((ROOT / "clusters" / f"{base}.yaml").read_text())
    data["cluster"].update({"name": name, "namespace": namespace})
    data["cluster"].pop("api", None)
    data.pop("nodes", None)
    if flavor == "plain":
        data["platform"] = "kubernetes"
        # plain Kubernetes builds no image: a config names one (preflight refuses it otherwise)
        data.setdefault("image", {}).setdefault("ref", PULLABLE)
    # ssh_port and master_port stay the example's: each pod has a network namespace and an
    # address of its own (the tier's pod network), so the two planes' pods, which make test
    # runs side by side, each listen on the same ports without meeting.
    rdma = (data.get("network") or {}).get("rdma") or {}
    if rdma.get("networks"):
        rdma["networks"] = [f"{namespace}/{n.split('/')[-1]}" for n in rdma["networks"]]
    (tmp / "clusters").mkdir(parents=True, exist_ok=True)
    (tmp / "clusters" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    ws = tmp / "workspace"
    ws.mkdir(exist_ok=True)
    (ws / "train_probe.py").write_text("print('synced by the kube tier test')\n")
    (ws / "data").mkdir(exist_ok=True)
    (ws / "data" / "notes.txt").write_text(f"{name} {mode}\n")
    return tmp


def networks_for(p: Plane, root: Path, name: str) -> None:
    """The Multus networks the config names, as the SR-IOV operator would have made them."""
    data = yaml.safe_load((root / "clusters" / f"{name}.yaml").read_text())
    for ref in ((data.get("network") or {}).get("rdma") or {}).get("networks") or []:
        ns, net = ref.split("/")
        p.apply(
            {
                "apiVersion": "k8s.cni.cncf.io/v1",
                "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": net, "namespace": ns},
                "spec": {
                    "config": json.dumps({"cniVersion": "0.3.1", "name": net, "type": "sriov"})
                },
            }
        )
