"""On the real Slurm harness: the scheduled re-check (``acceptance.schedule``).

``mlenv render`` writes ``recheck.sbatch``; ``bash recheck.sbatch --install`` (what the docs
tell a login node to run) queues the first run with ``sbatch --begin`` at the schedule's
next minute; Slurm starts it then; the run queues the next one (a day later) before its
suite, writes its report under ``shared_dir/results/<run-id>/``, and ``fetch_runs`` brings
it into the control host's history once. The schedule names one minute of the day, the
first one at least 20 s away, so the test waits for one run and the next is a day off.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import netns
from harness import slurm as slurm_harness

from mlenv.acceptance.records import history
from mlenv.config import load
from mlenv.platforms.slurmfetch import fetch_runs

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]

CHECKOUT = str(Path(__file__).resolve().parents[2])
CLUSTER = "slurm-recheck"
JOB = f"mlenv-recheck-{CLUSTER}"
BASELINE = str(Path(__file__).parent / "harness" / "baseline_harness.yaml")
SMALL = str(Path(__file__).parent / "harness" / "acceptance_small.json")


def _first_minute(lead_s: float = 20.0) -> dt.datetime:
    """The first whole minute (local time, as the script reads it) at least ``lead_s`` away."""
    t = dt.datetime.now() + dt.timedelta(seconds=lead_s)
    return t.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)


@pytest.fixture(scope="module")
def harness(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, slurm_harness.SlurmCluster]]:
    why = slurm_harness.unavailable_reason() or netns.unavailable_reason()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurmrecheck")
    (root / "clusters").mkdir()
    (root / "shared").mkdir()
    with slurm_harness.on_netns_hosts(str(root)) as sl:
        yield root, sl


def _squeue(sl: slurm_harness.SlurmCluster) -> list[tuple[str, str]]:
    """(job id, state) of the re-check's jobs."""
    r = sl.run("squeue", "-h", f"--name={JOB}", "-o", "%i %T")
    return [(p[0], p[1]) for p in (line.split() for line in r.stdout.splitlines()) if len(p) == 2]


def _eligible(sl: slurm_harness.SlurmCluster, job: str) -> str:
    rec = sl.run("scontrol", "-o", "show", "job", job).stdout
    m = re.search(r"EligibleTime=(\S+)", rec)
    return m.group(1) if m else rec


def test_installed_schedule_runs_at_its_minute_and_fetch_imports_the_run_once(
    harness: tuple[Path, slurm_harness.SlurmCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, sl = harness
    t0 = time.monotonic()
    first = _first_minute()
    cfg = root / "clusters" / f"{CLUSTER}.yaml"
    cfg.write_text(
        f"cluster:\n  name: {CLUSTER}\n  namespace: unused\nplatform: slurm\n"
        'slurm:\n  partition: debug\n  time_limit: "00:10:00"\n  exclusive: false\n'
        f"  gpus_flag: none\n  shared_dir: {root / 'shared'}\n  python: {sys.executable}\n"
        "network:\n  tcp:\n    interface_exclude: lo\n"
        "gpus:\n  per_node: 2\n  type: cpu\n  default_nodes: 2\n"
        f"acceptance:\n  schedule: '{first.minute} {first.hour} * * *'\n  profile: quick\n"
    )
    # this checkout on the nodes (the job exports the installer's environment), small sizes
    env = sl.env(
        {
            "MLENV_ROOT": str(root),
            "PYTHONPATH": CHECKOUT,
            "OMP_NUM_THREADS": "1",
            "MLENV_BASELINE": BASELINE,
            "MLENV_OPTIONS": SMALL,
        }
    )
    env.pop("MLENV_HISTORY_DIR", None)
    r = subprocess.run(
        [sys.executable, "-m", "mlenv", "render", CLUSTER],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert f"`bash slurm/{CLUSTER}/recheck.sbatch --install`" in r.stdout
    sl.wait_idle(90)
    r = subprocess.run(
        ["bash", f"slurm/{CLUSTER}/recheck.sbatch", "--install"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    begin = first.strftime("%Y-%m-%dT%H:%M:00")
    assert f"next re-check queued to begin at {begin}" in r.stdout
    jobs = _squeue(sl)
    assert [s for _, s in jobs] == ["PENDING"], jobs
    assert _eligible(sl, jobs[0][0]) == begin  # Slurm holds it until the schedule's minute
    installed = time.monotonic() - t0

    # the run: Slurm starts it at that minute; it queues tomorrow's, then writes its report
    results = root / "shared" / "results"
    end = time.monotonic() + (first - dt.datetime.now()).total_seconds() + 300
    done: list[Path] = []
    while time.monotonic() < end and not done:
        done = [p.parent for p in results.glob("*/results.json")] if results.is_dir() else []
        time.sleep(1)
    assert done, f"no run finished; jobs {_squeue(sl)}; outputs: " + "".join(
        p.read_text()[-1500:] for p in results.glob("*.out")
    )
    ran = time.monotonic() - t0
    doc = json.loads((done[0] / "results.json").read_text())
    assert doc["verdict"] in ("PASS", "WARN") and doc["profile"] == "quick", doc.get("reasons")
    assert doc["job"]["id"] == jobs[0][0] and doc["run_id"] == done[0].name
    nxt = [(j, s) for j, s in _squeue(sl) if j != jobs[0][0]]
    assert [s for _, s in nxt] == ["PENDING"], nxt
    assert _eligible(sl, nxt[0][0]) == (first + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:00")
    wait = time.monotonic() + 60  # the run's job ends a moment after rank 0's report
    while time.monotonic() < wait and any(j == jobs[0][0] for j, _ in _squeue(sl)):
        time.sleep(0.5)

    # the control host's history: the run once, however often fetch is asked
    monkeypatch.setenv("SLURM_CONF", sl.conf)
    monkeypatch.delenv("MLENV_HISTORY_DIR", raising=False)
    said: list[str] = []
    c = load(cfg)
    assert fetch_runs(c, root / "reports", said.append) == [doc["run_id"]]
    assert fetch_runs(c, root / "reports", said.append) == []
    recs = history.read(history.history_path(root / "reports", CLUSTER))[0]
    assert [(r["run_id"], r["verdict"], r["job"]["id"]) for r in recs] == [
        (doc["run_id"], doc["verdict"], jobs[0][0])
    ]
    assert (root / "reports" / CLUSTER / doc["run_id"] / "job.out").is_file()

    r = subprocess.run(
        ["bash", f"slurm/{CLUSTER}/recheck.sbatch", "--remove"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0 and _squeue(sl) == [], r.stderr
    print(
        f"\nre-check installed in {installed:.1f} s; the run's report {ran:.1f} s after the start "
        f"(it began at {begin}); test {time.monotonic() - t0:.1f} s"
    )
