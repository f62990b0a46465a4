"""Hosts: ``status`` with hosts ssh cannot reach, ``shell`` when ssh itself
fails, and ``logs`` (the head host's run log), against a fake ``ssh`` on PATH.

The fake behaves as OpenSSH does: a host listed in ``$FAKE_SSH_DOWN`` is refused (exit
255, ssh's message on stderr, or in the ``-E`` file when one is given); any other host
answers the probe, or runs the remote command line with ``sh -c`` (the words joined by
spaces, as sshd hands them to the login shell) in its own login directory,
``$FAKE_SSH_HOMES/<host>``: each host is a separate machine, none sees this one's files
but through the command. A torchrun is a "rank" that runs until stopped, or, with
``$FAKE_SSH_RANKS=real``, the command itself (``hosts.python`` then names a stand-in for
torchrun, :data:`FAKE_TORCHRUN`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.cli.app import app
from mlenv.config import load
from mlenv.errors import InputError
from mlenv.platforms import hosts

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "tests" / "data" / "platforms" / "site-baremetal-lab.yaml"
HOSTS = ["Lab-WS-01", "Lab-WS-02", "lab_ws_03.lan"]

FAKE_SSH = r"""#!/bin/sh
echo "$*" >> "$FAKE_SSH_CALLS"
log=""; host=""
while [ $# -gt 0 ]; do
  case "$1" in
    -E) log="$2"; shift 2 ;;
    -p|-l|-i|-F) shift 2 ;;
    --) host="$2"; shift 2; break ;;
    *) shift ;;
  esac
done
if [ -n "$FAKE_SSH_HOMES" ]; then mkdir -p "$FAKE_SSH_HOMES/$host" && cd "$FAKE_SSH_HOMES/$host" || exit 1; fi
for d in $FAKE_SSH_DOWN; do
  if [ "$d" = "$host" ]; then
    msg="ssh: connect to host $host port 2222: Connection refused"
    if [ -n "$log" ]; then echo "$msg" >> "$log"; else echo "$msg" >&2; fi
    exit 255
  fi
done
case "$*" in
  *torch.distributed.run*)
    if [ "$FAKE_SSH_RANKS" = real ]; then exec sh -c "$*"; fi
    # a "rank" that outlives this ssh unless the host is told to stop it
    sh -c 'while :; do sleep 1; done' "rank $*" & wait ;;
  *"import json, platform"*) echo '{"python": "3.11.7", "torch": "2.13.0", "gpus": 2, "deepspeed": "0.19.8"}' ;;
  *tar\ -c*) sh -c "$*"; rc=$?; exit "${FAKE_SSH_TAR_EXIT:-$rc}" ;;  # GNU tar's 1: a file changed while read
  *) exec sh -c "$*" ;;
