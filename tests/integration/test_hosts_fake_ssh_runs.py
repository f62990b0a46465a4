"""Hosts: whole runs through a fake ``ssh`` on PATH (``tests/cli/_fakessh.py``): the
suite started on every host, a run without ``hosts.shared_dir`` (options shipped,
reports copied back), SIGTERM during a run, a rank that never ends, ``--bundle``.

Integration tier: ``mlenv`` and the suite run as real processes (torch imported in each
suite), signals are delivered to a real process tree and a grace period is waited out.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.cli.app import app

REPO = Path(__file__).resolve().parents[2]
# The fake ssh and the checkout it serves, shared with the CLI tests of the same verbs.
_spec = importlib.util.spec_from_file_location("fakessh", REPO / "tests" / "cli" / "_fakessh.py")
assert _spec and _spec.loader
_fakessh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fakessh)
HOSTS: list[str] = _fakessh.HOSTS

# hosts.python when the fake runs the ranks: torchrun's command line in, the suite out.
# Host 0 runs the real suite as a world of one rank (its reports, rank 0's log, its own
# history line in $MLENV_HISTORY_DIR, relative to the host's login directory); another host writes its rank's log only.
FAKE_TORCHRUN = """#!{python}
import os, sys
args = sys.argv[1:]
assert args[:2] == ["-m", "torch.distributed.run"], args
node = int(next(a for a in args if a.startswith("--node_rank=")).split("=", 1)[1])
suite = args[args.index("mlenv.acceptance") + 1:]
report = suite[suite.index("--report-dir") + 1]
if node:  # its rank's log, a note that it gave up on rank 0, and a file of its own
    os.makedirs(os.path.join(report, "logs"), exist_ok=True)
    with open(os.path.join(report, "logs", "rank%d.fake-host-%d.log" % (2 * node, node)), "w") as f:
        f.write("# rank %d on fake-host-%d\\n" % (2 * node, node))
    for name in (".hung", "stray.txt"):
        with open(os.path.join(report, name), "w") as f:
            f.write("from host %d\\n" % node)
    if os.path.exists(os.path.join(os.path.dirname(sys.argv[0]), "hang-node-%d" % node)):
        import time  # a rank that never ends (stopped, or hung in a collective)
        time.sleep(600)
    sys.exit(0)
