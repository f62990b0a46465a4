"""Assemble ``results.json`` (the contract) and write every report of a run."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlenv.acceptance.core.result import SCHEMA_VERSION, CheckResult
from mlenv.acceptance.judging import baselines, nodeverdicts
from mlenv.acceptance.judging.verdict import Judgement, judge
from mlenv.contract import RESULTS_JSON, RESULTS_JSONL

RUN_META = "run.json"
JUNIT_XML = "junit.xml"
SUMMARY_MD = "summary.md"
PLOT_BUSBW = "busbw.png"
PLOT_TFLOPS = "tflops.png"
ALL_FILES = (RUN_META, RESULTS_JSON, RESULTS_JSONL, JUNIT_XML, SUMMARY_MD, PLOT_BUSBW, PLOT_TFLOPS)


def wall_seconds(started: str, finished: str) -> float | None:
    """Seconds between two ISO timestamps (the run's wall time), None when unreadable."""
    try:
        return max(0.0, (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds())
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

    def write(self, report_dir: Path) -> None:
        """Write ``run.json``."""
        write_json(report_dir / RUN_META, asdict(self))

    @classmethod
    def read(cls, report_dir: Path) -> RunMeta | None:
        """Read ``run.json``; None when absent or unreadable."""
        try:
            d = json.loads((report_dir / RUN_META).read_text(encoding="utf-8"))
            return cls(**d)
        except (OSError, ValueError, TypeError):
            return None


def write_json(path: Path, doc: Any) -> None:
    """Write JSON atomically (temp file + rename), so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def build_document(meta: RunMeta, j: Judgement, baseline: baselines.Baseline | None,
                   interrupted: str | None = None) -> dict[str, Any]:
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
    }
    if interrupted:
        doc["interrupted"] = {"signal": interrupted}
    return doc


def device_names(meta: RunMeta, results: list[CheckResult]) -> list[str]:
    """Names a baseline can be picked by: GPU models, else ``cpu``."""
    gpus = [str(g) for g in meta.env.get("gpus", [])]
    for r in results:
        if r.name == "environment":
            gpus += [str(g) for g in r.details.get("gpu_models", [])]
    if gpus:
        return sorted(set(gpus))
    return ["cpu"] if meta.world.get("device", "cpu") == "cpu" else []


def finalize(report_dir: Path, meta: RunMeta, results: list[CheckResult], notes: list[str] | None = None,
             baseline: baselines.Baseline | None = None, plots: bool = True,
             interrupted: str | None = None) -> dict[str, Any]:
    """Judge ``results`` and write results.json, junit.xml, summary.md and the plots.

    ``baseline`` None means: resolve ``meta.baseline_spec`` or pick by device.
    ``interrupted``: the signal (or ``scancel``) someone stopped the run with: verdict
    INTERRUPTED. Returns the results document.
    """
    from mlenv.acceptance.reports.junit import to_junit
    from mlenv.acceptance.reports.markdown import to_markdown

    notes = list(notes or [])
    if baseline is None:
        baseline = baselines.resolve(meta.baseline_spec, device_names(meta, results))
    j = judge(results, baseline, notes=notes, interrupted=interrupted)
    if baseline is None:
        j.reasons.append("note: no baseline for this device; judged against peers only")
    doc = build_document(meta, j, baseline, interrupted)
    write_json(report_dir / RESULTS_JSON, doc)
    hosts = meta.world.get("hosts") or []
    junit = to_junit(j.results, doc["verdict"], doc["reasons"], wall_s=wall_seconds(meta.started, doc["finished"]),
                     timestamp=meta.started, hostname=str(hosts[0]) if hosts else socket.gethostname(),
                     nodes=doc["node_verdicts"])
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
    (report_dir / SUMMARY_MD).write_text(to_markdown(doc, j.results, made, baseline), encoding="utf-8")
    return doc
