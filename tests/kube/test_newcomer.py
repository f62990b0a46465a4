"""A newcomer's walk: a fresh copy of the repository, the README's own Install commands
(the light install, mlenv on the PATH), then the README's deploy command, on the kube tier's
plain-Kubernetes plane. The commands are read from the README, not written here: a README
that stops working fails this test."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from _kubeenv import ROOT, Plane, checkout

pytestmark = [pytest.mark.kube]


def _readme_block(section: str) -> list[str]:
    """The command lines of the first ```bash block under README's ``section`` heading
    (comments dropped)."""
    text = (ROOT / "README.md").read_text()
    body = text[text.index(f"\n{section}\n") :]
    block = re.search(r"```bash\n(.*?)```", body, re.S)
    assert block, f"README: no bash block under {section}"
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


def _fresh_copy(dest: Path) -> Path:
    """What `git clone` gives: the committed tree, nothing built, nothing ignored."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "HEAD"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def test_fresh_clone_then_the_readmes_commands_deploy(plain: Plane, tmp_path: Path) -> None:
    uv = shutil.which("uv") or str(Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin/uv")
    if not os.access(uv, os.X_OK):
        pytest.skip("no uv to build the light install from its cache (pip would need PyPI)")
    clone = _fresh_copy(tmp_path / "clone")
    install = _readme_block("## Install")
    assert install[:3] == [
        "make cli",
        'export PATH="$PWD/.venv-cli/bin:$PATH"',
        "mlenv list-clusters",
    ], install
    # the plane's config, as `mlenv discover` would have written it, beside the examples
    ns = plain.namespace("newcomer", user_role=None)
    name = f"newcomer-{ns.rsplit('-', 1)[1]}"
    checkout(clone, name, "local", ns, "tcp", "plain")
    deploy = next(c for c in _readme_block("## Day to day") if c.startswith("make deploy-cluster"))
    deploy = re.sub(r"CLUSTER=\S+", f"CLUSTER={name}", deploy)
    deploy = re.sub(r"MODE=\S+", "MODE=tcp", deploy)
    script = "set -e\n" + "\n".join([*install, deploy]) + "\n"
    env = {
        **plain.env(),
        "UV_BIN": uv,  # the Makefile's; from uv's cache, offline
        "UV_OFFLINE": "1",
        "MAKEFLAGS": "",
    }
    for var in ("PYTHONPATH", "VIRTUAL_ENV", "MLENV_ROOT", "MLENV_STATE_DIR", "CLUSTER", "MODE"):
        env.pop(var, None)
    res = subprocess.run(
        ["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=600
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert name in out  # list-clusters, from .venv-cli/bin/mlenv on the PATH
    assert f"deployed {name}: 2/2 pods Ready" in out, out[-4000:]
    assert (clone / ".venv-cli" / "bin" / "mlenv").exists()
    assert not (clone / ".venv").exists()  # the full install was never built
    data = yaml.safe_load((clone / ".mlenv" / "current-cluster").read_text())
    assert data == name
