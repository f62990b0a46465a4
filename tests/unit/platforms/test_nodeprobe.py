"""preflight asks one node's python what it cannot import, and stops with one
line naming the module and the fix (``mlenv stage CLUSTER``), before anything is submitted.

The probe's words are pinned here (the container form included: it can only be rendered
on this machine); fake ``srun``/``ssh`` on PATH answer as a node lacking a module would.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mlenv.config.loader import load
from mlenv.errors import InfraError
from mlenv.platforms import hosts, nodeprobe, slurm
from mlenv.platforms.base import Session
from mlenv.platforms.dispatch import platform_named
from mlenv.platforms.slurm import srun_options

DATA = Path(__file__).resolve().parents[2] / "data" / "platforms"
PYXIS = DATA / "site-superpod-pyxis.yaml"
CPU = DATA / "cpu-slurm.yaml"
LAB = DATA / "site-baremetal-lab.yaml"


def _fake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, answer: dict[str, object]
) -> Path:
    """``name`` on PATH: records its argv (one word a line) and prints ``answer`` as the probe."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    log = tmp_path / f"{name}.argv"
    fake = bin_ / name
    fake.write_text(
        f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {shlex.quote(str(log))}\n"
        f"echo {shlex.quote(json.dumps(answer))}\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    return log


def test_the_container_probe_runs_in_the_image_with_the_job_s_mounts() -> None:
    c = load(PYXIS)
    words = nodeprobe.srun_words(c, srun_options(c, 0), ["python", "-c", nodeprobe.PROBE])
    cut = words.index("--")
    opts, cmd = words[:cut], words[cut + 1 :]
    assert opts[0] == "srun" and "--nodes=1" in opts and "--ntasks=1" in opts
    assert f"--nodelist={c.gpu_nodes[0]}" in opts and f"--partition={c.slurm.partition}" in opts
    assert f"--account={c.slurm.account}" in opts and f"--reservation={c.slurm.reservation}" in opts
    assert f"--container-image={c.slurm.container_image}" in opts
    # the batch script's own mounts: shared_dir at its path, the config's, flags joined by '+'
    from mlenv.render.platforms import render_slurm

    script = render_slurm(c)["acceptance.sbatch"]
    mounts = next(o for o in opts if o.startswith("--container-mounts=")).split("=", 1)[1]
    assert f"CONTAINER_MOUNTS={shlex.quote(mounts)}" in script
    assert mounts.startswith(f"{c.slurm.shared_dir}:{c.slurm.shared_dir},") and "ro+rbind" in mounts
    assert any(o.startswith("--immediate=") for o in opts)  # a busy partition cannot hold preflight
    assert cmd == ["python", "-c", nodeprobe.PROBE]


def test_without_a_container_the_probe_runs_the_node_s_python() -> None:
    words = nodeprobe.srun_words(
        load(CPU), srun_options(load(CPU), 0), ["/usr/bin/python3", "-c", "x"]
    )
    assert not any(w.startswith("--container") for w in words)
    assert words[-4:] == ["--", "/usr/bin/python3", "-c", "x"]


def test_the_probe_names_what_a_python_cannot_import(tmp_path: Path) -> None:
    # a python without site-packages: no torch, no yaml, no DeepSpeed (this machine's has them)
    r = subprocess.run(
        [sys.executable, "-S", "-c", nodeprobe.PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
        cwd=tmp_path,
    )
    found = nodeprobe.parse(r.stdout)
    assert found is not None
    assert {"torch", "yaml", "deepspeed", "mlenv"} <= set(found["missing"]), found
    assert "No module named 'torch'" in found["missing"]["torch"]


def test_missing_mlenv_is_one_line_naming_it_and_mlenv_stage() -> None:
    c = load(CPU)
    found = {
        "executable": "/usr/bin/python3",
        "missing": {
            "mlenv": "ModuleNotFoundError: No module named 'mlenv'",
            "deepspeed": "ModuleNotFoundError: x",
        },
    }
    line = nodeprobe.missing_line(c, "node n1", found, stopped="nothing was submitted")
    assert line is not None and "\n" not in line
    assert (
        "node n1: /usr/bin/python3 cannot import mlenv (ModuleNotFoundError: No module named 'mlenv')"
        in line
    )
    assert f"run `mlenv stage {c.name}`" in line and "mlenv, DeepSpeed" in line
    assert line.endswith("nothing was submitted")
    assert nodeprobe.missing_line(c, "node n1", {"missing": {}}, stopped="x") is None


def test_missing_torch_points_at_the_python_not_at_stage() -> None:
    line = nodeprobe.missing_line(
        load(PYXIS),
        "node n1",
        {"missing": {"torch": "No module named 'torch'"}},
        stopped="nothing was submitted",
    )
    assert line is not None and "slurm.python or slurm.container_image" in line
    assert "run `mlenv stage" not in line


def test_slurm_preflight_stops_on_a_node_without_mlenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake(
        tmp_path,
        monkeypatch,
        "srun",
        {
            "python": "3.10.12",
            "executable": "/usr/bin/python3",
            "node": "n1",
            "missing": {"mlenv": "No module named 'mlenv'"},
        },
    )
    said: list[str] = []
    with pytest.raises(InfraError) as e:
        slurm.probe_imports(load(CPU), said.append)
    assert str(e.value).startswith("preflight: node n1: /usr/bin/python3 cannot import mlenv")
    assert "mlenv stage cpu-slurm" in str(e.value) and "nothing was submitted" in str(e.value)
    ran = log.read_text().splitlines()
    assert (
        ran[ran.index("--") + 1] == load(CPU).slurm.python
    )  # nothing staged yet: the configured one


def test_slurm_preflight_says_versions_when_everything_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(
        tmp_path,
        monkeypatch,
        "srun",
        {
            "python": "3.10.12",
            "executable": "/usr/bin/python3",
            "node": "n1",
            "missing": {},
            "torch": "2.4.0",
            "deepspeed": "0.15.1",
        },
    )
    said: list[str] = []
    slurm.probe_imports(load(CPU), said.append)
    assert said and "torch 2.4.0" in said[0] and "deepspeed 0.15.1" in said[0]


def test_hosts_preflight_stops_on_a_host_without_deepspeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(
        tmp_path,
        monkeypatch,
        "ssh",
        {
            "python": "3.11.7",
            "executable": "/opt/conda/envs/ml/bin/python",
            "torch": "2.4.0",
            "gpus": 2,
            "deepspeed": None,
            "missing": {"deepspeed": "No module named 'deepspeed'"},
        },
    )
    c = load(LAB)
    with pytest.raises(InfraError) as e:
        hosts.preflight(c, say=lambda _: None)
    msg = str(e.value)
    assert (
        msg.startswith(
            f"preflight: host {c.gpu_nodes[0]}: /opt/conda/envs/ml/bin/python cannot import "
            "deepspeed"
        )
        and "\n" not in msg
    )
    assert f"mlenv stage {c.name}" in msg and msg.endswith("nothing was launched")


def test_a_staged_venv_is_the_python_runs_use(tmp_path: Path) -> None:
    text = CPU.read_text().replace("/shared/mlenv", str(tmp_path))
    (tmp_path / "c.yaml").write_text(text)
    c = load(tmp_path / "c.yaml")
    assert nodeprobe.node_python(c) == c.slurm.python
    venv = Path(nodeprobe.venv_dir(c))
    (venv / "bin").mkdir(parents=True)
    # a link into the node's (or the image's) interpreter, which this machine may lack
    (venv / "bin" / "python").symlink_to("/nonexistent/python3")
    assert nodeprobe.node_python(c) == f"{venv}/bin/python"


# --- mlenv stage: what it builds here and runs there ------------------------------------


def test_stage_builds_only_mlenv_when_the_node_has_the_rest(tmp_path: Path) -> None:
    from mlenv.platforms import stage

    cmds = stage.wheelhouse_commands(tmp_path / "wh", tmp_path / "src", {"missing": {"mlenv": "x"}})
    assert len(cmds) == 1 and cmds[0][1:4] == ["-m", "pip", "--disable-pip-version-check"]
    assert {"wheel", "--no-deps", "--no-build-isolation", "--no-index"} <= set(cmds[0])
    assert cmds[0][-1] == str(tmp_path / "src")
    assert stage.requirements({"missing": {"mlenv": "x"}}) == []


def test_stage_fetches_deepspeed_and_pyyaml_for_the_node_s_python_never_torch(
    tmp_path: Path,
) -> None:
    from mlenv.platforms import stage

    found = {
        "python": "3.10.12",
        "machine": "aarch64",
        "glibc": "2.35",
        "missing": {"mlenv": "x", "yaml": "x", "deepspeed": "x"},
    }
    cmds = stage.wheelhouse_commands(tmp_path / "wh", tmp_path / "src", found)
    binary = next(c for c in cmds if "--only-binary=:all:" in c)
    assert "--python-version=310" in binary and "--platform=manylinux_2_35_aarch64" in binary
    names = binary[binary.index("--") + 1 :]
    assert "pyyaml" in names and "hjson" in names
    assert not any(n.split("=")[0].split(">")[0] == "torch" for n in names)
    sdist = next(c for c in cmds if "--no-binary=:all:" in c)
    assert sdist[-1].startswith("deepspeed==")  # built on the node, against the node's torch
    assert stage.requirements(found) == ["pyyaml", "deepspeed"]


def test_stage_refuses_kubernetes_and_hosts_without_a_shared_folder() -> None:
    from mlenv.errors import InputError
    from mlenv.platforms import stage

    with pytest.raises(InputError, match="hosts.shared_dir is empty"):
        stage.stage(load(LAB), lambda _: None)
    kube = load(Path(__file__).resolve().parents[3] / "clusters" / "local.yaml")
    with pytest.raises(InputError, match="mlenv stage: not supported on platform"):
        platform_named(kube.platform).stage(kube, Session(say=print, warn=print, root=Path(".")))


def _failing_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "srun").write_text(f"#!/bin/sh\necho {shlex.quote(message)} >&2\nexit 1\n")
    (bin_ / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")


def test_a_busy_partition_skips_the_probe_a_refusal_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_srun(
        tmp_path, monkeypatch, "srun: error: Unable to allocate resources: Requested nodes are busy"
    )
    said: list[str] = []
    slurm.probe_imports(load(CPU), said.append)
    assert said and "free within" in said[0] and "the job will find out itself" in said[0]
    _failing_srun(
        tmp_path,
        monkeypatch,
        "srun: error: Unable to allocate resources: Invalid account or "
        "account/partition combination specified",
    )
    with pytest.raises(InfraError) as e:
        slurm.probe_imports(load(CPU), said.append)
    assert "import probe" in str(e.value) and "Invalid account" in str(e.value)


def test_the_batch_script_picks_the_venv_stage_made_even_as_a_link_into_an_image(
    tmp_path: Path,
) -> None:
    """The rendered script and node_python agree on the venv; its bin/python may link to an
    interpreter only the container has (the batch host runs outside the container)."""
    from mlenv.render.platforms import render_slurm

    (tmp_path / "c.yaml").write_text(
        PYXIS.read_text().replace("/lustre/fsw/mlenv", str(tmp_path / "shared"))
    )
    c = load(tmp_path / "c.yaml")
    script = render_slurm(c)["acceptance.sbatch"].splitlines()
    start = next(i for i, x in enumerate(script) if x.startswith("MLENV_SHARED_DIR="))
    end = next(
        i for i, x in enumerate(script) if x.startswith('if [ -L "$MLENV_VENV/bin/python" ]')
    )
    snippet = "\n".join([*script[start : end + 1], 'printf %s "$MLENV_PYTHON"'])

    def picked() -> str:
        return subprocess.run(
            ["bash", "-c", snippet], capture_output=True, text=True, check=True
        ).stdout

    assert picked() == c.slurm.python
    venv = Path(nodeprobe.venv_dir(c))
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3-only-in-the-image")
    assert picked() == nodeprobe.node_python(c) == f"{venv}/bin/python"


def test_a_partition_that_is_down_skips_the_probe_and_the_job_is_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sbatch queues a job on a DOWN partition (it pends, PartitionDown); the probe's srun
    would wait out its 60 s first: found by the real Slurm tier's pending test in a CI run."""
    srun = _fake(tmp_path, monkeypatch, "srun", {"missing": {"mlenv": "No module named 'mlenv'"}})
    scontrol = tmp_path / "bin" / "scontrol"
    part = load(CPU).slurm.partition
    scontrol.write_text(
        f"#!/bin/sh\necho 'PartitionName={part} AllowGroups=ALL Nodes=n[1-2] State=DOWN "
        "TotalNodes=2'\n"
    )
    scontrol.chmod(0o755)
    said: list[str] = []
    slurm.probe_imports(load(CPU), said.append)  # no InfraError: the probe did not run
    assert not srun.exists()
    assert said == [
        f"preflight: partition {part} is DOWN: the job will pend until it is up; the import probe "
        "is skipped (the job finds out itself)"
    ]
