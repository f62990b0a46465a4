"""``metrics.prom``: a run's verdict and figures where a fleet looks, in Prometheus's text format.

Written with ``prometheus_client`` into every recorded run's folder (beside
``record.json``), read back by node_exporter's textfile collector
(``--collector.textfile.directory``; ``mlenv metrics RUN --textfile DIR`` puts it there
under a name of its own, atomically) or sent to a Pushgateway (``mlenv metrics RUN --push
URL``; the scheduled re-check pushes when ``acceptance.metrics.push`` is set). Every series
is labelled by ``cluster`` and ``run_id``; per node by ``node``; per GPU by ``gpu_uuid``
when a check named the GPU (gpu.health, memory.h2d), so a GPU moved to another index or
node is still the same series.

The series (:data:`METRICS`, which the shipped Grafana dashboard is checked against):
the run's verdict as a state set, each node's verdict and action, each result's status
and each measured figure with the bar that judged it and which table that was (a
baseline, or the per-SKU floors).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from mlenv.acceptance.core.result import CheckResult
from mlenv.acceptance.records import gpus

METRICS_FILE = "metrics.prom"
VERDICTS = ("PASS", "FAIL", "ERROR", "INTERRUPTED")
NODE_STATUSES = ("PASS", "WARN", "FAIL", "UNKNOWN")
RESULT_STATUSES = ("PASS", "WARN", "FAIL", "ERROR", "SKIP")

# name → (help, label names). The names the dashboard may use; nothing else is written.
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "mlenv_acceptance_run_verdict": (
        "The run's verdict: 1 for the state it has, 0 for the others",
        ("cluster", "run_id", "verdict"),
    ),
    "mlenv_acceptance_run_finished_timestamp_seconds": (
        "When the run finished (Unix seconds)",
        ("cluster", "run_id"),
    ),
    "mlenv_acceptance_node_verdict": (
        "Each node's verdict: 1 for the state it has, 0 for the others",
        ("cluster", "run_id", "node", "status"),
    ),
    "mlenv_acceptance_node_action": (
        "The action named for the node (1), and whether it should leave the scheduler",
        ("cluster", "run_id", "node", "action", "quarantine"),
    ),
    "mlenv_acceptance_result_status": (
        "Each check result's status: 1 for the state it has, 0 for the others",
        ("cluster", "run_id", "check", "scope", "node", "rank", "gpu_uuid", "port", "status"),
    ),
    "mlenv_acceptance_figure": (
        "A measured figure of a check result",
        ("cluster", "run_id", "check", "metric", "scope", "node", "rank", "gpu_uuid", "port"),
    ),
    "mlenv_acceptance_bar": (
        "The bar a figure was judged against, its operator and the table it came from",
        (
            "cluster",
            "run_id",
            "check",
            "metric",
            "scope",
            "node",
            "rank",
            "gpu_uuid",
            "port",
            "op",
            "judged_by",
        ),
    ),
}


def _timestamp(text: Any) -> float | None:
    import datetime

    try:
        return datetime.datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _results(checks: list[dict[str, Any]]) -> list[CheckResult]:
    """The entries that read as results (a malformed one is still exported, without a UUID
    borrowed from its rank's other results)."""
    out = []
    for c in checks:
        try:
            out.append(CheckResult.from_dict(c))
        except (KeyError, ValueError, TypeError):
            continue
    return out


def registry_for(doc: dict[str, Any], cluster: str) -> Any:
    """A ``prometheus_client`` registry holding ``doc``'s (results.json's) series."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry(auto_describe=False)
    g = {
        name: Gauge(name, help_, labelnames=labels, registry=reg)
        for name, (help_, labels) in METRICS.items()
    }
    run = {"cluster": cluster, "run_id": str(doc.get("run_id", ""))}
    verdict = str(doc.get("verdict", ""))
    for v in VERDICTS:
        g["mlenv_acceptance_run_verdict"].labels(**run, verdict=v).set(1.0 if v == verdict else 0.0)
    ts = _timestamp(doc.get("finished"))
    if ts is not None:
        g["mlenv_acceptance_run_finished_timestamp_seconds"].labels(**run).set(ts)
    nv = doc.get("node_verdicts")
    for n in nv.get("nodes", []) if isinstance(nv, dict) else []:
        if not isinstance(n, dict):
            continue
        node = str(n.get("node", ""))
        st = str(n.get("status", ""))
        for s in NODE_STATUSES:
            g["mlenv_acceptance_node_verdict"].labels(**run, node=node, status=s).set(
                1.0 if s == st else 0.0
            )
        act = _dict(n.get("action"))
        g["mlenv_acceptance_node_action"].labels(
            **run,
            node=node,
            action=str(act.get("id", "")),
            quarantine="true" if act.get("quarantine") else "false",
        ).set(1.0)
    checks = [c for c in doc.get("checks", []) if isinstance(c, dict)]
    known = gpus.uuid_map(_results(checks))
    for c in checks:
        d = _dict(c.get("details"))
        node = str(c.get("node") or "")
        rank = c.get("rank")
        where = {
            "check": str(c.get("name", "")),
            "scope": str(c.get("scope", "")),
            "node": node,
            "rank": "" if rank is None else str(rank),
            "gpu_uuid": str(
                d.get("gpu_uuid") or (known.get((node, rank), "") if isinstance(rank, int) else "")
            ),
            "port": str(d.get("port") or ""),
        }
        st = str(c.get("status", ""))
        for s in RESULT_STATUSES:
            g["mlenv_acceptance_result_status"].labels(**run, **where, status=s).set(
                1.0 if s == st else 0.0
            )
        metrics = _dict(c.get("metrics"))
        judged = _dict(d.get("judged_by"))
        for metric, value in metrics.items():
            if not isinstance(value, int | float):
                continue
            g["mlenv_acceptance_figure"].labels(**run, **where, metric=str(metric)).set(
                float(value)
            )
            for bar in judged.get(metric, []) if isinstance(judged.get(metric), list) else []:
                if isinstance(bar, dict) and isinstance(bar.get("value"), int | float):
                    g["mlenv_acceptance_bar"].labels(
                        **run,
                        **where,
                        metric=str(metric),
                        op=str(bar.get("op", "")),
                        judged_by=str(bar.get("by", "")),
                    ).set(float(bar["value"]))
    return reg


def render(doc: dict[str, Any], cluster: str) -> bytes:
    """``doc``'s series in the Prometheus text exposition format (what node_exporter's
    textfile collector and a Pushgateway read)."""
    from prometheus_client import generate_latest

    return bytes(generate_latest(registry_for(doc, cluster)))


def write_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename,
    so a collector scraping the folder never reads half a file (node_exporter's advice)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # the collector runs as another user
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write(report_dir: Path, doc: dict[str, Any], cluster: str) -> Path:
    """Write the run's ``metrics.prom`` into its folder; returns its path."""
    return write_atomic(report_dir / METRICS_FILE, render(doc, cluster))


def textfile_name(cluster: str) -> str:
    """The file a cluster's latest run takes in a textfile directory: one per cluster, so
    each run replaces the last (a fleet's dashboards show the latest verdict; the history
    keeps the others). Only ``[A-Za-z0-9_.-]`` reach the file name."""
    safe = "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in cluster) or "cluster"
    return f"mlenv_acceptance_{safe}.prom"


def push(url: str, doc: dict[str, Any], cluster: str, timeout_s: float = 30.0) -> str:
    """PUT the run's series to a Pushgateway at ``url`` (job ``mlenv_acceptance``, grouped by
    cluster: each push replaces the cluster's previous run). Returns the grouping path.

    Raises OSError (URLError) when the gateway cannot be reached or refuses the push.
    """
    from prometheus_client import push_to_gateway

    push_to_gateway(
        url,
        job="mlenv_acceptance",
        registry=registry_for(doc, cluster),
        grouping_key={"cluster": cluster},
        timeout=timeout_s,
    )
    return f"/metrics/job/mlenv_acceptance/cluster/{cluster}"