env = {{k: v for k, v in os.environ.items() if k not in ("MLENV_NNODES", "MLENV_GPUS_PER_NODE")}}
env["PYTHONPATH"] = {repo!r}  # this checkout's mlenv, not the one the venv installed
os.execve(sys.executable, [sys.executable, "-m", "mlenv.acceptance", *suite], env)
"""


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root: Path = _fakessh.fake_ssh_root(tmp_path, monkeypatch)
    return root


def _mlenv(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def _running(pattern: str) -> list[str]:
    r = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False)
    return r.stdout.split()


@pytest.mark.parametrize("shared", [True, False], ids=["shared_dir", "no_shared_dir"])
def test_sigterm_during_a_run_stops_the_ranks_on_every_host_and_exits_143(
    root: Path, shared: bool
) -> None:
    cfg = root / "clusters" / "site-lab.yaml"
    if shared:
        results = f"{root / 'shared'}/results/"
        cfg.write_text(
            cfg.read_text().replace("hosts:\n", f"hosts:\n  shared_dir: {root / 'shared'}\n", 1)
        )
    else:  # each host's own folder under its login directory (before: exit 2, shared_dir is empty)
        results = "mlenv-results/"
    p = subprocess.Popen(
        [sys.executable, "-m", "mlenv", "acceptance", "--cluster", "site-lab"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        end = time.monotonic() + 120  # a loaded 2-core machine starts python slowly
        record = root / ".mlenv" / "hosts" / "site-lab.json"
        while not shared and not record.is_file() and time.monotonic() < end:
            assert p.poll() is None, p.communicate()[0]
            time.sleep(0.2)
        if not shared:  # this run's folder only: other runs on this machine use mlenv-results/ too
            results = json.loads(record.read_text())["report_dir"]
        while len(_running(f"rank .*{results}")) < 3 and time.monotonic() < end:
            assert p.poll() is None, p.communicate()[0]
            time.sleep(0.2)
        assert len(_running(f"rank .*{results}")) == 3
        p.send_signal(signal.SIGTERM)
        try:
            # pkill over ssh (30 s at most), the sessions' grace (STOP_GRACE_S, 40 s), then
            # the report is finalised: on a loaded 2-core machine this once took over 120 s
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            ps = subprocess.run(
                ["ps", "-eo", "pid,ppid,stat,args"], capture_output=True, text=True
            ).stdout
            p.kill()
            raise AssertionError(
                p.communicate()[0]
                + "\n"
                + "\n".join(x for x in ps.splitlines() if results in x or "mlenv" in x)
            ) from None
        assert p.returncode == 143, out
        assert "SIGTERM: stopping run" in out and "Traceback" not in out, out
        # these ranks never write a report: stopped before rank 0 could, the run is still
        # INTERRUPTED (it was ERROR "ended before rank 0 wrote results.json": a CI run's
        # real-sshd SIGTERM came while the ranks were starting)
        assert "verdict: INTERRUPTED" in out, out
        end = time.monotonic() + 10  # a process that got SIGTERM may take a moment to be gone
        while _running(results) and time.monotonic() < end:
            time.sleep(0.2)
        assert _running(results) == [], out  # neither the ranks nor their ssh sessions
    finally:
        p.kill()
        for pid in _running(results):
            os.kill(int(pid), signal.SIGKILL)
    run = _only_run(root)  # finalised here, once, whatever reached it
    assert json.loads((run / "results.json").read_text())["verdict"] == "INTERRUPTED"
    assert [r["run_id"] for r in _history(root)] == [run.name]
    if not shared:  # rank 0 was told why before the SIGTERM, in its own folder on host 0
        assert (root / "hosts" / HOSTS[0] / results / ".interrupted").read_text() == "SIGTERM\n"
        assert (run / ".interrupted").is_file()  # and the copy brought it back


def _real_ranks(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """site-lab's ranks run through :data:`FAKE_TORCHRUN` (host 0: the real suite)."""
    fake = root / "bin" / "torchrun-python"
    fake.write_text(FAKE_TORCHRUN.format(python=sys.executable, repo=str(REPO)))
    fake.chmod(0o755)
    cfg = root / "clusters" / "site-lab.yaml"
    cfg.write_text(
        cfg.read_text().replace("python: /opt/conda/envs/ml/bin/python", f"python: {fake}")
    )
    monkeypatch.setenv("FAKE_SSH_RANKS", "real")


def _only_run(root: Path) -> Path:
    runs = list((root / "reports" / "site-lab").glob("2*"))
    assert len(runs) == 1, runs
    return runs[0]


def _history(root: Path) -> list[dict]:
    f = root / "reports" / "site-lab" / "history.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.is_file() else []


