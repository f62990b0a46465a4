"""Per-deployment ssh keys for the DeepSpeed launcher, kept in Secret ``ml-dev-env-ssh``.

The key pair (launcher → pods) and the sshd host key are generated with ``ssh-keygen``
in a private temporary directory that is removed at once: they exist only in memory and
in the Secret, never in the repo or the image. Deploy creates the Secret once
(:func:`planned_ssh_secret` is None when a complete one exists) and keeps it across
re-deploys, so pods keep trusting each other after a rollout.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
from pathlib import Path

from mlenv.cluster.api import ClusterClient, Manifest
from mlenv.errors import InfraError
from mlenv.render.names import (
    DEVTOOLS_SECRET as DEVTOOLS_SECRET,  # re-exported: the Secrets deploy creates
)
from mlenv.render.names import SSH_SECRET

SECRET_NAME = SSH_SECRET  # mounted by the StatefulSet (render/names.py)
KEY_FILES = ("id_ed25519", "id_ed25519.pub", "ssh_host_ed25519_key", "ssh_host_ed25519_key.pub")


def generate_keys(comment: str) -> dict[str, bytes]:
    """A fresh ed25519 client key pair and host key pair, as Secret file name → bytes."""
    exe = shutil.which("ssh-keygen")
    if exe is None:
        raise InfraError(
            "ssh-keygen not found: install openssh-client to deploy "
            "(it generates the per-deployment launcher keys)"
        )
    with tempfile.TemporaryDirectory(prefix="mlenv-keys-") as tmp:
        out: dict[str, bytes] = {}
        for stem in ("id_ed25519", "ssh_host_ed25519_key"):
            path = Path(tmp) / stem
            proc = subprocess.run(
                [exe, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise InfraError(f"ssh-keygen failed: {proc.stderr.strip()}")
            out[stem] = path.read_bytes()
            out[f"{stem}.pub"] = path.with_suffix(".pub").read_bytes()
    return out


def secret_manifest(namespace: str, labels: dict[str, str], files: dict[str, bytes]) -> Manifest:
    """The Secret object holding the four key files."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET_NAME, "namespace": namespace, "labels": dict(labels)},
        "type": "Opaque",
        "data": {k: base64.b64encode(files[k]).decode() for k in KEY_FILES},
    }


def planned_ssh_secret(
    client: ClusterClient, namespace: str, labels: dict[str, str], comment: str
) -> Manifest | None:
    """The ssh Secret to create (fresh keys), or None when a complete one exists (kept).

    Deploy dry-runs it with the rest of the plan before applying anything.
    """
    live = client.get("Secret", SECRET_NAME, namespace)
    if reusable(live, KEY_FILES, labels):
        return None
    return secret_manifest(namespace, labels, generate_keys(comment))


def reusable(live: Manifest | None, keys: tuple[str, ...], labels: dict[str, str]) -> bool:
    """True when a live Secret can be kept: every key present and non-empty, and labelled
    for this instance (an empty value, or another deployment's keys, is never
    reused; deploy regenerates the Secret instead and says so)."""
    if live is None:
        return False
    data = live.get("data") or {}
    if not all(isinstance(data.get(k), str) and data[k].strip() for k in keys):
        return False
    have = (live.get("metadata") or {}).get("labels") or {}
    return all(
        have.get(k) == v
        for k, v in labels.items()
        if k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")
    )


def why_not_reusable(live: Manifest | None, keys: tuple[str, ...], labels: dict[str, str]) -> str:
    """Why :func:`reusable` said no, for the deploy log ("" when it said yes or none exists)."""
    if live is None or reusable(live, keys, labels):
        return ""
    data = live.get("data") or {}
    missing = [k for k in keys if not (isinstance(data.get(k), str) and data[k].strip())]
    if missing:
        return f"key(s) missing or empty: {', '.join(missing)}"
    owner = ((live.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/instance")
    return f"labelled for instance {owner!r}" if owner else "not labelled as mlenv's"


DEVTOOLS_KEYS = ("code-server-password", "jupyter-token", "oauth-cookie-secret")


def planned_devtools_secret(
    client: ClusterClient, namespace: str, labels: dict[str, str]
) -> Manifest | None:
    """The dev-tools credentials Secret to create (code-server password, Jupyter token,
    oauth-proxy cookie secret), or None when a complete one exists."""
    live = client.get("Secret", DEVTOOLS_SECRET, namespace)
    if reusable(live, DEVTOOLS_KEYS, labels):
        return None
    return devtools_secret_manifest(namespace, labels)


def devtools_secret_manifest(namespace: str, labels: dict[str, str]) -> Manifest:
    """A dev-tools credentials Secret with fresh random values."""
    import secrets

    # oauth-proxy wants a 16/24/32-byte cookie secret: 32 hex characters
    values = {
        "code-server-password": secrets.token_urlsafe(24),
        "jupyter-token": secrets.token_urlsafe(24),
        "oauth-cookie-secret": secrets.token_hex(16),
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": DEVTOOLS_SECRET, "namespace": namespace, "labels": dict(labels)},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }
