"""The grammar of more public Slurm sites (IDRIS, CSCS, JSC, BSC, NERSC, Apptainer and
Pyxis sites): each form validates and renders into the scripts; each widened key keeps
refusing hostile values, located on their line; the site configs under examples/sites/
validate, render and pass shellcheck."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mlenv import argv
from mlenv.config import check_file, load
from mlenv.platforms import nodeprobe
from mlenv.platforms.slurm import srun_options
from mlenv.render.platforms import render_slurm

from .conftest import BASE, REPO, Check, messages

SITES = sorted((REPO / "examples" / "sites").glob("*.yaml"))
NO_NS = "cluster:\n  name: demo\n"
SLURM = NO_NS + "platform: slurm\nslurm:\n  partition: gpu\n  shared_dir: /shared/mlenv\n"


def errors(diags: list) -> list[str]:
    return [x.path for x in diags if x.severity == "error"]


def script(check: Check, text: str) -> list[str]:
    c, d = check(text)
    assert d == [] and c is not None, [x.format() for x in d]
    return render_slurm(c)["acceptance.sbatch"].splitlines()


# --- accounts with '@' -----------------------------------------------------------------------


def test_account_with_at(check: Check) -> None:
    lines = script(check, SLURM + "  account: xyz@a100\n")
    assert "#SBATCH --account=xyz@a100" in lines
    assert argv.slurm_account("xyz@a100") == "xyz@a100"


@pytest.mark.parametrize("value", ["@a100", "-x@a", "x@a;id", "x@$(id)", "x @a", "x@a\n", "x`id`"])
def test_account_hostile_refused_on_its_line(check: Check, value: str) -> None:
    _, d = check(SLURM + f"  account: {json.dumps(value)}\n")
    assert [(x.path, x.line) for x in d if x.severity == "error"] == [("slurm.account", 7)]
    with pytest.raises(argv.UnsafeArgument):
        argv.slurm_account(value)


# --- no partition ----------------------------------------------------------------------------


def test_no_partition_writes_none(check: Check, tmp_path: Path) -> None:
    text = NO_NS + "platform: slurm\nslurm:\n  qos: acc_debug\n  shared_dir: /s\n"
    lines = script(check, text)
    assert not [ln for ln in lines if "--partition" in ln]
    assert "#SBATCH --qos=acc_debug" in lines
    c, _ = check(text)
    assert c is not None
    assert not [o for o in srun_options(c, 0) if o.startswith("--partition")]


# --- CSCS: --environment, --uenv, --view -----------------------------------------------------


def test_cscs_sbatch_options(check: Check) -> None:
    args = ["--environment=/capstor/x/pytorch.toml", "--uenv=pytorch/v2.6.0:v1", "--view=default"]
    lines = script(check, SLURM + f"  sbatch_args: {json.dumps(args)}\n")
    for a in args:
        assert f"#SBATCH {a}" in lines
    for bad in ("--environment=$(id)", "--uenv=a;id", "--environment=a'b", "--container-writable"):
        _, d = check(SLURM + f"  sbatch_args: [{json.dumps(bad)}]\n")
        assert errors(d) == ["slurm.sbatch_args[0]"], bad


def test_cscs_environment_and_a_container_not_both(check: Check) -> None:
    _, d = check(
        SLURM + "  sbatch_args: ['--environment=pytorch']\n  container:\n    image: /i/x.sqsh\n"
    )
    assert errors(d) == ["slurm.sbatch_args[0]"]


# --- slurm.env: FI_* and GLOO_SOCKET_IFNAME --------------------------------------------------


def test_job_env_allow_list(check: Check) -> None:
    env = "  env:\n    FI_CXI_DISABLE_HOST_REGISTER: 1\n    FI_MR_CACHE_MONITOR: userfaultfd\n    GLOO_SOCKET_IFNAME: ib0\n"
    lines = script(check, SLURM + env)
    for line in (
        "export FI_CXI_DISABLE_HOST_REGISTER=1",
        "export FI_MR_CACHE_MONITOR=userfaultfd",
        "export GLOO_SOCKET_IFNAME=ib0",
    ):
        assert line in lines


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PATH", "NCCL_ALGO", "fi_x", "FI_", "BASH_ENV"])
def test_job_env_other_names_refused(check: Check, name: str) -> None:
    _, d = check(SLURM + f"  env:\n    {name}: x\n")
    errs = [x for x in d if x.severity == "error"]
    assert [(x.path, x.line) for x in errs] == [(f"slurm.env.{name}", 8)], [x.format() for x in d]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FI_PROVIDER", "$(id)"),
        ("FI_PROVIDER", "tcp;ofi_rxm"),
        ("FI_PROVIDER", "a b"),
        ("FI_PROVIDER", "-x"),
        ("FI_PROVIDER", "a\n"),
        ("GLOO_SOCKET_IFNAME", "ib0 x"),
        ("GLOO_SOCKET_IFNAME", "a/b"),
        ("GLOO_SOCKET_IFNAME", "ib0,$(id)"),
    ],
)
def test_job_env_hostile_values_refused_on_their_line(check: Check, name: str, value: str) -> None:
    _, d = check(SLURM + f"  env:\n    {name}: {json.dumps(value)}\n")
    assert [(x.path, x.line) for x in d if x.severity == "error"] == [(f"slurm.env.{name}", 8)]


# --- master address on another network's name --------------------------------------------------


def test_master_addr_suffix(check: Check) -> None:
    lines = script(check, SLURM + "  master_addr_suffix: i\n")
    first = lines.index(
        'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'
    )
    assert lines[first + 2] == 'MASTER_ADDR="$MASTER_ADDR"i'
    for bad in ("i;id", "$(id)", " i", "i/x", "i\n", "a b", "`id`"):
        _, d = check(SLURM + f"  master_addr_suffix: {json.dumps(bad)}\n")
        assert [(x.path, x.line) for x in d if x.severity == "error"] == [
            ("slurm.master_addr_suffix", 7)
        ], bad


# --- NCCL_IB_HCA's '=' and '^' forms ----------------------------------------------------------

RDMA = "network:\n  rdma:\n    enabled: true\n    devices: {}\n"


@pytest.mark.parametrize(
    ("devices", "hca"),
    [
        ('"=mlx5_1,mlx5_2"', "'=mlx5_1,mlx5_2'"),
        ('"^mlx5_bond_0"', "'^mlx5_bond_0'"),
        ('["^=mlx5_0", mlx5_1]', "'^=mlx5_0,mlx5_1'"),
        ('["=mlx5_0:1", "mlx5_3:1"]', "'=mlx5_0:1,mlx5_3:1'"),
    ],
)
def test_ib_hca_exact_and_exclusion_forms(check: Check, devices: str, hca: str) -> None:
    lines = script(check, SLURM + RDMA.format(devices))
    assert f"export NCCL_IB_HCA={hca}" in lines


@pytest.mark.parametrize(
    ("devices", "path"),
    [
        ('"mlx5_1,=mlx5_2"', "network.rdma.devices"),
        ('[mlx5_1, "^mlx5_2"]', "network.rdma.devices[1]"),
        ('"="', "network.rdma.devices"),
        ('"^;id"', "network.rdma.devices"),
        ('"=mlx5_1 x"', "network.rdma.devices"),
        ('"=$(id)"', "network.rdma.devices"),
    ],
)
def test_ib_hca_prefix_misplaced_or_hostile(check: Check, devices: str, path: str) -> None:
    _, d = check(SLURM + RDMA.format(devices))
    assert errors(d) == [path], [x.format() for x in d]


def test_ib_hca_prefixes_stay_refused_on_kubernetes(check: Check) -> None:
    _, d = check(BASE + RDMA.format('"=mlx5_1"') + "    interfaces: net1\n")
    assert "network.rdma.devices" in errors(d)


# --- slurm.container ---------------------------------------------------------------------------


def test_pyxis_flags(check: Check) -> None:
    box = (
        "  container:\n    image: 'nvcr.io#nvidia/pytorch:24.08-py3'\n    writable: true\n"
        "    mount_home: false\n    env: [NCCL_SOCKET_IFNAME, PATH]\n    name: mlenv\n"
    )
    lines = script(check, SLURM + box)
    assert "CONTAINER_ENV=NCCL_SOCKET_IFNAME,PATH" in lines
    srun = next(ln for ln in lines if ln.startswith("SRUN+=(--container-image")).rstrip(")")
    for flag in (
        '--container-env="$CONTAINER_ENV"',
        "--container-writable",
        "--no-container-mount-home",
        "--container-name=mlenv",
    ):
        assert flag in srun.split(), flag
    c, _ = check(SLURM + box)
    assert c is not None
    assert nodeprobe.container_options(c)[3:] == [
        "--container-writable",
        "--no-container-mount-home",
        "--container-name=mlenv",
        "--container-env=NCCL_SOCKET_IFNAME,PATH",
    ]
    assert nodeprobe.container_prefix(c) == []


def test_apptainer_runtime(check: Check) -> None:
    box = (
        "  container:\n    runtime: apptainer\n    image: /images/pt.sif\n"
        "    mounts: ['/data:/data:ro']\n    mount_home: false\n"
    )
    lines = script(check, SLURM + box)
    assert "CONTAINER_MOUNTS=/shared/mlenv:/shared/mlenv,/data:/data:ro" in lines
    assert (
        'SRUN+=(apptainer exec --nv --no-home --bind "$CONTAINER_MOUNTS" --pwd "$MLENV_SHARED_DIR" '
        '"$CONTAINER_IMAGE")'
    ) in lines
    assert not [ln for ln in lines if "--container-image" in ln]
    c, _ = check(SLURM + box)
    assert c is not None
    words = nodeprobe.srun_words(c, srun_options(c, 0), ["python3", "-c", "x"])
    tail = words[words.index("--") + 1 :]
    assert tail == [
        "apptainer",
        "exec",
        "--nv",
        "--no-home",
        "--bind",
        "/shared/mlenv:/shared/mlenv,/data:/data:ro",
        "--pwd",
        "/shared/mlenv",
        "/images/pt.sif",
        "python3",
        "-c",
        "x",
    ]
    assert not [w for w in words if w.startswith("--container")]
    c2, _ = check(
        SLURM + box.replace("/images/pt.sif", "docker://nvcr.io/nvidia/pytorch:24.08-py3")
    )
    assert c2 is not None and c2.slurm.container_image.startswith("docker://")


@pytest.mark.parametrize(
    ("box", "path", "says"),
    [
        ("runtime: apptainer\n    image: /i/x.sqsh", "slurm.container.image", "Apptainer image"),
        (
            "runtime: apptainer\n    image: 'docker://x;id'",
            "slurm.container.image",
            "Apptainer image",
        ),
        ("runtime: apptainer\n    image: /i/../x.sif", "slurm.container.image", "Apptainer image"),
        ("image: /i/x.sif", "slurm.container.image", "not an image reference"),
        (
            "runtime: apptainer\n    image: /i/x.sif\n    env: [A]",
            "slurm.container.env",
            "pyxis option",
        ),
        (
            "runtime: apptainer\n    image: /i/x.sif\n    name: n",
            "slurm.container.name",
            "pyxis option",
        ),
        (
            "runtime: apptainer\n    image: /i/x.sif\n    mounts: ['/a:/b:ro+rbind']",
            "slurm.container.mounts[0]",
            "Apptainer bind",
        ),
        ("image: /i/x.sqsh\n    name: 'a;id'", "slurm.container.name", "not a container name"),
        ("image: /i/x.sqsh\n    env: ['A-B']", "slurm.container.env[0]", "not a variable name"),
        ("image: /i/x.sqsh\n    env: ['$(id)']", "slurm.container.env[0]", "not a variable name"),
        ("runtime: docker\n    image: /i/x.sqsh", "slurm.container.runtime", ""),
    ],
)
def test_container_refused(check: Check, box: str, path: str, says: str) -> None:
    _, d = check(SLURM + f"  container:\n    {box}\n")
    errs = [x for x in d if x.severity == "error"]
    assert [x.path for x in errs] == [path] and says in errs[0].message, [x.format() for x in d]


def test_flat_and_nested_container_keys_not_both(check: Check) -> None:
    _, d = check(SLURM + "  container_image: /i/x.sqsh\n  container:\n    image: /i/y.sqsh\n")
    assert messages(d) == [
        "slurm.container_image: slurm.container_image and slurm.container.image are both set"
    ]
    c, d = check(SLURM + "  container_image: /i/x.sqsh\n  container_mounts: ['/a:/b']\n")
    assert d == [] and c is not None
    assert (c.slurm.container_image, c.slurm.container_mounts) == ("/i/x.sqsh", ("/a:/b",))


@pytest.mark.parametrize("dst", ["/shared/mlenv", "/shared", "/", "/shared/mlenv/"])
@pytest.mark.parametrize("nested", [True, False])
def test_mount_cannot_hide_shared_dir(check: Check, dst: str, nested: bool) -> None:
    mounts = json.dumps([f"/data:{dst}"])
    text = (
        f"  container:\n    image: /i/x.sqsh\n    mounts: {mounts}\n"
        if nested
        else f"  container_image: /i/x.sqsh\n  container_mounts: {mounts}\n"
    )
    _, d = check(SLURM + text)
    path = "slurm.container.mounts[0]" if nested else "slurm.container_mounts[0]"
    errs = [x for x in d if x.severity == "error"]
    assert [x.path for x in errs] == [path] and "would hide slurm.shared_dir" in errs[0].message


def test_mount_beside_or_below_shared_dir_is_fine(check: Check) -> None:
    c, d = check(
        SLURM + "  container_image: /i/x.sqsh\n"
        "  container_mounts: ['/data:/shared/mlenv-data', '/d:/shared/mlenv/workspace/data:ro', '/sharedx']\n"
    )
    assert d == [] and c is not None


# --- modules ----------------------------------------------------------------------------------


def test_modules_loaded_before_python(check: Check) -> None:
    lines = script(
        check,
        SLURM + "  modules: [Stages/2024, PyTorch/2.1.2-foss-2023a-CUDA-12.1.1, cray-python]\n",
    )
    loads = [i for i, ln in enumerate(lines) if ln.startswith("module load ")]
    assert [lines[i] for i in loads] == [
        "module load Stages/2024",
        "module load PyTorch/2.1.2-foss-2023a-CUDA-12.1.1",
        "module load cray-python",
    ]
    assert lines[loads[0] - 1] == "set +u" and lines[loads[-1] + 1] == "set -u"
    assert loads[-1] < next(i for i, ln in enumerate(lines) if ln.startswith("MLENV_PYTHON="))


@pytest.mark.parametrize(
    "value", ["-f", "a b", "a;id", "$(id)", "a/../b", "/abs", "a//b", "a\n", ""]
)
def test_modules_hostile_refused_on_their_line(check: Check, value: str) -> None:
    _, d = check(SLURM + f"  modules: [ok, {json.dumps(value)}]\n")
    assert [(x.path, x.line) for x in d if x.severity == "error"] == [("slurm.modules[1]", 7)]


# --- the site configs -----------------------------------------------------------------------------


def test_site_configs_are_there() -> None:
    assert [p.stem for p in SITES] == [
        "alliance-apptainer",
        "bsc-marenostrum5",
        "cscs-alps-uenv",
        "cscs-alps",
        "idris-jean-zay",
        "jsc-juwels-booster",
        "nersc-perlmutter",
        "pyxis-superpod",
    ]


@pytest.mark.parametrize("path", SITES, ids=lambda p: p.stem)
def test_site_config_validates_renders_and_passes_shellcheck(path: Path, tmp_path: Path) -> None:
    assert re.search(r"^# Source: ", path.read_text(encoding="utf-8"), re.MULTILINE), (
        "no source named"
    )
    cluster, diags = check_file(path)
    assert [d.format() for d in diags] == [] and cluster is not None
    for name, text in render_slurm(cluster).items():
        f = tmp_path / name
        f.write_text(text)
        r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr
        if shutil.which("shellcheck") is None:
            pytest.skip("shellcheck is not installed (scripts/dev/system-deps.sh installs it)")
        r = subprocess.run(
            ["shellcheck", "--shell=bash", str(f)], capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, r.stdout


@pytest.mark.parametrize(
    ("site", "lines"),
    [
        ("idris-jean-zay", ["#SBATCH --account=xyz@a100", "module load pytorch-gpu/py3/2.3.0"]),
        (
            "cscs-alps",
            [
                "#SBATCH --environment=/capstor/store/cscs/ml01/mlenv/pytorch.toml",
                "export FI_CXI_DISABLE_HOST_REGISTER=1",
                "export FI_MR_CACHE_MONITOR=userfaultfd",
            ],
        ),
        ("cscs-alps-uenv", ["#SBATCH --uenv=pytorch/v2.6.0:v1", "#SBATCH --view=default"]),
        (
            "jsc-juwels-booster",
            [
                'MASTER_ADDR="$MASTER_ADDR"i',
                "export GLOO_SOCKET_IFNAME=ib0",
                "export NCCL_IB_HCA='=mlx5_0,mlx5_1,mlx5_2,mlx5_3'",
            ],
        ),
        ("bsc-marenostrum5", ["#SBATCH --qos=acc_debug", "#SBATCH --gres=gpu:4"]),
        (
            "nersc-perlmutter",
            ["#SBATCH --constraint=gpu", "#SBATCH --qos=regular", "module load pytorch/2.3.1"],
        ),
        (
            "alliance-apptainer",
            [
                "CONTAINER_IMAGE=/project/def-someprof/images/pytorch-24.08.sif",
                "#SBATCH --gpus-per-node=a100:4",
            ],
        ),
        ("pyxis-superpod", ["CONTAINER_ENV=NCCL_SOCKET_IFNAME,NCCL_IB_HCA"]),
    ],
)
def test_site_config_lands_its_values(site: str, lines: list[str]) -> None:
    text = render_slurm(load(REPO / "examples" / "sites" / f"{site}.yaml"))["acceptance.sbatch"]
    got = text.splitlines()
    for line in lines:
        assert line in got, line
    if site in ("bsc-marenostrum5", "nersc-perlmutter", "alliance-apptainer", "idris-jean-zay"):
        assert "--partition" not in text


def test_resources_on_shared_slurm_nodes_are_used_not_warned(check: Check) -> None:
    res = "resources:\n  requests:\n    cpu: '8'\n    memory: 64Gi\n"
    c, d = check(SLURM + "  exclusive: false\n" + res)
    assert d == [] and c is not None
    lines = render_slurm(c)["acceptance.sbatch"].splitlines()
    assert "#SBATCH --cpus-per-task=8" in lines and "#SBATCH --mem=65536M" in lines
    # the limits are still nothing to Slurm, and exclusive nodes use neither
    _, d = check(SLURM + "  exclusive: false\n" + res + "  limits:\n    cpu: '16'\n")
    assert [(x.severity, x.path) for x in d] == [("warning", "resources.limits")]
    _, d = check(SLURM + res)
    assert [(x.severity, x.path) for x in d] == [("warning", "resources")]