def test_a_run_without_shared_dir_ships_the_options_and_copies_the_reports_back(
    root: Path, monkeypatch
) -> None:
    """The options file is on this machine only: its copy reaches every host and the suite
    on host 0 runs with it (compute.matmul's shape); the reports come back to
    reports/<cluster>/<run-id>/ over ssh, with each host's rank logs, and this machine's
    history gets the run once. Before: exit 2, "hosts.shared_dir is empty"."""
    _real_ranks(root, monkeypatch)
    (root / "ctl").mkdir()
    opts = root / "ctl" / "my opts; $(id).yaml"  # a name no remote shell may read as code
    opts.write_text("compute.matmul:\n  n: 48\n")
    code, out, err = _mlenv(
        "acceptance", "--cluster", "site-lab", "--checks", "compute.matmul", "--options", str(opts)
    )
    run = _only_run(root)
    rid = run.name
    assert code == 0, (out, err)
    assert "verdict: PASS" in out and str(run) in out, out
    shipped = f"mlenv-results/{rid}/inputs/options.yaml"
    for h in HOSTS:  # every host got the file, under its own login directory
        assert (root / "hosts" / h / shipped).read_text() == opts.read_text()
    ranks = [x for x in (root / "calls").read_text().splitlines() if "torch.distributed.run" in x]
    assert len(ranks) == 3 and all(f"--options {shipped}" in x for x in ranks), ranks
    assert (
        str(root / "ctl") not in (root / "calls").read_text()
    )  # no path of this machine went over
    doc = json.loads((run / "results.json").read_text())
    matmul = next(c for c in doc["checks"] if c["name"] == "compute.matmul")
    assert matmul["details"]["shape"] == [48, 48, 48]  # the option reached the suite
    for f in ("summary.md", "record.json", "junit.xml", "inputs/options.yaml"):
        assert (run / f).is_file(), f
    assert sorted(p.name for p in (run / "logs").iterdir())[1:] == [
        "rank2.fake-host-1.log",
        "rank4.fake-host-2.log",
    ]
    # from the other hosts their ranks' logs and .hung notes only (for mlenv finalize), never a report
    assert (run / ".hung").read_text() == "from host 1\n" and not (run / "stray.txt").exists()
    assert [r["run_id"] for r in _history(root)] == [rid]  # one line, on this machine
    assert json.loads((run / "record.json").read_text())["run_id"] == rid
    # host 0's rank 0 keeps its history (what its trend plots read) in mlenv's own folder,
    # not in a reports/ of the login directory, as it did before
    head = root / "hosts" / HOSTS[0]
    assert not (head / "reports").exists(), sorted(p.name for p in head.iterdir())
    on_head = (
        (head / "mlenv-results" / "history" / "site-lab" / "history.jsonl").read_text().splitlines()
    )
    assert [json.loads(x)["run_id"] for x in on_head] == [rid]
    code, log, _ = _mlenv("logs", "site-lab")  # the copy, once the run ended
    assert code == 0 and log.startswith("# rank 0 on "), log


def test_a_host_whose_rank_never_ends_after_rank_0_reported_is_stopped_there(
    root: Path, monkeypatch
) -> None:
    """The run used to wait for a host whose rank never ended (stopped, or hung in a
    collective) after rank 0's host had written the verdict and ended: until the run's
    hour was out, and then only the local ssh ended, the rank kept running there. Now that
    host gets the grace (MLENV_AFTER_VERDICT_GRACE_S), then the run is stopped on it."""
    _real_ranks(root, monkeypatch)
    (root / "bin" / "hang-node-2").write_text("")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlenv",
            "acceptance",
            "--cluster",
            "site-lab",
            "--checks",
            "environment",
        ],
        env={**os.environ, "PYTHONPATH": str(REPO), "MLENV_AFTER_VERDICT_GRACE_S": "2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = p.communicate(timeout=150)  # a loaded 2-core machine starts python slowly
    finally:
        if p.poll() is None:
            p.kill()
        left = _running(str(root / "bin" / "torchrun-python"))
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    assert p.returncode == 0 and "verdict: PASS" in out, out
    assert (
        f"host {HOSTS[0]} (rank 0) ended 2 s ago and the run goes on on {HOSTS[2]} "
        "(a rank stopped or hung there): stopping it there"
    ) in out, out
    assert left == [], out  # the hung rank is gone, not only its ssh session
    run = _only_run(root)
    assert json.loads((run / "results.json").read_text())["verdict"] == "PASS"


def test_bundle_on_a_platform_bundles_the_run_it_recorded(root: Path, monkeypatch) -> None:
    """``mlenv acceptance --cluster NAME --bundle`` writes the run's sign-off bundle, as
    ``--local --bundle`` does. Before: --bundle was dropped on the way to the platform,
    silently (no bundle, no line)."""
    _real_ranks(root, monkeypatch)
    code, out, err = _mlenv(
        "acceptance", "--cluster", "site-lab", "--checks", "compute.matmul", "--bundle"
    )
    assert code == 0, (out, err)
    run = _only_run(root)
    line = [x for x in out.splitlines() if x.startswith("bundle: ")]
    assert len(line) == 1, out
    made = Path(line[0].split(" ", 1)[1])
    assert made.is_file() and run.name in made.name, (made, run)
