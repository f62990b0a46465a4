"""On the real Slurm harness: a node python that lacks mlenv is stopped by
preflight (one line, the fix named, nothing submitted); ``mlenv stage`` brings mlenv to the
nodes in a venv over that python; the acceptance job then passes through the venv.

The "node python" lacks mlenv and has the rest (``harness/nodepy.py``). The CLI runs without PYTHONPATH, so neither srun nor sbatch hand the
nodes this checkout: what the job imports is what the node's python (or the venv) has.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import netns
from harness import slurm as slurm_harness
from harness.nodepy import node_python

# Its Slurm cluster is its own, but it shares test_slurm.py's group on purpose: with a
# group of its own, and its job and a test_slurm job ran at once (8 DeepSpeed ranks on
# the 2 cores): both missed training.deepspeed's 120 s deadline (sandbox load about 20).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]

CHECKOUT = str(Path(__file__).resolve().parents[2])
# `python -m mlenv` of this checkout with no PYTHONPATH (srun/sbatch export the environment)
MLENV = [
    sys.executable,
    "-c",
    f"import runpy, sys; sys.path.insert(0, {CHECKOUT!r}); "
    "runpy.run_module('mlenv', run_name='__main__', alter_sys=True)",
]
CLUSTER = "slurm-stage"
BASELINE = str(Path(__file__).parent / "harness" / "baseline_harness.yaml")
SMALL = str(Path(__file__).parent / "harness" / "acceptance_small.json")


class Env:
    def __init__(self, root: Path, sl: slurm_harness.SlurmCluster) -> None:
        self.root, self.slurm = root, sl
        self.shared = root / "shared"

    def mlenv(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = self.slurm.env(
            {
                "MLENV_ROOT": str(self.root),
                "OMP_NUM_THREADS": "1",
                "MLENV_BASELINE": BASELINE,
                "MLENV_OPTIONS": SMALL,
            }
        )
        env.pop("PYTHONPATH", None)
        return subprocess.run(
            [*MLENV, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            check=False,
        )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    why = slurm_harness.unavailable_reason() or netns.unavailable_reason()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurmstage")
    (root / "clusters").mkdir()
    (root / "shared").mkdir()
    py = node_python(root)
    (root / "clusters" / f"{CLUSTER}.yaml").write_text(
        f"cluster:\n  name: {CLUSTER}\n  namespace: unused\nplatform: slurm\n"
        'slurm:\n  partition: debug\n  time_limit: "00:10:00"\n  exclusive: false\n'
        f"  gpus_flag: none\n  shared_dir: {root / 'shared'}\n  python: {py}\n"
        "network:\n  tcp:\n    interface_exclude: lo\n"
        "gpus:\n  per_node: 2\n  type: cpu\n  default_nodes: 2\n"
    )
    with slurm_harness.on_netns_hosts(str(root)) as sl:
        yield Env(root, sl)


def test_preflight_names_the_missing_module_and_stage_then_the_run_passes(env: Env) -> None:
    env.slurm.wait_idle(90)
    t0 = time.monotonic()
    r = env.mlenv("deploy", CLUSTER)
    stopped_after = time.monotonic() - t0
    assert r.returncode == 3, r.stdout + r.stderr
    err = [line for line in r.stderr.splitlines() if line.strip()]
    line = next(x for x in err if "cannot import" in x)
    assert (
        f"{env.root / 'nodepy'}/bin/python cannot import mlenv (ModuleNotFoundError: No module named 'mlenv')"
        in line
    ), r.stderr
    assert f"run `mlenv stage {CLUSTER}`" in line and "nothing was submitted" in line
    assert (
        "torch" not in line.split("cannot import", 1)[1].split(":", 1)[0]
    )  # torch came with the python
    assert env.slurm.run("squeue", "-h", "-o", "%i").stdout.strip() == ""
    assert not (env.shared / ".mlenv" / "jobs").exists()  # no batch script was even written
    print(f"\npreflight stopped the missing-mlenv deploy in {stopped_after:.1f} s")

    t0 = time.monotonic()
    r = env.mlenv("stage", CLUSTER, timeout=600)
    staged_after = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    venv = env.shared / ".mlenv" / "venv" / CLUSTER
    assert f"staged {venv}" in r.stdout and "lacks mlenv" in r.stdout
    assert any(
        p.name.startswith("ml_dev_env-")
        for p in (env.shared / ".mlenv" / "wheelhouse" / CLUSTER).iterdir()
    )
    # the image's (here: the node python's) torch, not a copy
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert not (site / "torch").exists() and (site / "mlenv").is_dir()
    print(f"mlenv stage (wheel here, venv on a node) took {staged_after:.1f} s")

    env.slurm.wait_idle(90)
    t0 = time.monotonic()
    # The compute checks only: what this proves is the job's ranks running through
    # the staged venv on both nodes; the whole suite on Slurm is test_slurm.py's deploy
    # test (with it this test took 104 s of a CI worker, mostly DeepSpeed's training check).
    r = env.mlenv("acceptance", "--cluster", CLUSTER, "--checks", "compute", timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"{venv}/bin/python: python" in r.stdout  # preflight probed the staged venv
    rid = json.loads((env.root / ".mlenv" / "slurm" / f"{CLUSTER}.json").read_text())["run_id"]
    doc = json.loads((env.shared / "results" / rid / "results.json").read_text())
    assert doc["verdict"] == "PASS" and doc["world"]["nodes"] == 2, doc.get("reasons")
    assert {c["rank"] for c in doc["checks"] if c["name"] == "compute.matmul"} == set(
        range(doc["world"]["ranks"])
    )
    print(f"acceptance through the staged venv: PASS in {time.monotonic() - t0:.1f} s")
