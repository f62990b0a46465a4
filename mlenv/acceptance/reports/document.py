"""Assemble ``results.json`` (the contract) and write every report of a run."""

from __future__ import annotations

import errno
import os
import re
import socket
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlenv.acceptance.core import metrics, registry
from mlenv.acceptance.core.result import SCHEMA_VERSION, CheckResult
from mlenv.acceptance.judging import baselines, nodeverdicts
from mlenv.acceptance.judging.verdict import Judgement, judge
from mlenv.contract import RESULTS_JSON, RESULTS_JSONL, dumps_safe, loads_bounded, read_regular
from mlenv.errors import InfraError

RUN_META = "run.json"
JUNIT_XML = "junit.xml"
SUMMARY_MD = "summary.md"
PLOT_BUSBW = "busbw.png"
PLOT_TFLOPS = "tflops.png"
ALL_FILES = (RUN_META, RESULTS_JSON, RESULTS_JSONL, JUNIT_XML, SUMMARY_MD, PLOT_BUSBW, PLOT_TFLOPS)
# Below this much free space a folder cannot hold a run's report (results, JUnit, summary,
# plots: about 0.5 MiB for a 16-rank run): a run that left no report there met a full disk.
MIN_REPORT_FREE = 1 << 20


def no_space(e: BaseException) -> bool:
    """The error is a full disk (or a full quota)."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def free_space(folder: Path) -> int | None:
    """Bytes an unprivileged writer may still use under ``folder`` (None: unknown)."""
    for d in (folder, *folder.parents):
        try:
            st = os.statvfs(d)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def no_space_line(folder: Path) -> str:
    """``<folder>: no space left on device (12 KiB free)``: the one line a full disk gets."""
    from mlenv.acceptance.reports.units import human_bytes

    free = free_space(folder)
    return f"{folder}: no space left on device ({'free space unknown' if free is None else human_bytes(free) + ' free'})"


class ReportWriteError(InfraError):
    """The run was judged but its report could not be written (a full disk, an I/O error):
    ``doc`` is the document, marked ERROR with the reason, for the history line, which
    lives elsewhere and may still have room."""

    def __init__(
        self, folder: Path, doc: dict[str, Any], error: OSError, *, results_written: bool = False
    ) -> None:
        why = (
            no_space_line(folder)
            if no_space(error)
            else f"{folder}: cannot write the report: {error.strerror or error}"
        )
        super().__init__(why)
        self.folder, self.error, self.results_written = folder, error, results_written
        if results_written:  # results.json stands: its verdict is the run's; the rest is incomplete
            self.doc = {
                **doc,
                "reasons": [
                    *list(doc.get("reasons") or []),
                    f"note: junit.xml, summary.md or a plot not written: {why}",
                ],
            }
        else:
            self.doc = mark_unwritten(doc, why)


def mark_unwritten(doc: dict[str, Any], why: str) -> dict[str, Any]:
    """``doc`` as an ERROR whose first reason is that its report could not be written: what
    was measured stands in no file, so no verdict of the checks can be trusted to a reader."""
    out = dict(doc)
    if out.get("verdict") != "INTERRUPTED":
        out["verdict"] = "ERROR"
    out["reasons"] = [f"the report could not be written: {why}", *list(doc.get("reasons") or [])]
    return out


def wall_seconds(started: str, finished: str) -> float | None:
    """Seconds between two ISO timestamps (the run's wall time), None when unreadable."""
    try:
        return max(
            0.0,
            (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds(),
        )
    except (TypeError, ValueError):
        return None


def now_iso() -> str:
    """UTC timestamp, millisecond precision: the run's wall time (JUnit's suite ``time``) is
    ``finished - started``, and a run shorter than a second was 0.000 at second precision."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class RunMeta:
    """What rank 0 knows at start: written to ``run.json`` so a crash can be finalised."""

    run_id: str
    started: str
    profile: str
    checks: list[str]
    world: dict[str, Any]
    env: dict[str, Any] = field(default_factory=dict)
    baseline_spec: str | None = None
    deadline_s: float = 0.0
    job: dict[str, str] | None = (
        None  # the batch job the run is: {"scheduler": "slurm", "id": "41"}
    )

    def write(self, report_dir: Path) -> None:
        """Write ``run.json``."""
        write_json(report_dir / RUN_META, asdict(self))

    @classmethod
    def read(cls, report_dir: Path) -> RunMeta | None:
        """Read ``run.json``; None when absent or unreadable."""
        try:
            d = loads_bounded(read_regular(report_dir / RUN_META))
            return cls(**d)
        except (OSError, ValueError, TypeError):
            return None


def write_json(path: Path, doc: Any) -> None:
    """Write JSON atomically (temp file + rename), so a reader never sees half a file; a
    failed write (a full disk) removes its own temp file and raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(dumps_safe(doc, indent=2))  # NaN never reaches a reader: JSON has none
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # ours, half written
        raise


def build_document(
    meta: RunMeta, j: Judgement, baseline: baselines.Baseline | None, interrupted: str | None = None
) -> dict[str, Any]:
    """The results document of docs/contracts.md."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": meta.run_id,
        "started": meta.started,
        "finished": now_iso(),
        "verdict": j.verdict.value,
        "reasons": j.reasons,
        "profile": meta.profile,
        "baseline": f"{baseline.model} ({baseline.path})" if baseline else None,
        "world": meta.world,
        "env": meta.env,
        "expected": j.expected,
        "node_verdicts": nodeverdicts.build(j.results, j.findings, meta.world),
        "checks": [r.to_dict() for r in j.results],
        # what each check's metrics mean, as declared where they were measured
        "metric_meaning": metrics.table_to_json(registry.metric_table({r.name for r in j.results})),
    }
    if meta.job:
        doc["job"] = dict(meta.job)
    if interrupted:
        doc["interrupted"] = {"signal": interrupted}
    return doc


# Slurm names a job's cluster and submit host in its environment; kept only when they are
# host-like words (they reach history listings and file names).
_SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")


def batch_job(environ: dict[str, str] | None = None) -> dict[str, str] | None:
    """The Slurm job this process runs in (``SLURM_JOB_ID``), None outside one: results.json
    and the history line carry it beside the run id, with Slurm's ClusterName
    (``SLURM_CLUSTER_NAME``) as ``cluster`` and the control host that submitted it
    (``SLURM_SUBMIT_HOST``) as ``control_host``, where Slurm set them."""
    env = environ if environ is not None else os.environ
    job = env.get("SLURM_JOB_ID", "").strip()
    if not job.isdigit():
        return None
    out = {"scheduler": "slurm", "id": job}
    for key, var in (("cluster", "SLURM_CLUSTER_NAME"), ("control_host", "SLURM_SUBMIT_HOST")):
        value = env.get(var, "").strip()
        if _SLURM_NAME.match(value):
            out[key] = value
    return out


def control_host_job(job: str) -> dict[str, str]:
    """The job record the control host writes for a job whose rank 0 recorded nothing: the
    job id and this host, the one that submitted it."""
    out = {"scheduler": "slurm", "id": job}
    host = socket.gethostname()
    if _SLURM_NAME.match(host):
        out["control_host"] = host
    return out


def device_names(meta: RunMeta, results: list[CheckResult]) -> list[str]:
    """Names a baseline can be picked by: GPU models, else ``cpu``."""
    gpus = [str(g) for g in meta.env.get("gpus", [])]
    for r in results:
        if r.name == "environment":
            gpus += [str(g) for g in r.details.get("gpu_models", [])]
    if gpus:
        return sorted(set(gpus))
    return ["cpu"] if meta.world.get("device", "cpu") == "cpu" else []


def finalize(
    report_dir: Path,
    meta: RunMeta,
    results: list[CheckResult],
    notes: list[str] | None = None,
    baseline: baselines.Baseline | None = None,
    plots: bool = True,
    interrupted: str | None = None,
) -> dict[str, Any]:
    """Judge ``results`` and write results.json, junit.xml, summary.md and the plots.

    ``baseline`` None means: resolve ``meta.baseline_spec`` or pick by device.
    ``interrupted``: the signal (or ``scancel``) someone stopped the run with: verdict
    INTERRUPTED. Returns the results document.

    Raises:
        ReportWriteError: a file could not be written (a full disk); it carries the
            document, so the caller can still print the verdict and record the run.
    """
    j, doc, baseline = judged(meta, results, notes, baseline, interrupted)
    try:
        write_json(report_dir / RESULTS_JSON, doc)
    except OSError as e:  # the verdict is known; the caller still records it in the history
        raise ReportWriteError(report_dir, doc, e, results_written=False) from None
    try:
        _write_reports(report_dir, meta, j, doc, baseline, plots)
    except OSError as e:
        raise ReportWriteError(report_dir, doc, e, results_written=True) from None
    return doc


def judged(
    meta: RunMeta,
    results: list[CheckResult],
    notes: list[str] | None = None,
    baseline: baselines.Baseline | None = None,
    interrupted: str | None = None,
) -> tuple[Judgement, dict[str, Any], baselines.Baseline | None]:
    """The judgement, the results document and the baseline used, written nowhere (what
    :func:`finalize` writes; a run whose folder is full is still recorded from it)."""
    notes = list(notes or [])
    # the checks declare what their metrics mean; the host that writes a document for
    # ranks that could not (a control host) has not imported them yet
    registry.load(skip_missing_plugins=True)
    if baseline is None:
        baseline = baselines.resolve(meta.baseline_spec, device_names(meta, results))
    j = judge(results, baseline, notes=notes, interrupted=interrupted)
    if baseline is None:
        j.reasons.append("note: no baseline for this device; judged against peers only")
    return j, build_document(meta, j, baseline, interrupted), baseline


def _write_reports(
    report_dir: Path,
    meta: RunMeta,
    j: Judgement,
    doc: dict[str, Any],
    baseline: baselines.Baseline | None,
    plots: bool,
) -> None:
    """junit.xml, the plots and summary.md, after results.json."""
    from mlenv.acceptance.reports.junit import to_junit
    from mlenv.acceptance.reports.markdown import to_markdown

    hosts = meta.world.get("hosts") or []
    junit = to_junit(
        j.results,
        doc["verdict"],
        doc["reasons"],
        wall_s=wall_seconds(meta.started, doc["finished"]),
        timestamp=meta.started,
        hostname=str(hosts[0]) if hosts else socket.gethostname(),
        nodes=doc["node_verdicts"],
    )
    (report_dir / JUNIT_XML).write_text(junit, encoding="utf-8")
    made: list[str] = []
    if plots:
        from mlenv.acceptance.records.history import current_cluster
        from mlenv.acceptance.reports.plots import plot_busbw, plot_tflops

        try:
            cluster: str | None = current_cluster()
        except Exception:  # a plot title must never cost the report
            cluster = None
        titles = {"cluster": cluster, "run_id": meta.run_id, "world": meta.world}
        for fn, name in ((plot_busbw, PLOT_BUSBW), (plot_tflops, PLOT_TFLOPS)):
            try:
                if fn(j.results, report_dir / name, baseline, titles) is not None:
                    made.append(name)
            except Exception as e:  # a plot must never cost the report
                doc["reasons"].append(f"note: plot {name} not drawn: {type(e).__name__}: {e}")
    (report_dir / SUMMARY_MD).write_text(
        to_markdown(doc, j.results, made, baseline), encoding="utf-8"
    )
