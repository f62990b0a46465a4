"""Run the acceptance suite on this machine: N ranks through the DeepSpeed launcher.

``mlenv acceptance --local`` is a thin front for :func:`run_local`: this module owns the
launcher command line, the ranks' environment, the process group it starts and stops,
and the recovery of a report when rank 0 died before writing ``results.json`` (the
results gathered so far are kept, the verdict is ERROR).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

from mlenv.contract import EXIT_ERROR, RESULTS_JSONL, read_results
from mlenv.errors import InfraError

STARTUP_SLACK_S = 120.0  # launcher + torch import + rendezvous, on a busy 2-core machine


def gpu_count() -> int:
    """GPUs on this machine (nvidia-smi; importing torch here would slow every CLI call).
    The same count pod-init uses for the hostfile's slots, minus its /dev fallback: a
    machine without nvidia-smi runs CPU ranks here."""
    from mlenv.pod.hostfile import count_gpus

    if shutil.which("nvidia-smi") is None:
        return 0
    return count_gpus(os.environ, dev_glob="/nonexistent")


def _deepspeed_cmd() -> list[str]:
    """The DeepSpeed launcher next to this interpreter, else ``python -m deepspeed.launcher.runner``."""
    exe = Path(sys.executable).with_name("deepspeed")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("deepspeed")
    return [found] if found else [sys.executable, "-m", "deepspeed.launcher.runner"]


def build_command(nproc: int, gpus: int, port: int, report_dir: Path, suite_args: list[str]) -> list[str]:
    """The launcher command line (an argument list, never a shell string).

    ``--num_accelerators N`` sets the slots per host even on CPU, where DeepSpeed would
    otherwise count NUMA nodes; a hostfile path that does not exist keeps the launch
    local even on a machine with ``/job/hostfile``.
    """
    flag = "--num_gpus" if gpus else "--num_accelerators"
    return [*_deepspeed_cmd(), "--hostfile", str(report_dir / ".no-hostfile"), flag, str(nproc),
            "--master_addr", "127.0.0.1", "--master_port", str(port), "--module", "mlenv.acceptance",
            *suite_args]


def extensions_dir() -> str:
    """Where DeepSpeed builds its CPU op: outside the checkout (it survives a clean clone) and
    one folder per Python environment, since the op links that environment's torch and two
    venvs sharing a folder rebuild over each other's lock (the Makefile uses the same path)."""
    return str(Path.home() / ".cache" / "mlenv" / "torch_extensions" / sys.prefix.replace("/", "_"))


def launch_env(nproc: int, gpus: int) -> dict[str, str]:
    """The ranks' environment: CPU accelerator without GPUs, extension cache outside the checkout."""
    env = dict(os.environ)
    if not gpus:
        env["DS_ACCELERATOR"] = "cpu"
        # N ranks on C cores: more threads than cores makes every rank slower.
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env.setdefault("TORCH_EXTENSIONS_DIR", extensions_dir())
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def validate(profile: str, checks: str, baseline: str | None, options: Path | None) -> int:
    """Check flags and files before launching anything; returns the number of checks."""
    from mlenv.acceptance.core import profiles
    from mlenv.acceptance.core.selection import load_checks, select_checks
    from mlenv.acceptance.judging import baselines

    overrides = profiles.load_options_file(options) if options else {}
    profiles.resolve(profile, overrides)  # every check's options, typed and located (InputError)
    if baseline:
        baselines.resolve(baseline, [])
    load_checks()
    return len(select_checks(checks))


def recover(report_dir: Path, launcher_rc: int) -> dict[str, Any]:
    """Finalise a report from ``results.jsonl`` when rank 0 died before ``results.json``."""
    from mlenv.acceptance.reports import RunMeta, finalize
    from mlenv.acceptance.reports.document import now_iso
    from mlenv.acceptance.reports.jsonl import read_partial

    results, notes = read_partial(report_dir / RESULTS_JSONL)
    meta = RunMeta.read(report_dir) or RunMeta(run_id="unknown", started=now_iso(), profile="", checks=[],
                                              world={"nodes": None, "ranks": None, "hosts": []})
    done = {r.name for r in results}
    missing = [c for c in meta.checks if c not in done]
    why = (f"the run ended (launcher exit {launcher_rc}) before rank 0 wrote results.json; "
           f"{len(results)} result(s) kept from results.jsonl")
    if missing:
        why += f"; not measured: {', '.join(missing)}"
    return finalize(report_dir, meta, results, notes=[why, *notes])


