"""Every allocation mlenv makes on Slurm obeys the site: the probe, ``stage`` and ``shell``
ask for what the job asks (GPUs, constraint, the CSCS environment, the container); a
refusal is printed whole (a job_submit.lua explains itself before Slurm's last line);
``slurm.import_probe: false`` skips the probe; ``scontrol show job`` is read field by
field even with a ``--comment`` of ``Key=value`` words; ``status -o`` and ``logs -f`` are
refused in one line rather than ignored."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mlenv.config.loader import load
from mlenv.errors import InfraError, InputError
from mlenv.platforms import nodeprobe, slurm
from mlenv.platforms.base import Session
from mlenv.platforms.dispatch import platform_named

DATA = Path(__file__).resolve().parents[2] / "data" / "platforms"
SITES = Path(__file__).resolve().parents[3] / "examples" / "sites"


def _cfg(tmp_path: Path, extra: str, gpus: str = "gpus_flag: gpus-per-node") -> object:
    f = tmp_path / "c.yaml"
    f.write_text(
        "cluster:\n  name: demo\nplatform: slurm\nslurm:\n  partition: gpu\n"
        f"  shared_dir: /s\n  {gpus}\n{extra}gpus:\n  per_node: 4\n"
    )
    return load(f)


def test_probe_and_shell_ask_for_the_job_s_gpus_and_constraint(tmp_path: Path) -> None:
    c = _cfg(tmp_path, "  constraint: 'a100&ib'\n  gpu_type: a100\n")
    opts = slurm.srun_options(c, 0)  # type: ignore[arg-type]
    assert "--gpus-per-node=a100:4" in opts and "--constraint=a100&ib" in opts
    c = _cfg(tmp_path, "", gpus="gpus_flag: gres")
    assert "--gres=gpu:4" in slurm.srun_options(c, 0)  # type: ignore[arg-type]
    c = _cfg(
        tmp_path,
        "  sbatch_args: ['--gres=gpu:h100:2', '--mem=0', '--environment=pt']\n",
        gpus="gpus_flag: none",
    )
    opts = slurm.srun_options(c, 0)  # type: ignore[arg-type]
    # the site's own GPU request and environment travel; --mem (the job's) does not
    assert "--gres=gpu:h100:2" in opts and "--environment=pt" in opts
    assert not [o for o in opts if o.startswith(("--mem", "--gpus-per-node"))]


def test_shell_runs_in_the_job_s_container(tmp_path: Path) -> None:
    pyxis = load(DATA / "site-superpod-pyxis.yaml")
    words = slurm.shell_argv(pyxis, ["nvidia-smi"])
    opts = words[: words.index("--")]
    assert f"--container-image={pyxis.slurm.container_image}" in opts
    assert "--gpus-per-node=8" in opts and words[-1] == "nvidia-smi"
    app = load(SITES / "alliance-apptainer.yaml")
    words = slurm.shell_argv(app, ["nvidia-smi"])
    cmd = words[words.index("--") + 1 :]
    assert cmd[:3] == ["apptainer", "exec", "--nv"] and cmd[-2:] == [
        app.slurm.container_image,
        "nvidia-smi",
    ]


def _failed(args: list[str], stderr: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(args, 1, "", stderr)


SITE_REFUSAL = (
    "sbatch: error: Jobs in partition gpu must request at least one GPU (--gpus-per-node=N)\n"
    "sbatch: error: See https://example.org/hpc/gpu-rules\n"
    "sbatch: error: Batch job submission failed: Unspecified error\n"
)


def test_a_refusal_is_printed_whole() -> None:
    with pytest.raises(InfraError) as e:
        slurm._check(_failed(["sbatch", "x"], SITE_REFUSAL))
    msg = str(e.value)
    assert "must request at least one GPU" in msg and "gpu-rules" in msg
    assert msg.endswith("Batch job submission failed: Unspecified error")


def test_the_probe_s_refusal_is_printed_whole_with_the_way_out(tmp_path: Path) -> None:
    c = _cfg(tmp_path, "")

    def run(words: list[str], timeout: float = 0) -> subprocess.CompletedProcess[str]:
        return _failed(words, SITE_REFUSAL.replace("sbatch", "srun"))

    with pytest.raises(InfraError) as e:
        nodeprobe.slurm_probe(c, "python3", run, slurm.srun_options(c, 0))  # type: ignore[arg-type]
    msg = str(e.value)
    assert "must request at least one GPU" in msg and "slurm.import_probe: false" in msg


def test_import_probe_off_skips_the_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = _cfg(tmp_path, "  import_probe: false\n")
    called: list[list[str]] = []
    monkeypatch.setattr(slurm, "_run", lambda words, timeout=0: called.append(words))
    said: list[str] = []
    slurm.probe_imports(c, said.append)  # type: ignore[arg-type]
    assert called == [] and "import probe is off" in said[0]


SHOW_JOB = """\
JobId=41 JobName=mlenv-acceptance-demo
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:00:07 TimeLimit=00:10:00 TimeMin=N/A
   Partition=debug AllocNode:Sid=ctl:1234
   NodeList=gpu-a[01-02]
   NumNodes=2 NumCPUs=4 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=*
   Command=/shared/.mlenv/jobs/r1/acceptance.sbatch
   WorkDir=/home/a b
   Comment=JobState=COMPLETED StdOut=/tmp/evil NodeList=x
   StdErr=/shared/results/mlenv-acceptance-demo-41.out
   StdIn=/dev/null
   StdOut=/shared/results/mlenv-acceptance-demo-41.out
   Power=
