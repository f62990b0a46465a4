"""Re-checks on a schedule off Kubernetes: the Slurm ``recheck.sbatch`` (a batch job that
queues its own next run with ``sbatch --begin``) and the hosts ``acceptance.cron`` line.

The script is run for real: ``--next EPOCH`` against a minute-by-minute reading of the
schedule in Python, ``--install`` and the in-job queueing against fake ``sbatch``/``scancel``
on PATH that record what they were given; the cron line's command under ``/bin/sh``.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.cli.app import app
from mlenv.config import load
from mlenv.errors import InputError
from mlenv.render import cron
from mlenv.render.platforms import Control, render_hosts, render_slurm

REPO = Path(__file__).resolve().parents[3]
CPU = REPO / "tests" / "data" / "platforms" / "cpu-slurm.yaml"


def _with_schedule(
    tmp_path: Path, schedule: str, profile: str = "full", shared: Path | None = None
) -> Path:
    text = CPU.read_text()
    if shared is not None:
        text = text.replace(_shared_dir(text), str(shared))
    f = tmp_path / "cpu-slurm.yaml"
    f.write_text(text + f"acceptance:\n  schedule: '{schedule}'\n  profile: {profile}\n")
    return f


def _shared_dir(text: str) -> str:
    return next(
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.strip().startswith("shared_dir:")
    )


def _directives(text: str) -> list[str]:
    out = []
    for line in text.splitlines()[1:]:
        if line.startswith("#SBATCH"):
            out.append(line[len("#SBATCH ") :])
        elif line.strip() and not line.startswith("#"):
            break
    return out


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (
            "*/15 3 * * 1-5",
            cron.Expanded(
                (0, 15, 30, 45),
                (3,),
                tuple(range(1, 32)),
                tuple(range(1, 13)),
                (1, 2, 3, 4, 5),
                day_or=False,
            ),
        ),
        (
            "5/20 0-6/3 1,15 2 7",
            cron.Expanded((5, 25, 45), (0, 3, 6), (1, 15), (2,), (0,), day_or=True),
        ),
        (
            "@weekly",
            cron.Expanded(
                (0,),
                tuple(range(24))[:1],
                tuple(range(1, 32)),
                tuple(range(1, 13)),
                (0,),
                day_or=False,
            ),
        ),
    ],
)
def test_expand(schedule: str, expected: cron.Expanded) -> None:
    assert cron.expand(schedule) == expected


def test_recheck_script_is_the_acceptance_job_plus_the_schedule(tmp_path: Path) -> None:
    plain = render_slurm(load(CPU))
    assert "recheck.sbatch" not in plain  # no schedule, no re-check
    files = render_slurm(load(_with_schedule(tmp_path, "0 3 * * 0")))
    assert sorted(files) == ["acceptance.sbatch", "recheck.sbatch", "train.sbatch"]
    # the acceptance job itself is unchanged (but for the config's path in its header)
    assert (
        files["acceptance.sbatch"].splitlines()[2:] == plain["acceptance.sbatch"].splitlines()[2:]
    )
    text = files["recheck.sbatch"]
    # the same request as the acceptance job (the same template, the same quoting), its own name
    want = [
        "--job-name=mlenv-recheck-cpu-slurm" if d.startswith("--job-name=") else d
        for d in _directives(plain["acceptance.sbatch"])
    ]
    assert _directives(text) == want
    assert "export MLENV_PROFILE=full" in text.splitlines()
    shared = _shared_dir(CPU.read_text())
    assert f"RECHECK_SCRIPT={shared}/.mlenv/recheck/cpu-slurm/recheck.sbatch" in text.splitlines()
    f = tmp_path / "recheck.sbatch"
    f.write_text(text)
    assert subprocess.run(["bash", "-n", str(f)], check=False).returncode == 0
    if shutil.which("shellcheck"):
        r = subprocess.run(
            ["shellcheck", "--shell=bash", str(f)], capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, r.stdout


def _oracle(schedule: str, after: dt.datetime) -> dt.datetime:
    """The next minute after ``after`` that the schedule names: each day from ``after``'s, each
    minute of a matching day (python's calendar, not the script's ``date`` arithmetic)."""
    e = cron.expand(schedule)
    start = after.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    for d in range(366 * 5):
        day = (start + dt.timedelta(days=d)).replace(hour=0, minute=0)
        dom, dow = day.day in e.days, (day.isoweekday() % 7) in e.weekdays
        if day.month not in e.months or not ((dom or dow) if e.day_or else (dom and dow)):
            continue
        for minute in range(24 * 60):
            t = day + dt.timedelta(minutes=minute)
            if t >= start and t.hour in e.hours and t.minute in e.minutes:
                return t
    raise AssertionError("no match in five years")


NOW = dt.datetime(2026, 11, 27, 15, 31, 40, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize(
    ("schedule", "after"),
    [
        ("* * * * *", NOW),
        ("*/15 3 * * 1-5", NOW),  # Friday afternoon: Monday 03:00
        ("31 15 * * *", NOW),  # this very minute has begun: tomorrow's
        ("0 0 1,15 * 3", NOW),  # day of month OR Wednesday
        ("0 12 29 2 *", NOW),  # the next 29 February (2028)
        ("59 23 31 12 *", dt.datetime(2026, 12, 31, 23, 59, 0, tzinfo=dt.timezone.utc)),
        ("@monthly", dt.datetime(2027, 1, 31, 23, 59, 59, tzinfo=dt.timezone.utc)),
    ],
)
def test_next_begin_in_bash_agrees_with_cron(
    tmp_path: Path, schedule: str, after: dt.datetime
) -> None:
    f = tmp_path / "recheck.sbatch"
    f.write_text(render_slurm(load(_with_schedule(tmp_path, schedule)))["recheck.sbatch"])
    r = subprocess.run(
        ["bash", str(f), "--next", str(int(after.timestamp()))],
        capture_output=True,
        text=True,
        env={**os.environ, "TZ": "UTC"},
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == _oracle(schedule, after).strftime("%Y-%m-%dT%H:%M:00")


def _fake_slurm(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """Fake sbatch/scancel/scontrol/srun on PATH, each appending its argv (and sbatch its
    environment's SLURM_*/MLENV_* names) to ``calls``."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "calls"
    for name in ("sbatch", "scancel", "scontrol", "srun"):
        body = f'echo {name} "$@" >> {shlex.quote(str(calls))}\n'
        if name == "sbatch":
            body += (
                f"env | grep -E '^(SLURM|SBATCH|MLENV)_' | cut -d= -f1 | sort | tr '\\n' ' ' | "
                f"sed 's/^/env: /' >> {shlex.quote(str(calls))}; echo >> {shlex.quote(str(calls))}\necho 77\n"
            )
        if name == "scontrol":
            body += "echo node-1\n"
        (bin_ / name).write_text("#!/bin/sh\n" + body)
        (bin_ / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "TZ": "UTC"}, calls


def test_install_copies_the_script_and_queues_the_next_run(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    cfg = load(_with_schedule(tmp_path, "*/5 * * * *", shared=shared))
    f = tmp_path / "recheck.sbatch"
    f.write_text(render_slurm(cfg)["recheck.sbatch"])
    env, calls = _fake_slurm(tmp_path)
    env.pop("SLURM_JOB_ID", None)
    r = subprocess.run(
        ["bash", str(f), "--install"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    installed = shared / ".mlenv" / "recheck" / "cpu-slurm" / "recheck.sbatch"
    assert installed.read_text() == f.read_text()
    assert (
        shared / "results"
    ).is_dir()  # the job's --output folder: without it Slurm cannot start the job
    lines = calls.read_text().splitlines()
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    assert lines[0] == f"scancel --user={user} --name=mlenv-recheck-cpu-slurm --state=PENDING"
    begin = lines[1].split()[2]
    assert lines[1] == f"sbatch --parsable {begin} --dependency=singleton -- {installed}"
    assert begin.startswith("--begin=") and begin.endswith(":00") and int(begin[-5:-3]) % 5 == 0
    assert f"next re-check queued to begin at {begin[len('--begin=') :]}" in r.stdout
    r = subprocess.run(
        ["bash", str(f)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert r.returncode == 2 and "usage: bash recheck.sbatch --install" in r.stderr
    r = subprocess.run(
        ["bash", str(f), "--nope"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert r.returncode == 2 and "not '--nope'" in r.stderr


def test_a_run_queues_the_next_without_its_own_job_variables(tmp_path: Path) -> None:
    """In the job: the next run is queued before this one's suite, and sbatch sees neither
    this job's SLURM_* variables nor its run id (the next run would reuse both)."""
    shared = tmp_path / "shared"
    f = tmp_path / "recheck.sbatch"
    f.write_text(
        render_slurm(load(_with_schedule(tmp_path, "0 3 * * 0", shared=shared)))["recheck.sbatch"]
    )
    env, calls = _fake_slurm(tmp_path)
    env.update(
        SLURM_JOB_ID="41",
        SLURM_JOB_NUM_NODES="2",
        SLURM_JOB_NODELIST="node-[1-2]",
        SLURM_MEM_PER_CPU="100",
        MLENV_RUN_ID="20261127-030000-000029",
        MLENV_PROFILE="quick",
    )
    r = subprocess.run(
        ["bash", str(f)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert r.returncode == 0, r.stderr
    lines = calls.read_text().splitlines()
    sbatch = next(i for i, line in enumerate(lines) if line.startswith("sbatch "))
    passed = [v for v in lines[sbatch + 1].split()[1:] if v != "MLENV_CACHE_DIR"]  # the suite's
    assert passed == ["MLENV_PROFILE"]  # SLURM_CONF would stay; none here
    srun = next(line for line in lines if line.startswith("srun "))
    assert lines.index(srun) > sbatch  # queued before this run's suite started
    assert "--profile full" in srun  # the configured profile, over the caller's
    assert (shared / "results" / "20261127-030000-000029").is_dir()  # this run keeps its id


def _hosts_cfg(tmp_path: Path, schedule: str) -> Path:
    f = tmp_path / "h.yaml"
    f.write_text(
        "cluster:\n  name: lab\n  namespace: unused\nplatform: hosts\nnodes:\n  gpu_nodes: [a, b]\n"
        "hosts:\n  shared_dir: /shared/h\ngpus:\n  per_node: 2\n  type: cpu\n  default_nodes: 2\n"
        f"acceptance:\n  schedule: '{schedule}'\n"
    )
    return f


def test_hosts_cron_line_runs_mlenv_from_the_checkout_under_sh(tmp_path: Path) -> None:
    root = tmp_path / "it's a repo"
    root.mkdir()
    stub = tmp_path / "bin dir" / "mlenv"
    stub.parent.mkdir()
    seen = tmp_path / "seen"
    stub.write_text(
        f"#!/bin/sh\n{{ pwd; printf '%s\\n' \"$@\"; }} > {shlex.quote(str(seen))}\necho ran\n"
    )
    stub.chmod(0o755)
    files = render_hosts(
        load(_hosts_cfg(tmp_path, "@daily")), control=Control(str(root), (str(stub),))
    )
    line = files["acceptance.cron"].splitlines()[-1]
    assert line.startswith("0 0 * * * ")  # the shorthand spelled out
    command = line.split(" ", 5)[5]
    assert "%" not in command
    r = subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, check=False
    )
    assert r.returncode == 0, r.stderr
    assert seen.read_text().splitlines() == [
        str(root),
        "acceptance",
        "--cluster",
        "lab",
        "--profile",
        "quick",
    ]
    assert (root / ".mlenv" / "recheck" / "lab.log").read_text() == "ran\n"
    if shutil.which("shellcheck"):
        sh = tmp_path / "line.sh"
        sh.write_text("#!/bin/sh\n" + command + "\n")
        r = subprocess.run(["shellcheck", str(sh)], capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stdout


def test_hosts_cron_refuses_what_cron_would_mangle(tmp_path: Path) -> None:
    cfg = load(_hosts_cfg(tmp_path, "0 3 * * 0"))
    assert "acceptance.cron" not in render_hosts(cfg)  # no control host named: no line
    with pytest.raises(InputError, match="cannot carry '%'"):
        render_hosts(cfg, control=Control("/srv/50%", ("/usr/bin/python3", "-m", "mlenv")))


def test_render_says_how_to_install(tmp_path: Path) -> None:
    (tmp_path / "clusters").mkdir()
    shutil.copy(_with_schedule(tmp_path, "0 3 * * 0"), tmp_path / "clusters" / "cpu-slurm.yaml")
    shutil.copy(_hosts_cfg(tmp_path, "@weekly"), tmp_path / "clusters" / "lab.yaml")
    r = CliRunner().invoke(app, ["render", "--all"], env={"MLENV_ROOT": str(tmp_path)})
    assert r.exit_code == 0, r.output
    assert (
        "re-check on schedule '0 3 * * 0': install it from a login node with "
        "`bash slurm/cpu-slurm/recheck.sbatch --install` (remove: --remove)"
    ) in r.output.splitlines()
    assert (
        "re-check on schedule '@weekly': add it to this host's crontab with "
        "`(crontab -l 2>/dev/null; grep -v '^#' hosts/lab/acceptance.cron) | crontab -`"
    ) in r.output.splitlines()
    assert (tmp_path / "slurm" / "cpu-slurm" / "recheck.sbatch").is_file()
    assert (tmp_path / "hosts" / "lab" / "acceptance.cron").is_file()
