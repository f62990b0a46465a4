"""``python -m mlenv.acceptance``: run the suite on this rank (torchrun, DeepSpeed, or alone).

Exit codes (rank 0): 0 PASS, 1 FAIL, 2 bad flags/options/baseline, 3 ERROR, 130/143
INTERRUPTED (SIGINT / SIGTERM or SIGHUP given to the CLI). Other
ranks exit 0 unless they fail to start. ``MLENV_ACCEPTANCE_PLUGINS`` (comma-separated
module names) imports extra check modules, e.g. site-specific checks or test probes.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mlenv.acceptance.core import profiles
from mlenv.acceptance.core.base import Check, RunContext, registry
from mlenv.acceptance.core.options import OptionLayer
from mlenv.acceptance.core.profiles import check_deadlines
from mlenv.acceptance.core.registry import load, order_key, select_checks
from mlenv.acceptance.core.result import CheckResult
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.records import history
from mlenv.acceptance.reports import RunMeta, console, finalize
from mlenv.acceptance.reports.document import (
    ALL_FILES,
    ReportWriteError,
    batch_job,
    judged,
    mark_unwritten,
    no_space,
    no_space_line,
    now_iso,
)
from mlenv.acceptance.reports.jsonl import JsonlWriter
from mlenv.acceptance.run import ranklog, world
from mlenv.contract import RESULTS_JSONL, exit_for_doc, push_url
from mlenv.errors import EXIT_ERROR, EXIT_INPUT, EXIT_OK, InputError, MlenvError

if TYPE_CHECKING:
    from mlenv.acceptance.run.runner import Outcome

LOCALIZE = "fabric.localize"  # --localize runs it whatever --checks says


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the entry's flags (``--local_rank`` from the DeepSpeed launcher is accepted and ignored)."""
    p = argparse.ArgumentParser(prog="python -m mlenv.acceptance", description=__doc__)
    p.add_argument("--profile", default="quick", choices=profiles.profile_names())
    p.add_argument(
        "--checks", default="", help="comma list of check names or families (default: all)"
    )
    p.add_argument("--report-dir", default="acceptance-report")
    p.add_argument(
        "--baseline", default=None, help="baseline file or GPU model (default: by device)"
    )
    p.add_argument("--deadline", type=float, default=None, help="per-check deadline in seconds")
    p.add_argument(
        "--options", default=None, help="JSON/YAML file {check: {key: value}} over the profile"
    )
    p.add_argument(
        "--history-dir",
        default=None,
        help="history root: <dir>/<cluster>/history.jsonl (default $MLENV_HISTORY_DIR, else ./reports)",
    )
    p.add_argument(
        "--run-id",
        default=None,
        help="this run's id (default $MLENV_RUN_ID, else a new one): results.json and the history carry it",
    )
    p.add_argument(
        "--localize",
        action="store_true",
        help=f"run {LOCALIZE} (name the slow node or link) even when no earlier check asks for it",
    )
    p.add_argument(
        "--push-metrics",
        default=None,
        metavar="URL",
        help="rank 0: once the run is recorded, push its series to this Pushgateway "
        "(as `mlenv metrics RUN --push URL`; the scheduled re-check's acceptance.metrics.push)",
    )
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _env_summary(results: list[CheckResult], backend: str) -> dict[str, object]:
    for r in results:
        if r.name == "environment" and r.rank == 0 and r.details:
            d = r.details
            return {
                "torch": d.get("torch"),
                "cuda": d.get("cuda"),
                "nccl": d.get("nccl"),
                "deepspeed": d.get("deepspeed"),
                "driver": d.get("driver"),
                "gpus": sorted(
                    {
                        str(g)
                        for x in results
                        if x.name == "environment"
                        for g in x.details.get("gpu_models", [])
                    }
                ),
                "nccl_env": d.get("nccl_env", {}),
            }
    from mlenv.acceptance.checks.environment import versions

    return {
        **versions(),
        "gpus": [],
        "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
        "backend": backend,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the suite; returns the exit code (rank 0: the verdict's)."""
    args = parse_args(argv)
    try:
        overrides, checks = _plan(args)
        run_id = _run_id(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    deadline = float(args.deadline or profiles.DEADLINES[args.profile])
    report_dir = Path(args.report_dir)
    env = world.read_launch_env()
    host = world.hostname()
    ranklog.start(report_dir, env.rank, host)  # logs/rank<R>.<host>.log, for the sign-off bundle
    lifeline = world.Lifeline(env.master_addr, env.master_port)  # held until this process ends
    try:
        backend, device, hosts, nodes = world.init_process_group(
            deadline, env, host, nccl_log_dir=report_dir / "nccl", life=lifeline.life(host)
        )
    except Exception as e:  # a peer that never joins is named here (world.rendezvous)
        msg = str(e) if isinstance(e, MlenvError) else f"start-up failed: {type(e).__name__}: {e}"
        print(f"error: rank {env.rank} ({host}): {msg}", file=sys.stderr, flush=True)
        if env.rank == 0:
            _startup_report(args, run_id, report_dir, env, host, deadline, msg)
        return EXIT_INPUT if isinstance(e, InputError) else EXIT_ERROR
    options = profiles.resolve(
        args.profile, overrides, device
    )  # GPU sizes once the device is known
    node_rank, nnodes = world.node_layout(hosts, env)
    ctx = RunContext(
        rank=env.rank,
        world_size=env.world_size,
        local_rank=env.local_rank,
        local_world_size=env.local_world_size,
        node_rank=node_rank,
        nnodes=nnodes,
        host=host,
        backend=backend,
        device=device,
        profile=args.profile,
        options=options,
        deadline_s=deadline,
        report_dir=report_dir,
    )
    from mlenv.acceptance.run.runner import Runner, install_signal_handlers

    chan = world.SideChannel(env.master_addr, env.master_port, f"mlenv/{env.restart}")
    chan.start_heartbeat(env.rank)
    if env.rank != 0:  # rank 0 watches the others while it gathers; they watch rank 0
        chan.watch_rank0(
            deadline + world.RANK0_GRACE_S,
            lambda line: _leave_without_rank0(report_dir, env.rank, host, line),
            hosts[0],
        )
    install_signal_handlers(chan, env.rank)
    layout = {
        "nodes": nnodes,
        "ranks": env.world_size,
        "backend": backend,
        "device": "cuda" if ctx.is_cuda else "cpu",
        "hosts": hosts,
        # The node each rank ran on as its platform names it, whatever checks run (node verdicts).
        "node_names": [n for n, _ in nodes],
        "node_sources": [src for _, src in nodes],
    }
    meta = RunMeta(
        run_id=run_id,
        started=now_iso(),
        profile=args.profile,
        checks=[c.name for c in checks],
        world=layout,
        baseline_spec=args.baseline,
        deadline_s=deadline,
        job=batch_job(),
    )
    sink = _Sink(report_dir, host)
    if env.rank == 0:
        sink.open(meta)
        print(
            f"[acceptance] {len(checks)} check(s), {env.world_size} rank(s) on {nnodes} node(s), "
            f"{backend}/{layout['device']}, profile {args.profile}, deadline {deadline:g} s per check",
            flush=True,
        )

    live = console.LiveJudge(meta, baseline_spec=args.baseline)

    def emit(results: list[CheckResult]) -> None:
        sink.write(results)  # results.jsonl keeps what was measured; the verdict judges it again
        live.show(results)

    stale = float(os.environ.get("MLENV_HEARTBEAT_STALE_S", "15"))
    runner = Runner(
        ctx,
        chan,
        hosts,
        checks,
        emit if env.rank == 0 else None,
        stale_s=stale,
        progress=(lambda m: print(f"[acceptance]   {m}", flush=True)) if env.rank == 0 else None,
        stop_reason=sink.stop_reason,
    )
    try:
        outcome = runner.run()
    except (
        Exception
    ) as e:  # rank 0 gone or frozen (the store does not answer) or a bug: this rank cannot go on
        if env.rank != 0 and chan.rank0_silent_s() > 2 * world.HEARTBEAT_PERIOD_S:
            _leave_without_rank0(
                report_dir, env.rank, host, f"{chan.rank0_lost_line(hosts[0])} ({type(e).__name__})"
            )
        print(
            f"error: rank {env.rank} ({host}): {type(e).__name__}: {e}", file=sys.stderr, flush=True
        )
        os._exit(EXIT_ERROR)
    chan.stop()
    if env.rank != 0:
        sys.stdout.flush()
        # After an abort the group is suspect: leave without a teardown that could block.
        if outcome.aborted:
            with contextlib.suppress(Exception):  # rank 0 keeps the store up until then
                chan.set(f"left/{env.rank}", "1")
            os._exit(EXIT_OK)
        _destroy()
        return EXIT_OK
    sink.close()
    meta.env = _env_summary(outcome.results, backend)
    return _judge(
        args,
        report_dir,
        meta,
        outcome,
        live,
        lambda: _others_left(chan, env.world_size, 2.0, outcome.silent),
    )


def _leave_without_rank0(report_dir: Path, rank: int, host: str, line: str) -> None:
    """A rank other than 0 whose rank 0 went silent (hung, died): say so, leave the line
    for whoever finalises the report (``rundir.HUNG_FILE``: the local CLI, ``mlenv
    finalize``), and leave the run (a frozen rank 0 was silence)."""
    from mlenv.acceptance.records import rundir

    print(f"error: rank {rank} ({host}): {line}; leaving the run", file=sys.stderr, flush=True)
    rundir.mark_hung(report_dir, line)
    os._exit(EXIT_ERROR)


def _push(url: str, doc: dict[str, Any]) -> str:
    """Push the run's series to the Pushgateway at ``url``; the line saying where, or why
    not. A gateway that is down never changes the verdict or the exit code: the run is
    recorded, and ``mlenv metrics RUN --push URL`` can push it again."""
    from mlenv.acceptance.records import prom

    cluster = history.current_cluster()
    try:
        where = prom.push(url, doc, cluster)
    except (ImportError, OSError, ValueError) as e:
        return f"warning: metrics not pushed to {url}: {type(e).__name__}: {e}"
    return f"metrics pushed to {url}{where}"


def _plan(args: argparse.Namespace) -> tuple[OptionLayer, list[type[Check]]]:
    """The options file's overrides and the checks to run; InputError before any rendezvous."""
    if args.push_metrics:
        push_url(args.push_metrics, "--push-metrics")
    overrides = profiles.load_options_file(args.options) if args.options else OptionLayer()
    if args.localize:  # the flag wins over an options file's mode
        overrides.setdefault(LOCALIZE, {})["mode"] = "always"
    profiles.resolve(
        args.profile, overrides
    )  # validated here; resolved again once the device is known
    if args.baseline:
        baselines.resolve(args.baseline, [])  # fail fast on a bad file, before any rendezvous
    load()
    checks = select_checks(args.checks)
    if args.localize and LOCALIZE not in [c.name for c in checks]:
        checks = sorted([*checks, registry()[LOCALIZE]], key=lambda c: order_key(c.name))
    # A check that cannot finish within the per-check deadline would be named hung and
    # stop the suite: refused here, before any rank starts.
    check_deadlines(
        checks, overrides, args.profile, float(args.deadline or profiles.DEADLINES[args.profile])
    )
    return overrides, checks


def _open_report(report_dir: Path, meta: RunMeta) -> JsonlWriter:
    """Rank 0: clear an earlier run's report from ``report_dir``, write the run's metadata,
    open results.jsonl."""
    report_dir.mkdir(parents=True, exist_ok=True)
    for f in ALL_FILES:  # a stale report from an earlier run must never be read as this one's
        (report_dir / f).unlink(missing_ok=True)
    history.clear_stale(report_dir)
    meta.write(report_dir)
    return JsonlWriter(report_dir / RESULTS_JSONL)


def _judge(
    args: argparse.Namespace,
    report_dir: Path,
    meta: RunMeta,
    outcome: Outcome,
    live: console.LiveJudge,
    before_exit: Callable[[], None] | None = None,
) -> int:
    """Rank 0 after the last check: the verdict, the reports, the history line; the exit code."""
    plots = True
    try:
        meta.write(report_dir)
        doc = finalize(
            report_dir,
            meta,
            outcome.results,
            notes=outcome.notes,
            baseline=live.baseline,
            interrupted=outcome.interrupted,
        )
    except InputError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        os._exit(EXIT_INPUT)
    except (
        ReportWriteError
    ) as e:  # judged, not written (a full disk): the history still gets the run
        print(f"error: rank 0: {e}", file=sys.stderr, flush=True)
        doc, plots = e.doc, False
    except OSError as e:  # run.json
        why = _write_error(report_dir, e)
        print(f"error: rank 0: {why}", file=sys.stderr, flush=True)
        _, doc, _ = judged(meta, outcome.results, outcome.notes, live.baseline, outcome.interrupted)
        doc, plots = mark_unwritten(doc, why), False
    print(console.verdict_block(doc, str(report_dir)), flush=True)
    root = Path(args.history_dir) if args.history_dir else history.default_root()
    for line in history.after_run(report_dir, doc, root, plots=plots):
        console.print_note(line.strip(), indent="")
    if args.push_metrics:
        console.print_note(_push(args.push_metrics, doc), indent="")
    code = exit_for_doc(doc)
    if outcome.aborted:
        sys.stderr.flush()
        if before_exit is not None:
            before_exit()
        os._exit(code)
    _destroy()
    return code


def _others_left(
    chan: world.SideChannel, world_size: int, limit_s: float, silent: list[int] | None = None
) -> None:
    """Rank 0 after an abort: wait (at most ``limit_s``) until the other ranks have read the
    abort and said they leave. The store lives in this process; exiting while a rank still
    polls it gave that rank a DistNetworkError and torch's C++ stack on the console. The
    ``silent`` ranks (dead, stopped) will not say it: not waited for."""
    end = time.monotonic() + limit_s
    waiting = set(range(1, world_size)) - set(silent or [])
    while waiting and time.monotonic() < end:
        try:
            waiting = {r for r in waiting if chan.get_now(f"left/{r}") is None}
        except Exception:  # the store is gone anyway
            return
        time.sleep(0.05)


class _Sink:
    """Rank 0's results.jsonl. A folder it cannot write (a full disk) is said once, in one line,
    and then :meth:`stop_reason` asks the runner to stop the run at the next check boundary;
    the results stay in memory for the verdict and the history line."""

    def __init__(self, report_dir: Path, host: str) -> None:
        self.report_dir, self.host = report_dir, host
        self.writer: JsonlWriter | None = None
        self.lost = ""  # why the folder cannot be written

    def open(self, meta: RunMeta) -> None:
        try:
            self.writer = _open_report(self.report_dir, meta)
        except OSError as e:  # the first check still runs (every rank is in it), then all stop
            self._lose(e, "its first check")

    def write(self, results: list[CheckResult]) -> None:
        for r in results:
            if self.lost or self.writer is None:
                return
            try:
                self.writer.append(r)  # whole lines only: a failed append is cut back
            except OSError as e:
                self._lose(e, "this check")

    def _lose(self, e: OSError, after: str) -> None:
        self.lost = _write_error(self.report_dir, e)
        print(
            f"error: rank 0 ({self.host}): {self.lost}: the run stops after {after} and is recorded in the "
            "history",
            file=sys.stderr,
            flush=True,
        )

    def stop_reason(self) -> str:
        return self.lost

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _write_error(report_dir: Path, e: OSError) -> str:
    """One line for a report folder rank 0 cannot write: the folder and its free space."""
    return (
        no_space_line(report_dir)
        if no_space(e)
        else f"{report_dir}: cannot write the report: {e.strerror or e}"
    )


def _run_id(args: argparse.Namespace) -> str:
    """``--run-id``, else ``$MLENV_RUN_ID`` (Slurm and hosts runs, whose folder is named by it),
    else a new one: the folder, results.json and the history carry the same id."""
    from mlenv.contract import new_run_id
    from mlenv.pod.launch import check_run_id

    given = args.run_id or os.environ.get("MLENV_RUN_ID", "").strip()
    return check_run_id(given) if given else new_run_id()


def _startup_report(
    args: argparse.Namespace,
    run_id: str,
    report_dir: Path,
    env: world.LaunchEnv,
    host: str,
    deadline: float,
    msg: str,
) -> None:
    """Rank 0 could not start the group: still leave a results.json saying why (ERROR)."""
    layout = {
        "nodes": env.nnodes or 1,
        "ranks": env.world_size,
        "backend": None,
        "device": None,
        "hosts": [host],
    }
    meta = RunMeta(
        run_id=run_id,
        started=now_iso(),
        profile=args.profile,
        checks=[],
        world=layout,
        baseline_spec=args.baseline,
        deadline_s=deadline,
        job=batch_job(),
    )
    try:
        doc = finalize(
            report_dir, meta, [], notes=[f"start-up failed on rank 0 ({host}): {msg}"], plots=False
        )
        print(console.verdict_block(doc, str(report_dir)), flush=True)
    except Exception as e:  # the report is best effort here; the exit code already says ERROR
        print(f"error: cannot write the report: {e}", file=sys.stderr)


def _destroy() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # leaving anyway
        pass


def _leave(code: int) -> NoReturn:
    """End the rank with ``code`` once its work is written, without the interpreter's teardown.

    Python's own teardown of a process that imported torch (freeing every module's objects
    and unloading the CUDA build's libraries) took about 1 s of CPU on the 2-core sandbox
    (0.17 s this way, docs/benchmarks.md), paid by every rank of every run after its last
    report line, and the launcher waits for the slowest. What teardown is for still runs:
    the ``atexit`` handlers (logging's flush, finalizers of temporary folders), then
    Python's and C's buffered streams (NCCL's debug file is C stdio) are flushed. Every
    report file was closed before this; the abort paths already leave with ``os._exit``."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)  # CPython's: what a normal exit calls
    if run_exitfuncs is not None:
        with contextlib.suppress(Exception):
            run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)  # every C stdio stream
    os._exit(code)


if __name__ == "__main__":
    _leave(main())
