"""Issue 24 §3, hosts: ``status`` with hosts ssh cannot reach, ``shell`` when ssh itself
fails, and ``logs`` (the head host's run log), against a fake ``ssh`` on PATH.

The fake behaves as OpenSSH does: a host listed in ``$FAKE_SSH_DOWN`` is refused (exit
255, ssh's message on stderr, or in the ``-E`` file when one is given); any other host
answers the probe, or runs ``exit N`` as the remote command.
"""

from __future__ import annotations

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
for d in $FAKE_SSH_DOWN; do
  if [ "$d" = "$host" ]; then
    msg="ssh: connect to host $host port 2222: Connection refused"
    if [ -n "$log" ]; then echo "$msg" >> "$log"; else echo "$msg" >&2; fi
    exit 255
  fi
done
case "$*" in
  *torch.distributed.run*--node_rank=0*--report-dir*)  # rank 0 of a run that ends: its report
    if [ -n "${FAKE_SSH_REPORT:-}" ]; then
      dir=$(echo "$*" | sed -n 's/.*--report-dir \([^ ]*\).*/\1/p')
      rid=$(echo "$*" | sed -n 's/.*MLENV_RUN_ID=\([^ ]*\).*/\1/p')
      mkdir -p "$dir"
      printf '{"run_id": "%s", "verdict": "PASS", "profile": "quick", "checks": [], "job": null}\n' "$rid" \
        > "$dir/results.json"
      exit 0
    fi
    sh -c 'while :; do sleep 1; done' "rank $*" & wait ;;
  *torch.distributed.run*)  # a "rank" that outlives this ssh unless the host is told to stop it
    [ -n "${FAKE_SSH_REPORT:-}" ] && exit 0
    sh -c 'while :; do sleep 1; done' "rank $*" & wait ;;
  *-c*) echo '{"python": "3.11.7", "torch": "2.13.0", "gpus": 2, "deepspeed": "0.19.8"}' ;;
  *) sh -c "$*" ;;
esac
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


def test_status_with_some_hosts_unreachable_names_them_and_reports_the_rest(root: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SSH_DOWN", "Lab-WS-02")
    code, out, err = _mlenv("status", "site-lab")
    assert code == 0, (out, err)
    lines = out.strip().splitlines()
    assert len(lines) == 3 and "up, python 3.11.7" in lines[0] and "up, python 3.11.7" in lines[2], out
    assert lines[1].startswith("host Lab-WS-02: ssh unreachable:"), out
    assert "unreachable over ssh: Lab-WS-02 (1 of 3 hosts)" in err


def test_shell_when_ssh_cannot_connect_is_exit_3_naming_the_host(root: Path, monkeypatch, capfd) -> None:
    monkeypatch.setenv("FAKE_SSH_DOWN", "Lab-WS-02")
    code, out, err = _mlenv("shell", "site-lab", "--pod", "1", "--", "true")
    assert code == 3, (out, err)
    assert err.strip() == ("error: shell: host Lab-WS-02: ssh: connect to host Lab-WS-02 port 2222: "
                           "Connection refused"), err
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
    assert code == 2 and "no hosts run recorded for site-lab" in err and len(err.strip().splitlines()) == 1
    cfg = load(root / "clusters" / "site-lab.yaml")
    hosts.record_run(root, cfg, "20261127-120000-abcdef", root / "nowhere", HOSTS, print)
    code, out, err = _mlenv("logs", "site-lab")
    assert code == 3 and "no rank 0 log" in err and "host Lab-WS-01" in err, err
    assert json.loads(hosts.run_record(root, cfg).read_text())["run_id"] == "20261127-120000-abcdef"


def _running(pattern: str) -> list[str]:
    r = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False)
    return r.stdout.split()


def test_sigterm_during_a_run_stops_the_ranks_on_every_host_and_exits_143(root: Path) -> None:
    cfg = root / "clusters" / "site-lab.yaml"
    shared = root / "shared"
    cfg.write_text(cfg.read_text().replace("hosts:\n", f"hosts:\n  shared_dir: {shared}\n", 1))
    p = subprocess.Popen([sys.executable, "-m", "mlenv", "acceptance", "--cluster", "site-lab"],
                         env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 120  # a loaded 2-core machine starts python slowly
        while len(_running(f"rank .*{shared}/results/")) < 3 and time.monotonic() < end:
            assert p.poll() is None, p.communicate()[0]
            time.sleep(0.2)
        assert len(_running(f"rank .*{shared}/results/")) == 3
        p.send_signal(signal.SIGTERM)
        try:
            # pkill over ssh (30 s at most), the sessions' grace (STOP_GRACE_S, 40 s), then
            # the report is finalised: on a loaded 2-core machine this once took over 120 s
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            ps = subprocess.run(["ps", "-eo", "pid,ppid,stat,args"], capture_output=True, text=True).stdout
            p.kill()
            raise AssertionError(p.communicate()[0] + "\n" + "\n".join(
                x for x in ps.splitlines() if str(shared) in x or "mlenv" in x)) from None
        assert p.returncode == 143, out
        assert "SIGTERM: stopping run" in out and "Traceback" not in out, out
        # these ranks never write a report: stopped before rank 0 could, the run is still
        # INTERRUPTED (it was ERROR "ended before rank 0 wrote results.json": a CI run's
        # real-sshd SIGTERM came while the ranks were starting)
        assert "verdict: INTERRUPTED" in out, out
        end = time.monotonic() + 10  # a process that got SIGTERM may take a moment to be gone
        while _running(f"{shared}/results/") and time.monotonic() < end:
            time.sleep(0.2)
        assert _running(f"{shared}/results/") == [], out  # neither the ranks nor their ssh sessions
    finally:
        p.kill()
        for pid in _running(f"{shared}/results/"):
            os.kill(int(pid), signal.SIGKILL)


def test_a_finished_run_is_recorded_in_this_machines_history(root: Path, monkeypatch) -> None:
    """i26.3: a hosts run (the scheduled cron line's too) is in the control host's history,
    as a Slurm run is; rank 0 records it only in host 0's working folder, over ssh."""
    cfg = root / "clusters" / "site-lab.yaml"
    shared = root / "shared"
    cfg.write_text(cfg.read_text().replace("hosts:\n", f"hosts:\n  shared_dir: {shared}\n", 1))
    monkeypatch.setenv("FAKE_SSH_REPORT", "1")
    monkeypatch.delenv("MLENV_HISTORY_DIR", raising=False)
    code, out, err = _mlenv("acceptance", "--cluster", "site-lab")
    assert code == 0, out + err
    rid = json.loads((root / ".mlenv" / "hosts" / "site-lab.json").read_text())["run_id"]
    lines = (root / "reports" / "site-lab" / "history.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    assert len(lines) == 1 and rec["run_id"] == rid and rec["verdict"] == "PASS" and rec["cluster"] == "site-lab"
    assert rec["report_dir"] == str((root / "reports" / "site-lab" / rid).resolve())
    assert json.loads((root / "reports" / "site-lab" / rid / "record.json").read_text()) == rec
    assert f"history: run {rid} appended to" in out
