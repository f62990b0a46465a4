"""The pod image: Dockerfile lints clean and keeps the properties pods rely on."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_lint_image_script_passes() -> None:
    if not (ROOT / ".venv/bin/hadolint").exists() and shutil.which("hadolint") is None \
            and shutil.which("shellcheck") is None:
        pytest.skip("neither hadolint nor shellcheck installed")
    proc = subprocess.run(["bash", "scripts/dev/lint-image.sh"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_pins_base_and_runs_non_root_under_random_uid() -> None:
    assert re.search(r"^FROM nvcr\.io/nvidia/pytorch:\d\d\.\d\d-py3$", DOCKERFILE, re.M)
    user = re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)
    assert user and user[-1] not in ("root", "0")
    assert "--gid 0" in DOCKERFILE and "chmod g=u /etc/passwd" in DOCKERFILE
    for pkg in ("openssh-server", "pdsh", "rdma-core", "ibverbs-utils", "perftest", "infiniband-diags"):
        assert pkg in DOCKERFILE
    assert 'ENTRYPOINT ["/opt/ml-dev-env/scripts/pod-init.sh"]' in DOCKERFILE
    assert "ssh_host_" in DOCKERFILE  # host keys removed: they come from the Secret
