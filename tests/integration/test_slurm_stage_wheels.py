"""``mlenv stage`` on the real Slurm harness for a node python like an NGC image's: PyYAML
and mlenv missing, its newer glibc (this machine's, 2.36 on Debian 12) an exact platform
tag no wheel carries, and torch and DeepSpeed on a path that a ``.pth`` file adds (a
folder not named site-packages). Staging downloads PyYAML for every manylinux tag the
node accepts (from PyPI: skipped when it cannot be reached), keeps the ``.pth``'s folder
on the staged venv's path, and proves the venv by importing mlenv, torch, DeepSpeed and
PyYAML on a node before it says done.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import netns
from harness import slurm as slurm_harness
from test_slurm_stage import Env

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]

CLUSTER = "slurm-stage-wheels"
# what the node python lacks: mlenv (its editable hook too) and PyYAML
_HIDDEN = (
    "mlenv",
    "ml_dev_env",
    "__editable__",
    "_ml_dev_env",
    "yaml",
    "_yaml",
    "PyYAML",
    "pyyaml",
)


def _pypi_reason() -> str | None:
    try:
        urllib.request.urlopen("https://pypi.org/simple/pyyaml/", timeout=10).close()
    except OSError as e:
        return f"PyPI cannot be reached from here ({e}): staging downloads PyYAML from it"
    return None


def ngc_like_python(root: Path) -> Path:
    """A venv of this machine's base python whose one ``.pth`` line adds ``root/nodelibs``:
    links to the project venv's packages but mlenv and PyYAML."""
    libs = root / "nodelibs"
    libs.mkdir()
    project = Path(sysconfig.get_paths()["purelib"])
    for entry in project.iterdir():
        if not entry.name.startswith(_HIDDEN) and entry.suffix != ".pth":
            (libs / entry.name).symlink_to(entry)
    venv = root / "nodepy"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "image_libs.pth").write_text(f"{libs}\n")
    return py


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    why = slurm_harness.unavailable_reason() or netns.unavailable_reason() or _pypi_reason()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurmwheels")
    (root / "clusters").mkdir()
    (root / "shared").mkdir()
    py = ngc_like_python(root)
    (root / "clusters" / f"{CLUSTER}.yaml").write_text(
        f"cluster:\n  name: {CLUSTER}\nplatform: slurm\n"
        'slurm:\n  partition: debug\n  time_limit: "00:10:00"\n  exclusive: false\n'
        f"  gpus_flag: none\n  shared_dir: {root / 'shared'}\n  python: {py}\n"
        "gpus:\n  per_node: 1\n  type: cpu\n  default_nodes: 2\n"
    )
    with slurm_harness.on_netns_hosts(str(root)) as sl:
        yield Env(root, sl)


def test_stage_fetches_wheels_for_the_node_s_glibc_keeps_its_pth_path_and_imports_all(
    env: Env,
) -> None:
    glibc = platform.libc_ver()[1]
    assert glibc and int(glibc.split(".")[1]) > 28, glibc  # newer than PyYAML's newest tag
    py = env.root / "nodepy" / "bin" / "python"
    gone = subprocess.run(
        [str(py), "-c", "import yaml"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert gone.returncode != 0  # the node python really lacks PyYAML
    env.slurm.wait_idle(90)
    r = env.mlenv("stage", CLUSTER, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lacks yaml, mlenv" in r.stdout or "lacks mlenv, yaml" in r.stdout, r.stdout
    house = env.shared / ".mlenv" / "wheelhouse" / CLUSTER
    assert any(
        p.name.lower().startswith("pyyaml-") and "manylinux" in p.name for p in house.iterdir()
    )
    # done only after the venv's python imported them all on a node (the stage's last probe)
    venv = env.shared / ".mlenv" / "venv" / CLUSTER
    assert (
        f"staged {venv}" in r.stdout
        and "deepspeed " in r.stdout
        and "deepspeed None" not in r.stdout
    )
    pth = next((venv / "lib").glob("python3*/site-packages/_mlenv_node_python.pth")).read_text()
    assert str(env.root / "nodelibs") in pth.splitlines()
