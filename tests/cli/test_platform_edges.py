"""each verb does the platform's right thing or says in one line that it does
not apply (exit 2). The Slurm clients on PATH here are tripwires: they record that they
were called and fail, so a verb that must not talk to Slurm is caught doing so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.cli.app import app
from mlenv.config import load
from mlenv.errors import InfraError
from mlenv.platforms.slurm import _check
from mlenv.render.platforms import render_slurm

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "platforms"


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    (tmp_path / "clusters").mkdir()
    # clusters/<name>.yaml: the CLI finds a config by its file name
    for f, name in (
        ("site-university-gres.yaml", "site-university"),
        ("site-baremetal-lab.yaml", "site-lab"),
    ):
        shutil.copy(DATA / f, tmp_path / "clusters" / f"{name}.yaml")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "scontrol", "squeue", "sinfo", "srun", "scancel", "sacct", "ssh"):
        t = bin_dir / tool
        t.write_text(f"#!/bin/sh\necho {tool} >> {tmp_path}/called\nexit 1\n")
        t.chmod(0o755)
    return tmp_path


def _env(root: Path) -> dict[str, str]:
    return {"MLENV_ROOT": str(root), "PATH": f"{root / 'bin'}:{os.environ['PATH']}"}


def test_deploy_dry_run_client_on_slurm_prints_the_plan_and_calls_nothing(root: Path) -> None:
    r = CliRunner().invoke(
        app, ["deploy", "site-university", "--dry-run", "client"], env=_env(root)
    )
    assert r.exit_code == 0, r.output
    assert (
        "# ==> acceptance.sbatch <==" in r.stdout
        and "#SBATCH --partition=gpu-a100,gpu-a100-long" in r.stdout
    )
    assert "nothing was sent" in r.stderr
    assert not (root / "called").exists(), (root / "called").read_text()


def test_deploy_dry_run_client_on_hosts_calls_no_ssh(root: Path) -> None:
    r = CliRunner().invoke(app, ["deploy", "site-lab", "--dry-run", "client"], env=_env(root))
    assert r.exit_code == 0, r.output
    assert "Lab-WS-01 slots=2" in r.stdout
    assert not (root / "called").exists()


def test_deploy_dry_run_server_does_not_apply_off_kubernetes(root: Path) -> None:
    r = CliRunner().invoke(
        app, ["deploy", "site-university", "--dry-run", "server"], env=_env(root)
    )
    assert r.exit_code == 2
    assert (
        "does not apply on platform slurm" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    )
    assert not (root / "called").exists()


@pytest.mark.parametrize("name", ["site-university", "site-lab"])
def test_secrets_does_not_apply_off_kubernetes(root: Path, name: str) -> None:
    r = CliRunner().invoke(app, ["secrets", name], env=_env(root))
    assert r.exit_code == 2
    assert r.stdout == "" and "mlenv secrets: not supported on platform" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_sbatch_header_suggests_a_command_that_exists() -> None:
    text = render_slurm(load(DATA / "site-university-gres.yaml"))["acceptance.sbatch"]
    (line,) = [ln for ln in text.splitlines() if ln.startswith("#   mlenv acceptance")]
    words = line[1:].split()[:4]
    assert words == ["mlenv", "acceptance", "--cluster", "site-university"]
    r = CliRunner().invoke(app, ["acceptance", "--help"])
    assert "--cluster" in r.stdout


@pytest.mark.parametrize(
    ("stderr", "hint"),
    [
        (
            "scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
            "scontrol: fatal: Could not establish a configuration source",
            "set SLURM_CONF",
        ),
        (
            "slurm_load_partitions: Unable to contact slurm controller (connect failure)",
            "scontrol ping",
        ),
        ("scontrol: fatal: something else", "check SLURM_CONF"),
    ],
)
def test_scontrol_fatal_error_has_a_hint(stderr: str, hint: str) -> None:
    r = subprocess.CompletedProcess(["scontrol", "show", "partition"], 1, "", stderr)
    with pytest.raises(InfraError) as e:
        _check(r)
    assert hint in str(e.value) and str(e.value).startswith("scontrol failed (exit 1): ")


def test_acceptance_on_a_platform_hands_localize_to_the_job(tmp_path: Path) -> None:
    """``mlenv acceptance --cluster NAME --localize`` dropped --localize, so the job's
    fabric.localize stayed on auto and SKIPped (found on the real Slurm harness)."""
    from mlenv.service.acceptance import platform_suite_args

    opts = tmp_path / "o.json"
    args = platform_suite_args(
        checks="fabric.localize", baseline=None, options=opts, deadline=0, localize=True
    )
    assert args == ["--checks", "fabric.localize", "--options", str(opts.resolve()), "--localize"]
    assert "--localize" not in platform_suite_args(
        checks="", baseline=None, options=None, deadline=0, localize=False
    )


@pytest.mark.parametrize("name", ["site-university", "site-lab"])  # Slurm, hosts
@pytest.mark.parametrize(
    "flags, said",
    [
        (["--options", "{opts}"], "compute.matmul"),
        (["--checks", "compute,nonsense"], "nonsense"),
    ],
)
def test_a_bad_option_or_check_stops_a_platform_run_before_anything_is_submitted(
    root: Path, name: str, flags: list[str], said: str
) -> None:
    """Before, the job carried a typo to every rank on the nodes, which each refused it
    after the queue and the rendezvous (a run ending ERROR). Now: exit 2 here, located,
    and no Slurm or ssh command run."""
    opts = root / "opts.yaml"
    opts.write_text("compute.matmul:\n  iterz: 3\n")
    args = [f.format(opts=opts) for f in flags]
    r = CliRunner().invoke(app, ["acceptance", "--cluster", name, *args], env=_env(root))
    assert r.exit_code == 2, r.output
    assert said in r.stderr and "Traceback" not in r.output
    assert not (root / "called").exists(), (root / "called").read_text()


@pytest.mark.parametrize("plugin", ["site_checks_only_on_the_nodes", "site.pkg.checks"])
def test_a_plugins_check_that_only_the_nodes_have_still_reaches_the_job(
    root: Path, plugin: str
) -> None:
    """MLENV_ACCEPTANCE_PLUGINS names a module the nodes have and this machine does not:
    its checks and options cannot be told from a typo here, so they go to the job as before
    (the fake Slurm tools are asked, and fail: exit 3, not 2)."""
    opts = root / "opts.yaml"
    opts.write_text("site.fabric:\n  level: 3\n")
    env = {**_env(root), "MLENV_ACCEPTANCE_PLUGINS": plugin}
    r = CliRunner().invoke(
        app,
        [
            "acceptance",
            "--cluster",
            "site-university",
            "--checks",
            "site.fabric",
            "--options",
            str(opts),
        ],
        env=env,
    )
    assert r.exit_code != 2, r.output
    assert "scontrol" in (root / "called").read_text()


@pytest.mark.parametrize("name", ["site-university", "site-lab"])  # Slurm, hosts
@pytest.mark.parametrize(
    "var, text, said",
    [
        ("MLENV_OPTIONS", "compute.matmul:\n  iterz: 3\n", "iterz"),
        (
            "MLENV_BASELINE",
            "model: x\nrules: [{check: compute.matmul, metric: tflops, op: '>>', value: 1}]\n",
            "op",
        ),
    ],
)
def test_an_options_or_baseline_file_from_the_environment_is_checked_here_too(
    root: Path, name: str, var: str, text: str, said: str
) -> None:
    """The Slurm script and the hosts' runner take $MLENV_OPTIONS / $MLENV_BASELINE when the
    flag is not given; before, only the flags were checked here, so a typo in the file the
    environment named still reached every rank after the queue. Now: exit 2 here, naming
    the variable, nothing submitted."""
    bad = root / "from-env.yaml"
    bad.write_text(text)
    r = CliRunner().invoke(
        app, ["acceptance", "--cluster", name], env={**_env(root), var: str(bad)}
    )
    assert r.exit_code == 2, r.output
    assert said in r.stderr and f"${var}={bad}" in r.stderr and "Traceback" not in r.output, (
        r.stderr
    )
    assert not (root / "called").exists(), (root / "called").read_text()