"""


def test_show_job_fields_with_colons_slashes_and_a_key_value_comment() -> None:
    rec = slurm.parse_show(SHOW_JOB)
    assert rec["JobState"] == "RUNNING" and rec["NodeList"] == "gpu-a[01-02]"
    assert rec["StdOut"] == "/shared/results/mlenv-acceptance-demo-41.out"
    assert rec["Comment"] == "JobState=COMPLETED StdOut=/tmp/evil NodeList=x"
    assert rec["CPUs/Task"] == "1" and rec["ReqB:S:C:T"] == "0:0:*:*"
    assert rec["NumTasks"] == "2" and rec["AllocNode:Sid"] == "ctl:1234"
    assert rec["Partition"] == "debug" and rec["WorkDir"] == "/home/a b"
    # the -o form: a field name with '/' or ':' no longer runs into the value before it
    one = slurm.parse_record("NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=4,node=2")
    assert one == {
        "NumTasks": "2",
        "CPUs/Task": "1",
        "ReqB:S:C:T": "0:0:*:*",
        "TRES": "cpu=4,node=2",
    }


def test_status_json_and_logs_follow_are_refused_in_one_line(tmp_path: Path) -> None:
    c = load(DATA / "cpu-slurm.yaml")
    p = platform_named("slurm")
    s = Session(root=tmp_path, say=lambda _: None, warn=lambda _: None)
    with pytest.raises(InputError, match=r"status -o json: platform slurm"):
        p.status(c, s, output="json")
    (tmp_path / ".mlenv" / "slurm").mkdir(parents=True)
    slurm.state_file(tmp_path, c).write_text(
        '{"cluster": "x", "job_id": "41", "run_id": "r", "report_dir": "/r", "script": "/s", '
        '"submitted": 0}'
    )
    with pytest.raises(InputError, match=r"logs -f: .*tail -f "):
        p.logs(c, s, pod="", follow=True, tail=None)


def test_a_cold_image_gets_its_import_time_and_a_timeout_says_what_it_waited_for(
    tmp_path: Path,
) -> None:
    c = _cfg(tmp_path, "  container:\n    image: 'nvcr.io#nvidia/pytorch:24.08-py3'\n")
    seen: list[tuple[list[str], float]] = []

    def run(words: list[str], timeout: float = 0) -> subprocess.CompletedProcess[str]:
        seen.append((words, timeout))
        raise nodeprobe.ClientTimeout("srun did not answer")

    with pytest.raises(InfraError) as e:
        nodeprobe.slurm_probe(c, "python3", run, slurm.srun_options(c, 0))  # type: ignore[arg-type]
    words, timeout = seen[0]
    assert timeout >= nodeprobe.IMAGE_IMPORT_S + nodeprobe.PROBE_TIMEOUT_S
    minutes = int(next(w for w in words if w.startswith("--time="))[7:])
    assert minutes * 60 >= nodeprobe.IMAGE_IMPORT_S + nodeprobe.PROBE_TIMEOUT_S
    assert "import the image on first use" in str(e.value)
    assert "nothing was submitted" in str(e.value)


def test_no_hint_names_a_document_that_does_not_exist() -> None:
    import re

    root = Path(__file__).resolve().parents[3]
    named = {
        m
        for f in (root / "mlenv").rglob("*")
        if f.suffix in (".py", ".j2", ".json")
        for m in re.findall(r"docs/[A-Za-z0-9_-]+\.md", f.read_text(encoding="utf-8"))
    }
    assert named and not [d for d in sorted(named) if not (root / d).is_file()]


def test_stage_asks_pip_for_every_manylinux_tag_the_node_s_glibc_accepts(tmp_path: Path) -> None:
    from mlenv.platforms import stage

    found = {"python": "3.10.12", "machine": "x86_64", "glibc": "2.35", "missing": {"yaml": "x"}}
    binary = next(
        c
        for c in stage.wheelhouse_commands(tmp_path / "wh", tmp_path / "src", found)
        if "--only-binary=:all:" in c
    )
    tags = [w.split("=", 1)[1] for w in binary if w.startswith("--platform=")]
    # newest first, down to manylinux1; PyYAML's and msgpack's wheels say manylinux_2_17/2_28
    assert tags[0] == "manylinux_2_35_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert {"manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"} <= set(tags)
    assert "manylinux_2_36_x86_64" not in tags  # never newer than the node's glibc
    arm = stage.platform_tags("2.28", "aarch64")
    assert arm[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert stage.platform_tags("", "x86_64")[0] == "manylinux_2_17_x86_64"  # glibc unknown


def test_skip_probe_flag_turns_the_probe_off_on_slurm_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from mlenv.cli import cmd_deploy
    from mlenv.cli.app import app

    got: list[bool] = []

    class Fake:
        def deploy(self, cfg: object, s: object, **kw: object) -> None:
            got.append(cfg.slurm.import_probe)  # type: ignore[attr-defined]

    monkeypatch.setattr(cmd_deploy, "platform", lambda cfg: Fake())
    monkeypatch.setenv("MLENV_ROOT", str(tmp_path))
    cpu = str(DATA / "cpu-slurm.yaml")
    r = CliRunner().invoke(app, ["deploy", cpu, "--skip-probe"])
    assert r.exit_code == 0 and got == [False], r.output
    r = CliRunner().invoke(app, ["deploy", cpu])
    assert r.exit_code == 0 and got == [False, True], r.output
    lab = str(DATA / "site-baremetal-lab.yaml")
    r = CliRunner().invoke(app, ["deploy", lab, "--skip-probe"])
    assert r.exit_code == 2 and "platform hosts has none to skip" in r.output
    r = CliRunner().invoke(app, ["acceptance", "--local", "--skip-probe"])
    assert r.exit_code == 2 and "--skip-probe goes with --cluster" in r.output
