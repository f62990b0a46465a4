"""Hosts: ``status`` with hosts ssh cannot reach, ``shell`` when ssh itself
fails, and ``logs`` (the head host's run log), against a fake ``ssh`` on PATH
(``_fakessh.py``), through the CLI in process.

Whole runs through the fake (the suite started on the hosts, SIGTERM, a hung rank) are
``tests/integration/test_hosts_fake_ssh_runs.py``: real processes and signals.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _fakessh import HOSTS, fake_ssh_root
from typer.testing import CliRunner

from mlenv.cli.app import app
from mlenv.config import load
from mlenv.errors import InputError
from mlenv.platforms import hosts


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fake_ssh_root(tmp_path, monkeypatch)


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