def stop(proc: subprocess.Popen[str]) -> None:
    """End the launcher's whole process group (we started it in its own session)."""
    for sig, wait in ((signal.SIGTERM, 35.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass
class LocalRun:
    """What a finished local run left: its results document and how it ended."""

    doc: dict[str, Any]
    recovered: bool  # rank 0 died; the document was finalised here from results.jsonl
    wall_s: float
    timed_out: bool


def prepare_report_dir(report_dir: Path) -> None:
    """Create ``report_dir`` and remove an earlier run's report files (never anything else),
    so an old ``results.json`` is never read as this run's."""
    from mlenv.acceptance.reports.document import ALL_FILES

    report_dir.mkdir(parents=True, exist_ok=True)
    for f in ALL_FILES:
        (report_dir / f).unlink(missing_ok=True)


# DeepSpeed's own logger lines: "[2026-11-24 00:05:58,600] [INFO] [launch.py:152:main] ...".
# INFO/DEBUG chatter goes to launcher.log only (unless --verbose); WARNING and up still show.
_DS_CHATTER = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\] \[(?:INFO|DEBUG)\] ")
LAUNCHER_LOG = "launcher.log"


# The launcher warns that our deliberately absent hostfile is absent: expected, not news.
_EXPECTED_WARNING = "Unable to find hostfile, will proceed with training with local resources only"


def shown(line: str, verbose: bool) -> bool:
    """Whether a launcher output line reaches the console (it always reaches launcher.log)."""
    return verbose or not (_DS_CHATTER.match(line) or _EXPECTED_WARNING in line)


def _pump(stream: IO[str], log: IO[str], out: TextIO, verbose: bool, stamp: bool) -> None:
    """Copy the launcher's output: everything to the log, the non-chatter to ``out``;
    ``stamp`` (not a terminal: CI logs) prefixes each console line with the wall time."""
    for line in stream:
        log.write(line)
        log.flush()
        if shown(line, verbose):
            out.write(f"{time.strftime('%H:%M:%S')} {line}" if stamp else line)
            out.flush()


def first_run_notice(gpus: int, env: dict[str, str]) -> str | None:
    """The one-time DeepSpeed CPU op build, said before the silence it causes."""
    if gpus:
        return None
    root = Path(env.get("TORCH_EXTENSIONS_DIR", ""))
    if root and any(root.glob("deepspeed_shm_comm/*.so")):
        return None
    return "building DeepSpeed's CPU communication op (first run on this machine only, ~30 s)…"


def run_local(cmd: list[str], env: dict[str, str], report_dir: Path, budget_s: float,
              on_timeout: Any = None, *, verbose: bool = False, out: TextIO | None = None) -> LocalRun:
    """Start the launcher in its own session, wait at most ``budget_s``, then read (or recover)
    the report. InfraError when no report at all was produced.

    The launcher's output goes to ``report_dir/launcher.log`` in full and to ``out``
    (default stdout) without DeepSpeed's INFO chatter unless ``verbose``; lines carry a
    timestamp when ``out`` is not a terminal."""
    console = out or sys.stdout
    t0 = time.monotonic()
    timed_out = False
    log = (report_dir / LAUNCHER_LOG).open("w", encoding="utf-8")
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, errors="replace")
    assert proc.stdout is not None
    pump = threading.Thread(target=_pump, args=(proc.stdout, log, console, verbose, not console.isatty()),
                            daemon=True)
    pump.start()
    try:
        rc = proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        if on_timeout is not None:
            on_timeout(budget_s)
        stop(proc)
        rc = EXIT_ERROR
    except KeyboardInterrupt:
        stop(proc)
        raise
    finally:
        # a rank that left the process group may still hold the pipe: never wait for it long
        pump.join(timeout=10)
        log.close()
    wall = time.monotonic() - t0
    doc = read_results(report_dir)
    if doc is not None:
        return LocalRun(doc, False, wall, timed_out)
    if (report_dir / "results.jsonl").exists() or (report_dir / "run.json").exists():
        return LocalRun(recover(report_dir, rc), True, wall, timed_out)
    raise InfraError(f"the suite produced no report in {report_dir} (launcher exit {rc}); see the output above "
                     f"and {report_dir / LAUNCHER_LOG}")