esac
"""

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
    (tmp_path / "clusters").mkdir()
    shutil.copy(SITE, tmp_path / "clusters" / "site-lab.yaml")
    ssh = tmp_path / "bin" / "ssh"
    ssh.parent.mkdir()
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{ssh.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("FAKE_SSH_DOWN", "")
    monkeypatch.setenv("FAKE_SSH_HOMES", str(tmp_path / "hosts"))
    monkeypatch.delenv("FAKE_SSH_RANKS", raising=False)
    monkeypatch.delenv("FAKE_SSH_TAR_EXIT", raising=False)
    monkeypatch.delenv("MLENV_HISTORY_DIR", raising=False)  # the control host's history: reports/
    monkeypatch.delenv("MLENV_OPTIONS", raising=False)
    monkeypatch.delenv("MLENV_BASELINE", raising=False)
    monkeypatch.setenv("MLENV_ROOT", str(tmp_path))
    return tmp_path


def _mlenv(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_status_with_every_host_unreachable_is_exit_3_in_one_line(root: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SSH_DOWN", " ".join(HOSTS))
    code, out, err = _mlenv("status", "site-lab")
    assert code == 3, (out, err)
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert "no host is reachable over ssh: Lab-WS-01, Lab-WS-02, lab_ws_03.lan" in err
    assert "Connection refused" in err and "Traceback" not in err


def test_status_with_some_hosts_unreachable_names_them_and_reports_the_rest(
    root: Path, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_SSH_DOWN", "Lab-WS-02")
    code, out, err = _mlenv("status", "site-lab")
    assert code == 0, (out, err)
    lines = out.strip().splitlines()
    assert (
        len(lines) == 3 and "up, python 3.11.7" in lines[0] and "up, python 3.11.7" in lines[2]
    ), out
    assert lines[1].startswith("host Lab-WS-02: ssh unreachable:"), out
    assert "unreachable over ssh: Lab-WS-02 (1 of 3 hosts)" in err


def test_shell_when_ssh_cannot_connect_is_exit_3_naming_the_host(
    root: Path, monkeypatch, capfd
) -> None:
    monkeypatch.setenv("FAKE_SSH_DOWN", "Lab-WS-02")
    code, out, err = _mlenv("shell", "site-lab", "--pod", "1", "--", "true")
    assert code == 3, (out, err)
    assert err.strip() == (
        "error: shell: host Lab-WS-02: ssh: connect to host Lab-WS-02 port 2222: Connection refused"
    ), err
    # ssh's own text went to its log (-E), not through to the terminal
    assert "Connection refused" not in capfd.readouterr().err
    assert " -E " in (root / "calls").read_text()


def test_shell_keeps_the_remote_commands_own_exit_code_even_255(root: Path) -> None:
    assert _mlenv("shell", "site-lab", "--", "exit", "7")[0] == 7
    assert _mlenv("shell", "site-lab", "--", "exit", "255")[0] == 255


def test_logs_prints_the_head_hosts_run_log_of_the_last_run(root: Path) -> None:
    cfg = load(root / "clusters" / "site-lab.yaml")
    report = root / "shared" / "results" / "20261127-120000-abcdef"
    (report / "logs").mkdir(parents=True)
    (report / "logs" / "rank0.lab-ws-01.log").write_text("# rank 0 on lab-ws-01\nline 1\nline 2\n")
    (report / "logs" / "rank1.lab-ws-01.log").write_text("rank 1\n")
    hosts.record_run(root, cfg, "20261127-120000-abcdef", report, HOSTS[:2], print)
    code, out, err = _mlenv("logs", "site-lab")
    assert code == 0, (out, err)
    assert out == "# rank 0 on lab-ws-01\nline 1\nline 2\n"
    assert _mlenv("logs", "site-lab", "--tail", "1")[1] == "line 2\n"
    # once the run ended and the shared folder is gone, the copy under reports/ serves
    copy = root / "reports" / "site-lab" / "20261127-120000-abcdef"
    shutil.copytree(report, copy)
    shutil.rmtree(report)
    assert _mlenv("logs", "site-lab")[1].startswith("# rank 0 on lab-ws-01\n")


def test_logs_without_a_run_or_before_rank_0_wrote_says_so_in_one_line(root: Path) -> None:
    code, out, err = _mlenv("logs", "site-lab")
    assert (
        code == 2
        and "no hosts run recorded for site-lab" in err
        and len(err.strip().splitlines()) == 1
    )
    cfg = load(root / "clusters" / "site-lab.yaml")
    hosts.record_run(root, cfg, "20261127-120000-abcdef", root / "nowhere", HOSTS, print)
    code, out, err = _mlenv("logs", "site-lab")
    assert code == 3 and "no rank 0 log" in err and "host Lab-WS-01" in err, err
    assert json.loads(hosts.run_record(root, cfg).read_text())["run_id"] == "20261127-120000-abcdef"


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


# --- a run without hosts.shared_dir ---------------------------------------


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


def test_options_and_baseline_files_travel_and_a_model_name_stays(tmp_path: Path) -> None:
    opts, base = tmp_path / "o.JSON", tmp_path / "b.txt"
    opts.write_text("{}")
    base.write_text("model: x\n")
    args, ship = hosts.run_inputs(
        ["--checks", "environment", "--options", str(opts), "--baseline", str(base)],
        "mlenv-results/R",
        environ={},
    )
    assert args == [
        "--checks",
        "environment",
        "--options",
        "mlenv-results/R/inputs/options.json",
        "--baseline",
        "mlenv-results/R/inputs/baseline.yaml",
    ]
    assert ship == [(opts, "options.json"), (base, "baseline.yaml")]
    # as the Slurm batch script does, MLENV_OPTIONS / MLENV_BASELINE stand in for the flags
    args, ship = hosts.run_inputs(
        [], "/s/results/R", environ={"MLENV_OPTIONS": str(opts), "MLENV_BASELINE": "H100"}
    )
    assert args == ["--options", "/s/results/R/inputs/options.json", "--baseline", "H100"]
    assert ship == [(opts, "options.json")]
    args, _ = hosts.run_inputs(
        ["--options", str(opts)], "R", environ={"MLENV_OPTIONS": "/elsewhere"}
    )
    assert args == ["--options", "R/inputs/options.json"]  # the flag wins
    with pytest.raises(InputError, match="--options /no/such.yaml: no such file on this machine"):
        hosts.run_inputs(["--options", "/no/such.yaml"], "R", environ={})


def test_an_options_file_missing_here_is_exit_2_before_anything_is_asked(root: Path) -> None:
    code, out, err = _mlenv(
        "acceptance", "--cluster", "site-lab", "--options", str(root / "nope.yaml")
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert f"--options {root / 'nope.yaml'}: no such file on this machine" in err
    assert not (root / "calls").exists()  # no host was asked


def test_logs_reads_the_heads_log_over_ssh_while_a_run_without_shared_dir_is_on(
    root: Path, monkeypatch
) -> None:
    cfg = load(root / "clusters" / "site-lab.yaml")
    rid = "20261127-120000-abcdef"
    hosts.record_run(root, cfg, rid, Path(f"mlenv-results/{rid}"), HOSTS, print, remote=True)
    code, out, err = _mlenv("logs", "site-lab")
    assert code == 3 and len(err.strip().splitlines()) == 1, err
    assert f"no rank 0 log in mlenv-results/{rid}/logs on host Lab-WS-01 yet" in err
    logs = root / "hosts" / "Lab-WS-01" / "mlenv-results" / rid / "logs"
    logs.mkdir(parents=True)
    (logs / "rank0.lab-ws-01.log").write_text("# rank 0 on lab-ws-01\nline 1\nline 2\n")
    code, out, err = _mlenv("logs", "site-lab", "--tail", "2")
    assert (code, out) == (0, "line 1\nline 2\n"), err
    monkeypatch.setenv("FAKE_SSH_DOWN", "Lab-WS-01")
    code, out, err = _mlenv("logs", "site-lab")
    assert code == 3 and err.startswith(
        f"error: run {rid}: host Lab-WS-01 (the head): ssh unreachable: "
    ), err


def test_the_copy_back_skips_an_unreachable_host_and_a_lost_head_is_error_naming_why(
    root: Path, monkeypatch
) -> None:
    """A host gone at the end: said, its logs skipped, the head's reports still come back.
    The head gone: nothing of it here, and the run is ERROR with the reason (not a traceback)."""
    from mlenv.platforms.slurm import judge_report

    cfg = load(root / "clusters" / "site-lab.yaml")
    rid = "20261127-120000-abcdef"
    for i, h in enumerate(HOSTS):
        logs = root / "hosts" / h / "mlenv-results" / rid / "logs"
        logs.mkdir(parents=True)
        (logs / f"rank{2 * i}.{h.lower()}.log").write_text(f"rank {2 * i}\n")
    (root / "hosts" / HOSTS[0] / "mlenv-results" / rid / "summary.md").write_text("# summary\n")
    said: list[str] = []
    monkeypatch.setenv("FAKE_SSH_DOWN", HOSTS[1])
    dest = root / "reports" / "site-lab" / rid
    assert hosts.gather(cfg, HOSTS, f"mlenv-results/{rid}", dest, said.append) is None
    assert sorted(p.name for p in (dest / "logs").iterdir()) == [
        "rank0.lab-ws-01.log",
        "rank4.lab_ws_03.lan.log",
    ]
    assert (dest / "summary.md").is_file()
    assert said == [
        f"host {HOSTS[1]}: its rank logs were not copied back: ssh unreachable: "
        f"ssh: connect to host {HOSTS[1]} port 2222: Connection refused"
    ]
    # GNU tar's exit 1 (a straggler's log changed while read) keeps what came; a 2 is a failure
    monkeypatch.setenv("FAKE_SSH_TAR_EXIT", "1")
    assert hosts.gather(cfg, HOSTS[:1], f"mlenv-results/{rid}", root / "again", said.append) is None
    assert (root / "again" / "summary.md").is_file()
    monkeypatch.setenv("FAKE_SSH_TAR_EXIT", "2")
    assert hosts.gather(cfg, HOSTS[:1], f"mlenv-results/{rid}", root / "again", said.append) == (
        f"the reports of host {HOSTS[0]} could not be copied back (tar: exit 2)"
    )
    monkeypatch.delenv("FAKE_SSH_TAR_EXIT")
    monkeypatch.setenv("FAKE_SSH_DOWN", HOSTS[0])
    other = root / "reports" / "site-lab" / "20261127-120001-abcdef"
    why = hosts.gather(cfg, HOSTS, f"mlenv-results/{rid}", other, said.append)
    assert why is not None and why.startswith(
        f"the reports of host {HOSTS[0]} could not be copied back (ssh unreachable"
    )
    doc = judge_report(other, "20261127-120001-abcdef", forced_error=None, fallback_why=why)
    assert doc["verdict"] == "ERROR" and doc["reasons"][0].startswith(why), doc["reasons"]


def test_logs_of_a_shared_folder_this_machine_does_not_mount_are_read_on_the_head(
    root: Path,
) -> None:
    cfg = load(root / "clusters" / "site-lab.yaml")
    rid = "20261127-120000-abcdef"
    hosts.record_run(root, cfg, rid, Path(f"/mnt/shared/results/{rid}"), HOSTS, print)
    code, out, err = _mlenv("logs", "site-lab")  # the fake runs the script with the path as it is
    assert (
        code == 3
        and f"no rank 0 log in /mnt/shared/results/{rid}/logs on host Lab-WS-01 yet" in err
    ), err
    calls = (root / "calls").read_text()
    assert "Lab-WS-01 sh -c" in calls and f"/mnt/shared/results/{rid}" in calls


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
