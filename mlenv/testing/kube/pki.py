"""The tier's certificates, made with ``openssl`` (no Python crypto package needed).

One CA signs: the apiserver's (and kwok's) serving certificate for 127.0.0.1/localhost;
the admin client (group ``system:masters``, used by kube-controller-manager,
kube-scheduler, kwok and the tests' admin); the non-admin user (no group that grants
anything: RBAC bindings per namespace decide what it may do). The service-account
tokens are signed with a key pair of their own.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

ADMIN_USER = "kube-tier-admin"
ADMIN_GROUP = "system:masters"
# The non-admin identity: allowed only where a RoleBinding in a namespace says so.
USER_NAME = "mlenv-developer"
USER_GROUP = "mlenv-developers"
DAYS = "3650"


@dataclass(frozen=True)
class Pki:
    folder: Path

    def path(self, name: str) -> Path:
        return self.folder / name

    @property
    def ca(self) -> Path:
        return self.path("ca.crt")

    @property
    def serving(self) -> tuple[Path, Path]:
        return self.path("serving.crt"), self.path("serving.key")

    @property
    def admin(self) -> tuple[Path, Path]:
        return self.path("admin.crt"), self.path("admin.key")

    @property
    def user(self) -> tuple[Path, Path]:
        return self.path("user.crt"), self.path("user.key")

    @property
    def sa(self) -> tuple[Path, Path]:
        """(public, private) service-account signing keys."""
        return self.path("sa.pub"), self.path("sa.key")


def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {res.stderr.strip()[-400:]}")


def _issue(pki: Pki, name: str, subject: str, ext: str) -> None:
    """Key ``name.key`` and certificate ``name.crt`` signed by the CA."""
    f = pki.folder
    _openssl(
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-subj",
        subject,
        "-out",
        f"{name}.csr",
        cwd=f,
    )
    (f / f"{name}.ext").write_text(ext)
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        DAYS,
        "-sha256",
        "-extfile",
        f"{name}.ext",
        "-out",
        f"{name}.crt",
        cwd=f,
    )
    (f / f"{name}.csr").unlink()
    (f / f"{name}.ext").unlink()


def ensure(folder: Path) -> Pki:
    """Create whatever is missing (a fresh CA invalidates every leaf, so all are redone)."""
    pki = Pki(folder)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    if pki.ca.exists() and all(
        p.exists() for pair in (pki.serving, pki.admin, pki.user, pki.sa) for p in pair
    ):
        return pki
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        DAYS,
        "-subj",
        "/CN=mlenv-kube-tier-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=folder,
    )
    leaf = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    _issue(
        pki,
        "serving",
        "/CN=kube-apiserver",
        leaf + "extendedKeyUsage=serverAuth,clientAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n",
    )
    _issue(
        pki, "admin", f"/O={ADMIN_GROUP}/CN={ADMIN_USER}", leaf + "extendedKeyUsage=clientAuth\n"
    )
    _issue(pki, "user", f"/O={USER_GROUP}/CN={USER_NAME}", leaf + "extendedKeyUsage=clientAuth\n")
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)
    for p in folder.iterdir():
        p.chmod(0o600)
    return pki
