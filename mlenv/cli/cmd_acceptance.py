"""``mlenv acceptance --local``: run the acceptance suite on this machine through DeepSpeed.

The DeepSpeed launcher starts N ranks of ``python -m mlenv.acceptance`` (all GPUs when
present, else N CPU ranks with ``DS_ACCELERATOR=cpu`` and gloo); output streams through.
Afterwards the verdict comes from ``results.json``; when rank 0 died before writing it,
the report is finalised here from ``results.jsonl`` with verdict ERROR, so what was
measured is kept. Exit: 0 PASS, 1 FAIL, 2 bad flags/config/baseline, 3 ERROR.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from mlenv.cli._common import err, guarded
from mlenv.errors import EXIT_ERROR, EXIT_FAIL, EXIT_OK, InfraError, InputError

STARTUP_SLACK_S = 120.0  # launcher + torch import + rendezvous, on a busy 2-core machine


def _gpu_count() -> int:
    """GPUs on this machine via nvidia-smi (importing torch here would slow every CLI call)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in p.stdout.splitlines() if line.startswith("GPU ")) if p.returncode == 0 else 0


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


def launch_env(nproc: int, gpus: int) -> dict[str, str]:
    """The ranks' environment: CPU accelerator without GPUs, extension cache outside the checkout."""
    env = dict(os.environ)
    if not gpus:
        env["DS_ACCELERATOR"] = "cpu"
        # N ranks on C cores: more threads than cores makes every rank slower.
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "mlenv" / "torch_extensions"))
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _validate(profile: str, checks: str, baseline: str | None, options: Path | None) -> int:
    """Check flags and files before launching anything; returns the number of checks."""
    from mlenv.acceptance import baselines, profiles
    from mlenv.acceptance.__main__ import load_checks, select_checks, validate_selected_options

    overrides = profiles.load_options_file(options) if options else {}
    resolved = profiles.resolve(profile, overrides)
    if baseline:
        baselines.resolve(baseline, [])
    load_checks()
    selected = select_checks(checks)
    validate_selected_options(selected, resolved)
    return len(selected)


def recover(report_dir: Path, launcher_rc: int) -> dict[str, Any]:
    """Finalise a report from ``results.jsonl`` when rank 0 died before ``results.json``."""
    from mlenv.acceptance.reports import RunMeta, finalize
    from mlenv.acceptance.reports.document import RESULTS_JSONL, now_iso
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


def _stop(proc: subprocess.Popen[bytes]) -> None:
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


def register(app: typer.Typer) -> None:
    """Add the ``acceptance`` verb."""

    @app.command("acceptance")
    @guarded
    def acceptance(
        local: Annotated[bool, typer.Option("--local", help="Run on this machine through the DeepSpeed launcher.")] = False,
        nproc: Annotated[int, typer.Option("--nproc", help="Ranks to start (default: all GPUs, else 2 CPU ranks).")] = 0,
        profile: Annotated[str, typer.Option("--profile", help="quick | full")] = "quick",
        report_dir: Annotated[Path, typer.Option("--report-dir", help="Where reports go.")] = Path("acceptance-report"),
        checks: Annotated[str, typer.Option("--checks", help="Comma list of checks or families (default: all).")] = "",
        baseline: Annotated[str | None, typer.Option("--baseline", help="Baseline file or GPU model (default: by device).")] = None,
        deadline: Annotated[float, typer.Option("--deadline", help="Per-check deadline in seconds (default: by profile).")] = 0.0,
        options: Annotated[Path | None, typer.Option("--options", help="JSON/YAML {check: {key: value}} over the profile.")] = None,
    ) -> None:
        """Run the acceptance suite and print the verdict (0 PASS, 1 FAIL, 2 bad input, 3 ERROR)."""
        from mlenv.acceptance import console, dist, profiles

        if not local:
            raise InputError("only --local runs from here; on a cluster run `mlenv launch CLUSTER` "
                             "(the suite is the default job on pod-0)")
        if nproc < 0:
            raise InputError(f"--nproc: expected a positive number, got {nproc}")
        if deadline < 0:
            raise InputError(f"--deadline: expected seconds > 0, got {deadline}")
        n_checks = _validate(profile, checks, baseline, options)
        gpus = _gpu_count()
        if gpus and nproc > gpus:
            raise InputError(f"--nproc {nproc}: this machine has {gpus} GPU(s) and each rank needs its own; "
                             f"use --nproc {gpus} or fewer")
        n = nproc or gpus or 2
        dl = deadline or profiles.DEADLINES[profile]
        report_dir.mkdir(parents=True, exist_ok=True)
        from mlenv.acceptance.reports.document import ALL_FILES, RESULTS_JSON

        for f in ALL_FILES:  # never read an earlier run's report as this one's
            (report_dir / f).unlink(missing_ok=True)
        suite = ["--profile", profile, "--report-dir", str(report_dir.resolve()), "--deadline", str(dl)]
        suite += ["--checks", checks] if checks else []
        suite += ["--baseline", baseline] if baseline else []
        suite += ["--options", str(options.resolve())] if options else []
        cmd = build_command(n, gpus, dist.free_port(), report_dir.resolve(), suite)
        err(f"launching {n} rank(s) ({'GPU' if gpus else 'CPU, gloo'}) through DeepSpeed: {shlex.join(cmd)}")
        # Worst case: every check runs into its deadline (the suite itself aborts sooner).
        budget = n_checks * dl + STARTUP_SLACK_S
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=launch_env(n, gpus), start_new_session=True)
        try:
            rc = proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            err(f"the suite did not end within {budget:.0f} s: stopping it")
            _stop(proc)
            rc = EXIT_ERROR
        except KeyboardInterrupt:
            _stop(proc)
            raise
        wall = time.monotonic() - t0
        results_json = report_dir / RESULTS_JSON
        if results_json.exists():
            doc = json.loads(results_json.read_text(encoding="utf-8"))
            # Rank 0 already printed the full verdict block: one closing line is enough.
            typer.echo(f"verdict: {doc['verdict']} (reports in {report_dir})")
        elif (report_dir / "results.jsonl").exists() or (report_dir / "run.json").exists():
            doc = recover(report_dir, rc)  # rank 0 died: only this process can tell the verdict
            typer.echo(console.verdict_block(doc, str(report_dir)))
        else:
            raise InfraError(f"the suite produced no report in {report_dir} (launcher exit {rc}); see the output above")
        typer.echo(f"wall time: {wall:.1f} s")
        raise typer.Exit({"PASS": EXIT_OK, "FAIL": EXIT_FAIL}.get(doc["verdict"], EXIT_ERROR))
