"""``acceptance.metrics.push``: each platform's scheduled re-check pushes the run's series
when it ends. Kubernetes: the CronJob's exec hands the suite ``--push-metrics URL`` (rank 0
pushes from pod-0); Slurm: ``recheck.sbatch`` hands the suite the same flag; hosts: the cron
line runs ``mlenv metrics latest --cluster NAME --push URL`` after the run, whatever its
verdict. The scripts and the cron line are run for real against stubs."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from render_fixtures import one, tcp_cluster
from test_recheck_render import _fake_slurm, _hosts_cfg, _with_schedule

from mlenv.config import load
from mlenv.config.model import Recheck
from mlenv.platforms.kube import pod_argv
from mlenv.render.plan import render_cluster
from mlenv.render.platforms import Control, render_hosts, render_slurm

URL = "http://pushgateway.monitoring:9091"


def _with_push(cfg: Path) -> Path:
    cfg.write_text(cfg.read_text() + f"  metrics:\n    push: '{URL}'\n")
    return cfg


def test_the_cronjob_hands_the_suite_the_gateway_after_the_launchers_own_flags() -> None:
    c = tcp_cluster(recheck=Recheck("0 3 * * 0", "quick", metrics_push=URL), platform="openshift")
    cmd = one(render_cluster(c, "tcp"), "CronJob")["spec"]["jobTemplate"]["spec"]["template"][
        "spec"
    ]["containers"][0]["command"]
    dash = cmd.index("--")
    assert cmd[dash + 1 :] == [
        *pod_argv("launch", []),
        "--profile",
        "quick",
        "--",
        "--push-metrics",
        URL,
    ]
    plain = one(render_cluster(replace(c, recheck=Recheck("0 3 * * 0")), "tcp"), "CronJob")
    assert "--push-metrics" not in str(plain)  # unset: no push


def test_recheck_sbatch_hands_the_suite_the_gateway(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    cfg = _with_push(_with_schedule(tmp_path, "0 3 * * 0", shared=shared))
    f = tmp_path / "recheck.sbatch"
    f.write_text(render_slurm(load(cfg))["recheck.sbatch"])
    env, calls = _fake_slurm(tmp_path)
    env.update(
        SLURM_JOB_ID="41",
        SLURM_JOB_NUM_NODES="2",
        SLURM_JOB_NODELIST="node-[1-2]",
        SLURM_MEM_PER_CPU="100",
        MLENV_RUN_ID="20261127-030000-000029",
    )
    r = subprocess.run(
        ["bash", str(f)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert r.returncode == 0, r.stderr
    if shutil.which("shellcheck"):
        sc = subprocess.run(
            ["shellcheck", "--shell=bash", str(f)], capture_output=True, text=True, check=False
        )
        assert sc.returncode == 0, sc.stdout
    srun = next(line for line in calls.read_text().splitlines() if line.startswith("srun "))
    assert srun.endswith(f"--push-metrics {URL}"), srun
    # without the key the suite gets no such flag; the acceptance job never does
    plain = render_slurm(load(_with_schedule(tmp_path, "0 3 * * 0")))
    assert "--push-metrics" not in plain["recheck.sbatch"]
    assert "--push-metrics" not in render_slurm(load(cfg))["acceptance.sbatch"]


def test_the_hosts_cron_line_pushes_after_any_verdict(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    stub = tmp_path / "bin" / "mlenv"
    stub.parent.mkdir()
    seen = tmp_path / "seen"
    # the suite's FAIL (exit 1) must not stop the push
    stub.write_text(
        f'#!/bin/sh\necho "$*" >> {shlex.quote(str(seen))}\n[ "$1" = acceptance ] && exit 1\nexit 0\n'
    )
    stub.chmod(0o755)
    cfg = _with_push(_hosts_cfg(tmp_path, "0 3 * * 0"))
    text = render_hosts(load(cfg), control=Control(str(root), (str(stub),)))["acceptance.cron"]
    command = text.splitlines()[-1].split(" ", 5)[5]
    assert "%" not in command
    r = subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, check=False
    )
    assert r.returncode == 0, r.stderr
    assert seen.read_text().splitlines() == [
        "acceptance --cluster lab --profile quick",
        f"metrics latest --cluster lab --push {URL}",
    ]
    assert "mlenv metrics latest --cluster lab --push URL" in text
