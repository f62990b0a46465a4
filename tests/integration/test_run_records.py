"""Run records with real processes: every run finalised, kept and compared exactly.

`mlenv acceptance --local` with 2 CPU ranks (gloo) through the DeepSpeed launcher, only
the checks each case needs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_acceptance_local import MLENV, ROOT

from mlenv.contract import is_run_id

pytestmark = pytest.mark.integration


def _wait_for_results(
    report: Path,
    count: int,
    proc: subprocess.Popen[str],
    *,
    seconds: float = 300,
    poll_s: float = 0.2,
) -> None:
    """Until ``report/results.jsonl`` holds ``count`` lines, the run ends, or ``seconds``
    pass; the caller then asserts the run is still live (``proc.poll() is None``)."""
    end = time.monotonic() + seconds
    jsonl = report / "results.jsonl"
    while time.monotonic() < end and proc.poll() is None:
        if jsonl.is_file() and len(jsonl.read_text().splitlines()) >= count:
            return
        time.sleep(poll_s)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return dict(
        os.environ,
        PYTHONPATH=f"{ROOT / 'tests' / 'integration'}{os.pathsep}{ROOT}",
        MLENV_ROOT=str(ROOT),
        MLENV_HISTORY_DIR=str(tmp_path / "hist"),
        DS_ACCELERATOR="cpu",
        TORCH_EXTENSIONS_DIR=os.environ.get(
            "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/mlenv/torch_extensions")
        ),
        **extra,
    )


def test_each_default_run_gets_its_own_folder_named_by_its_one_run_id(tmp_path: Path) -> None:
    runs = []
    for _ in range(2):
        p = subprocess.run(
            [*MLENV, "acceptance", "--local", "--nproc", "2", "--checks", "environment"],
            capture_output=True,
            text=True,
            timeout=240,
            env=_env(tmp_path),
            cwd=tmp_path,
        )
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
        runs.append(p)
    parent = tmp_path / "acceptance-report"
    folders = sorted(d for d in parent.iterdir() if not d.is_symlink())
    assert len(folders) == 2 and all(is_run_id(d.name) for d in folders), folders
    recs = [
        json.loads(x)
        for x in (tmp_path / "hist" / "local" / "history.jsonl").read_text().splitlines()
    ]
    for d, p, rec in zip(folders, runs, recs, strict=True):
        rid = d.name
        assert json.loads((d / "results.json").read_text())["run_id"] == rid
        assert rec["run_id"] == rid and rec["report_dir"] == str(d.resolve())
        assert f"run {rid}: reports in acceptance-report/{rid}" in p.stderr
        assert not (d / ".mlenv-run.lock").exists()  # released at the end
    assert os.readlink(parent / "latest") == folders[1].name


def _run_processes(marker: str) -> list[str]:
    """Command lines of the live processes that name ``marker`` (the run's report folder:
    the launcher and every rank carry it)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or d.name == str(os.getpid()):
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(
                (ln for ln in (d / "status").read_text().splitlines() if ln.startswith("State:")),
                "",
            )
        except OSError:
            continue
        if marker in cmd and "zombie" not in state:
            found.append(f"{d.name}: {cmd}")
    return found


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGTERM, 143), (signal.SIGHUP, 143), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_a_signal_to_the_cli_stops_the_run_and_finalises_it_as_interrupted(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """What CI cancelling, `timeout` or a closed terminal send is handled like
    Ctrl-C: the ranks are stopped, the report finalised with verdict INTERRUPTED (exit 130
    for SIGINT, 143 for SIGTERM/SIGHUP), what was measured kept, the history line written,
    and nothing of the run still running when the CLI has exited. Rank 1 hangs in the
    second check, so the signal arrives while rank 0 waits for it."""
    report = (tmp_path / "report").resolve()
    env = _env(
        tmp_path,
        MLENV_FAULT="hang:rank=1,check=probe",
        MLENV_ACCEPTANCE_PLUGINS="acceptance_probes",
    )
    p = subprocess.Popen(
        [
            *MLENV,
            "acceptance",
            "--local",
            "--nproc",
            "2",
            "--checks",
            "environment,probe",
            "--deadline",
            "120",
            "--report-dir",
            str(report),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        _wait_for_results(report, 2, p, poll_s=0.5)  # environment, both ranks
        assert p.poll() is None, "the run ended before the signal"
        time.sleep(2)  # rank 0 is now waiting for rank 1's probe
        t0 = time.monotonic()
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    name = signal.Signals(sig).name
    assert p.returncode == code, (out + err)[-4000:]
    assert time.monotonic() - t0 < 90  # stopped, not left to run into its deadline
    assert f"{name}: stopping the run and finalising its report" in err
    assert "Traceback" not in out + err
    doc = json.loads((report / "results.json").read_text())
    assert doc["verdict"] == "INTERRUPTED" and doc["interrupted"] == {"signal": name}, doc[
        "reasons"
    ]
    assert doc["reasons"][0].startswith(f"INTERRUPTED: the run was stopped by {name}")
    assert sorted(
        c["rank"] for c in doc["checks"] if c["name"] == "environment" and c["status"] == "PASS"
    ) == [0, 1]
    assert (report / "junit.xml").is_file() and (report / "summary.md").is_file()
    (rec,) = [
        json.loads(x)
        for x in (tmp_path / "hist" / "local" / "history.jsonl").read_text().splitlines()
    ]
    assert rec["run_id"] == doc["run_id"] and rec["verdict"] == "INTERRUPTED"
    assert not (report / ".mlenv-run.lock").exists()
    assert _run_processes(str(report)) == []


def test_acceptance_whose_reader_left_exits_by_its_verdict_quietly(tmp_path: Path) -> None:
    """`mlenv acceptance … | head -3`: the run completes and is recorded, and
    the exit is the verdict's (0), with no BrokenPipe traceback. The pipe's read end is
    closed before the run starts, so every write to stdout fails."""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        p = subprocess.run(
            [
                *MLENV,
                "acceptance",
                "--local",
                "--nproc",
                "2",
                "--checks",
                "environment",
                "--report-dir",
                str(tmp_path / "report"),
            ],
            stdout=wr,
            stderr=subprocess.PIPE,
            text=True,
            timeout=240,
            env=_env(tmp_path),
            cwd=tmp_path,
        )
    finally:
        os.close(wr)
    assert p.returncode == 0, p.stderr[-4000:]
    assert (
        "Traceback" not in p.stderr
        and "BrokenPipe" not in p.stderr
        and "internal error" not in p.stderr
    )
    assert json.loads((tmp_path / "report" / "results.json").read_text())["verdict"] == "PASS"
    (rec,) = [
        json.loads(x)
        for x in (tmp_path / "hist" / "local" / "history.jsonl").read_text().splitlines()
    ]
    assert rec["verdict"] == "PASS"


@pytest.fixture()
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 KiB tmpfs: room for the claim and the launcher's first lines, not for a report."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mnt)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_disk_full_early_is_one_line_and_the_run_is_still_in_the_history(
    tmp_path: Path, full_disk: Path
) -> None:
    """On a real full disk: once a thread traceback, "internal error", exit 3,
    no history line though the history folder had room. Now: the run stops after its first
    check, one line names the folder and its free space, the history records it as ERROR,
    and results.jsonl (if any) holds only whole lines."""
    report = full_disk / "run"
    p = subprocess.run(
        [
            *MLENV,
            "acceptance",
            "--local",
            "--nproc",
            "2",
            "--checks",
            "environment,compute",
            "--report-dir",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 3, out[-4000:]
    assert "Traceback (most recent call last)" not in out and "internal error" not in out, out[
        -4000:
    ]
    errors = [x for x in p.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: {report}: no space left on device ("
    ), p.stderr
    assert (
        " free): the run's report could not be written there; it is recorded in the history as ERROR"
        in errors[0]
    )
    run_id = next(x.split()[1].rstrip(":") for x in p.stderr.splitlines() if x.startswith("run "))
    (rec,) = [
        json.loads(x)
        for x in (tmp_path / "hist" / "local" / "history.jsonl").read_text().splitlines()
    ]
    assert rec["run_id"] == run_id and rec["verdict"] == "ERROR"
    jsonl = report / "results.jsonl"
    if jsonl.exists():
        assert all(json.loads(x) for x in jsonl.read_text().splitlines())
    assert not (report / ".mlenv-run.lock").exists()  # released at the end


@pytest.mark.parametrize(
    ("sig", "code", "after"),
    [
        (signal.SIGTERM, 143, "reports in"),  # before the launcher starts
        (signal.SIGINT, 130, "launching"),  # launcher starting, rank 0 has no run.json yet
        (signal.SIGHUP, 143, "launching"),
    ],
    ids=["SIGTERM-before-launch", "SIGINT-while-launching", "SIGHUP-while-launching"],
)
def test_a_stop_in_the_first_seconds_is_recorded_as_interrupted(
    tmp_path: Path, sig: signal.Signals, code: int, after: str
) -> None:
    """A stop before rank 0 wrote run.json used to exit 3 "no report" and record nothing."""
    report = (tmp_path / "report").resolve()
    p = subprocess.Popen(
        [
            *MLENV,
            "acceptance",
            "--local",
            "--nproc",
            "2",
            "--checks",
            "environment",
            "--report-dir",
            str(report),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    seen = []
    try:
        assert p.stderr is not None
        for line in p.stderr:
            seen.append(line)
            if after in line:
                p.send_signal(sig)
                break
        early = not (report / "run.json").exists()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    err = "".join(seen) + err
    name = signal.Signals(sig).name
    assert p.returncode == code, (out + err)[-4000:]
    assert early  # the stop came before rank 0 wrote run.json
    assert "no report" not in err and "Traceback" not in out + err
    doc = json.loads((report / "results.json").read_text())
    assert doc["verdict"] == "INTERRUPTED" and doc["interrupted"] == {"signal": name}
    (rec,) = [
        json.loads(x)
        for x in (tmp_path / "hist" / "local" / "history.jsonl").read_text().splitlines()
    ]
    assert rec["run_id"] == doc["run_id"] and rec["verdict"] == "INTERRUPTED"
    assert not (report / ".mlenv-run.lock").exists()
    assert _run_processes(str(report)) == []
