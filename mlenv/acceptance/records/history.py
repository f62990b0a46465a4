"""Run history: one JSON line per acceptance run, per cluster (docs/acceptance.md, "History").

``<root>/<cluster>/history.jsonl``, where ``<root>`` is ``$MLENV_HISTORY_DIR`` or
``reports/`` under the working directory (``mlenv`` uses the repository root), and a
``--local`` run's cluster is ``local`` (a pod's is ``$MLENV_CLUSTER``). Appends take an
exclusive ``fcntl.flock`` and write the whole line in one ``O_APPEND`` write, so runs
finishing together neither lose nor tear lines. The run's own line is also written to
``record.json`` in its report folder, so a run folder names its cluster.

Stdlib only (pods and reviewers' machines read it without torch).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlenv.acceptance.core import metrics, registry
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.records.gpus import per_gpu
from mlenv.contract import (
    RESULTS_JSON,
    dumps_safe,
    is_dns_label,
    is_run_id,
    loads_bounded,
    read_regular,
)
from mlenv.errors import InputError

# 2: verdict may be INTERRUPTED. Version-1 lines are read as they are (nothing
# was removed or renamed).
HISTORY_SCHEMA = 2
HISTORY_FILE = "history.jsonl"
RECORD_FILE = "record.json"
LOCAL_CLUSTER = "local"
NOT_PRESENT = "not present"
# Scopes a headline figure is taken from: one GPU (rank) or all of them (world). Node,
# intra/inter-node group and link results are judged by the verdict, not trended.
_HEADLINE_SCOPES = ("rank", "world")


def check_cluster_name(name: str) -> str:
    """``name`` if it is a DNS-1123 label (as cluster names are), else InputError: it becomes a path."""
    if not is_dns_label(name):
        raise InputError(
            f"cluster {name!r}: expected a cluster name (a DNS-1123 label: lower-case letters, "
            "digits and '-', at most 63 characters)"
        )
    return name


def default_root(base: str | os.PathLike[str] | None = None) -> Path:
    """``$MLENV_HISTORY_DIR``, else ``<base or cwd>/reports``."""
    env = os.environ.get("MLENV_HISTORY_DIR", "").strip()
    if env:
        return Path(env)
    return Path(base if base is not None else os.getcwd()) / "reports"


def current_cluster(environ: dict[str, str] | None = None) -> str:
    """The cluster a run in this process belongs to: ``$MLENV_CLUSTER`` (pods, Slurm jobs), else ``local``."""
    name = (environ if environ is not None else os.environ).get("MLENV_CLUSTER", "").strip()
    if is_dns_label(name):
        return name
    return LOCAL_CLUSTER


def history_path(root: Path, cluster: str) -> Path:
    """``<root>/<cluster>/history.jsonl`` (cluster checked: it is a path component)."""
    return root / check_cluster_name(cluster) / HISTORY_FILE


# -- what a line holds ---------------------------------------------------------------


def is_headline(check: str, metric: str, scope: str, table: metrics.Table) -> bool:
    """A figure worth a trend: one its check declares ``trend`` (the name rule for a check
    that declares nothing), per GPU (median over ranks) or for the world."""
    return scope in _HEADLINE_SCOPES and metrics.meaning(table, check, metric).trend


def headline(
    results: list[CheckResult], table: metrics.Table | None = None
) -> dict[str, dict[str, float]]:
    """``{check: {metric: median}}`` over the PASS/WARN/FAIL results of rank or world scope,
    on the metrics ``table`` declares trended (None: the registered checks' declarations)."""
    table = registry.metric_table() if table is None else table
    vals: dict[tuple[str, str], list[float]] = {}
    for r in results:
        if r.status in (Status.ERROR, Status.SKIP):
            continue
        for m, v in r.metrics.items():
            if is_headline(r.name, m, r.scope, table):
                vals.setdefault((r.name, m), []).append(float(v))
    out: dict[str, dict[str, float]] = {}
    for (check, metric), xs in sorted(vals.items()):
        out.setdefault(check, {})[metric] = round(statistics.median(xs), 6)
    return out


def hca_firmware(ibv_devinfo: object) -> dict[str, str]:
    """``{hca_id: fw_ver}`` from ``ibv_devinfo`` output."""
    out: dict[str, str] = {}
    hca = None
    for line in str(ibv_devinfo or "").splitlines():
        key, _, val = line.strip().partition(":")
        if key == "hca_id":
            hca = val.strip()
        elif key == "fw_ver" and hca:
            out[hca] = val.strip()
    return out


def _text(v: object) -> str:
    if v is None or v == "" or v == [] or v == {}:
        return NOT_PRESENT
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {x}" for k, x in sorted(v.items()))
    return str(v)


VERSION_KEYS = (
    "driver",
    "cuda",
    "nccl",
    "torch",
    "deepspeed",
    "python",
    "gpu_models",
    "vbios",
    "hca_firmware",
)


def node_versions(
    results: list[CheckResult], doc: dict[str, Any] | None = None
) -> dict[str, dict[str, str]]:
    """Per node (host): the versions its ``environment`` results recorded, ``not present`` where none.

    Node-wide tools (driver, ibv_devinfo) run on one rank per node; the other ranks' values
    fill in what it lacks, and ranks of one node that disagree are all listed (``a | b``).
    A run without the environment check has rank 0's versions only (``doc['env']``).
    """
    seen: dict[str, dict[str, list[str]]] = {}
    envs = [r for r in results if r.name == "environment"]
    if not envs and doc is not None and isinstance(doc.get("env"), dict):
        world = doc.get("world") if isinstance(doc.get("world"), dict) else {}
        hosts = (world or {}).get("hosts") or ["rank 0"]
        envs = [
            CheckResult(
                "environment",
                Status.PASS,
                "rank",
                str(hosts[0]),
                0,
                details={**doc["env"], "gpu_models": doc["env"].get("gpus") or []},
            )
        ]
    for r in sorted(envs, key=lambda r: r.rank or 0):
        d = r.details if isinstance(r.details, dict) else {}
        node = str(r.node or d.get("host") or f"rank {r.rank}")
        vals = {k: d.get(k) for k in VERSION_KEYS}
        vals["gpu_models"] = sorted({str(g) for g in d.get("gpu_models") or []})
        vals["vbios"] = d.get("vbios") or d.get("vbios_version")
        vals["hca_firmware"] = hca_firmware(d.get("ibv_devinfo"))
        slot = seen.setdefault(node, {k: [] for k in VERSION_KEYS})
        for k, v in vals.items():
            t = _text(v)
            if t != NOT_PRESENT and t not in slot[k]:
                slot[k].append(t)
    return {
        node: {k: " | ".join(v) if v else NOT_PRESENT for k, v in slot.items()}
        for node, slot in sorted(seen.items())
    }


def make_record(
    doc: dict[str, Any],
    results: list[CheckResult],
    cluster: str,
    report_dir: Path,
    config_sha256: str | None = None,
    origin: str | None = None,
) -> dict[str, Any]:
    """The history line of a run from its results document (the contract in docs/acceptance.md).
    ``origin`` None: this process's (``cluster`` when ``MLENV_CLUSTER`` is set)."""
    world = doc.get("world") or {}
    job = doc.get("job")
    return {
        "schema_version": HISTORY_SCHEMA,
        "run_id": doc.get("run_id"),
        "cluster": check_cluster_name(cluster),
        "started": doc.get("started"),
        "finished": doc.get("finished"),
        "verdict": doc.get("verdict"),
        "profile": doc.get("profile"),
        "baseline": doc.get("baseline"),
        "config_sha256": config_sha256,
        # where the suite ran: "cluster" (MLENV_CLUSTER set: a pod, a Slurm job) or "local" (this machine)
        "origin": origin or ("cluster" if os.environ.get("MLENV_CLUSTER", "").strip() else "local"),
        # the batch job the run was (Slurm), beside the run id
        "job": {
            "scheduler": str(job.get("scheduler")),
            "id": str(job.get("id")),
            **{k: str(job[k]) for k in ("cluster", "control_host") if job.get(k)},
        }
        if isinstance(job, dict)
        else None,
        "world": {k: world.get(k) for k in ("nodes", "ranks", "backend", "device")},
        "checks": sorted({r.name for r in results}),
        "versions": node_versions(results, doc),
        "metrics": headline(results, metrics.table_from_json(doc.get("metric_meaning"))),
        # per GPU, keyed by UUID (records/gpus.py): absent when no check named a GPU
        **({"gpus": g} if (g := per_gpu(results)) else {}),
        "report_dir": str(report_dir.resolve()),
    }


# -- the file --------------------------------------------------------------------------


def encode(record: dict[str, Any]) -> bytes:
    """One line: compact JSON, ASCII only (a newline in a value is escaped, never a line break)."""
    return (dumps_safe(record, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


def append(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one line under an exclusive lock; fsynced before returning.

    A line cut short by an earlier crash is closed with a newline first, so it stays one
    unreadable line and never swallows this one.
    """
    data = encode(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            view = memoryview(data)
            try:
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                os.fsync(fd)
            except OSError:  # a full disk part way: no torn line left behind (we hold the lock)
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every readable line of a history file (file order) and at most one note for the
    lines it skipped (how many, and which).

    One bad line (a 4000-digit number, a nesting bomb, a record of the wrong shape) is
    skipped and counted, never the end of the listing. The file itself must be a regular
    file: a link, a FIFO or a device is an InputError in one line (a FIFO would hang the
    reader, a link would read whatever it points at).
    """
    records: list[dict[str, Any]] = []
    try:
        text = read_regular(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return records, []
    except OSError as e:
        raise InputError(f"{path}: cannot read history: {e.strerror or e}") from None
    bad: list[int] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = loads_bounded(line)
        except ValueError:
            rec = None
        if not _readable_record(rec):
            bad.append(i)
            continue
        records.append(rec)
    notes: list[str] = []
    if bad:
        which = ", ".join(str(i) for i in bad[:5]) + (", …" if len(bad) > 5 else "")
        notes.append(f"{path.name}: {len(bad)} unreadable line(s) skipped (line {which})")
    return records, notes


_TEXT_KEYS = ("cluster", "started", "finished", "verdict", "profile", "report_dir")


def _readable_record(rec: object) -> bool:
    """A history line the listings can show: a run id, text where text is expected, and
    numbers (or null) as its metrics."""
    if not isinstance(rec, dict) or not isinstance(rec.get("run_id"), str):
        return False
    if any(not isinstance(rec.get(k), str | None) for k in _TEXT_KEYS):
        return False
    for key in ("world", "versions", "metrics"):
        if not isinstance(rec.get(key), dict | None):
            return False
    metrics = rec.get("metrics") or {}
    return all(
        isinstance(m, dict)
        and all(isinstance(v, int | float | None) and not isinstance(v, bool) for v in m.values())
        for m in metrics.values()
    )


def newest_first(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sorted by start time, newest first (file order breaks ties: later lines are newer)."""
    indexed = list(enumerate(records))
    indexed.sort(key=lambda t: (str(t[1].get("started") or ""), t[0]), reverse=True)
    return [r for _, r in indexed]


def record_run(
    report_dir: Path,
    doc: dict[str, Any],
    results: list[CheckResult],
    cluster: str,
    root: Path,
    config_sha256: str | None = None,
    origin: str | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Append this run to its cluster's history and write ``record.json``; returns (history file, line)."""
    rec = make_record(doc, results, cluster, report_dir, config_sha256, origin)
    path = history_path(root, cluster)
    append(path, rec)
    try:
        (report_dir / RECORD_FILE).write_bytes(encode(rec))
    except OSError:  # a full report folder: the history line above is what counts
        with contextlib.suppress(OSError):
            (report_dir / RECORD_FILE).unlink(missing_ok=True)  # ours, and maybe half written
    write_metrics(report_dir, doc, cluster)
    return path, rec


def write_metrics(report_dir: Path, doc: dict[str, Any], cluster: str) -> str | None:
    """The run's metrics.prom beside record.json (records/prom.py); best effort like the
    record: returns why it was not written (an image without prometheus_client, a full
    disk), None when it was. A stale one from an earlier run in this folder goes first."""
    from mlenv.acceptance.records import prom

    with contextlib.suppress(OSError):
        (report_dir / prom.METRICS_FILE).unlink(missing_ok=True)
    try:
        prom.write(report_dir, doc, cluster)
    except (ImportError, OSError, ValueError) as e:
        return f"{prom.METRICS_FILE} not written: {type(e).__name__}: {e}"
    return None


def _brief(rec: dict[str, Any]) -> str:
    return (
        f"{rec.get('cluster')}: {rec.get('verdict')}, started {rec.get('started')}, "
        f"finished {rec.get('finished')}, {rec.get('report_dir')}"
    )


def distinct(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with each run once: the same run recorded twice with the same content (a
    retried append, a copied history) is one record; two different records with one run id
    are an InputError (exit 2) listing both, since either could be the truth."""
    seen: dict[str, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for rec in records:
        rid = str(rec.get("run_id"))
        first = seen.get(rid)
        if first is None:
            seen[rid] = rec
            out.append(rec)
        elif first != rec:
            raise InputError(
                f"run {rid} is recorded twice with different content: [{_brief(first)}] and "
                f"[{_brief(rec)}]; remove the wrong line from the history"
            )
    return out


def find_run(root: Path, run_id: str) -> dict[str, Any] | None:
    """The history line of ``run_id`` in any cluster's history under ``root`` (InputError when
    two different lines claim it, see :func:`distinct`)."""
    if not root.is_dir():
        return None
    hits = [
        rec
        for f in sorted(root.glob(f"*/{HISTORY_FILE}"))
        for rec in read(f)[0]
        if rec.get("run_id") == run_id
    ]
    hits = distinct(hits)
    return hits[0] if hits else None


def clear_stale(report_dir: Path) -> None:
    """Remove an earlier run's record.json and trend PNGs from a report folder being reused."""
    (report_dir / RECORD_FILE).unlink(missing_ok=True)
    for p in report_dir.glob("trend-*.png"):
        p.unlink(missing_ok=True)


def after_run(
    report_dir: Path,
    doc: dict[str, Any],
    root: Path,
    cluster: str | None = None,
    plots: bool = True,
) -> list[str]:
    """Record a finished run: history line, record.json, trend PNGs linked from summary.md.

    Best effort: returns lines to print (where the history went, or why it could not be
    written); a history problem never changes the verdict or the exit code.
    """
    name = cluster or current_cluster()
    try:
        path = history_path(root, name)
        if str(doc.get("run_id")) in known_run_ids(root, name):
            # one line per run id: a copy of a run's folder finalised again is the same run
            return [f"history: run {doc.get('run_id')} is already in {path}: not added twice"]
        results = [CheckResult.from_dict(c) for c in doc.get("checks", [])]
        path, rec = record_run(report_dir, doc, results, name, root)
    except (OSError, ValueError, KeyError, TypeError, InputError) as e:
        return [f"note: run not added to the history: {e}"]
    out = [f"history: run {rec['run_id']} appended to {path}"]
    if not plots:
        return out
    try:
        from mlenv.acceptance.records.trend import TRENDS_HEADING, plot_trends, summary_section

        records, _ = read(path)
        made = plot_trends(records, rec, report_dir, name)
        summary = report_dir / "summary.md"
        if summary.is_file():
            text = summary.read_text(encoding="utf-8")
            text = (
                text.split(TRENDS_HEADING, 1)[0].rstrip("\n") + "\n"
            )  # once, also when called again
            summary.write_text(
                text + summary_section(name, path, made, len(records)), encoding="utf-8"
            )
    except Exception as e:  # a plot must never cost the run its report
        out.append(f"note: trend plots not drawn: {type(e).__name__}: {e}")
    return out


# -- runs recorded elsewhere ----------------------------------------------------


def known_run_ids(root: Path, cluster: str) -> set[str]:
    """The run ids ``<root>/<cluster>/history.jsonl`` already holds."""
    return {str(r["run_id"]) for r in read(history_path(root, cluster))[0]}


def _check_import(cluster: str, rec: object) -> str:
    """The run id of a record that may join ``cluster``'s history; InputError otherwise."""
    if not isinstance(rec, dict):
        raise InputError(f"cluster {cluster}: a record to import is not a JSON object")
    rid = rec.get("run_id")
    if not is_run_id(rid):  # it names the run's folder under the history root
        raise InputError(
            f"cluster {cluster}: record run id {str(rid)[:80]!r} is not a run id (YYYYMMDD-HHMMSS-xxxxxx)"
        )
    if rec.get("cluster") != cluster:
        raise InputError(
            f"run {rid}: its record names cluster {str(rec.get('cluster'))[:80]!r}, not {cluster!r}"
        )
    return str(rid)


def import_records(
    cluster: str, records: Iterable[tuple[dict[str, Any], Path | None]], root: Path | None = None
) -> tuple[list[str], list[str]]:
    """Add runs recorded elsewhere (a pod's volume, Slurm's ``shared_dir``) to ``cluster``'s
    history under ``root`` (default :func:`default_root`): one record per run id.

    ``records``: (history line as the run wrote it, the run's report folder or None). Each
    record must name ``cluster`` and carry a run id (all are checked before anything is
    written: InputError, exit 2). A run id the history already has, or that came earlier
    in ``records``, is skipped. For each other run the folder is copied to
    ``<root>/<cluster>/<run-id>/`` (replacing what an interrupted import left there; None:
    nothing to copy), the record's ``report_dir`` becomes that copy (``mlenv compare``
    reads the per-rank figures there), its ``record.json`` is rewritten, and the line is
    appended. Returns (added run ids, skipped run ids), in the order given.
    """
    import shutil

    base = root if root is not None else default_root()
    check_cluster_name(cluster)
    batch = [(dict(rec), folder, _check_import(cluster, rec)) for rec, folder in records]
    seen = known_run_ids(base, cluster)
    added: list[str] = []
    skipped: list[str] = []
    for rec, folder, rid in batch:
        if rid in seen:
            skipped.append(rid)
            continue
        seen.add(rid)
        dest = base / cluster / rid
        if folder is not None and Path(folder).resolve() != dest.resolve():
            tmp = dest.with_name(f".{rid}.importing")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(folder, tmp, symlinks=True)
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
        if folder is not None:
            rec["report_dir"] = str(dest.resolve())
            (dest / RECORD_FILE).write_bytes(encode(rec))
        append(history_path(base, cluster), rec)
        added.append(rid)
    return added, skipped


def record_from_folder(folder: Path, cluster: str) -> dict[str, Any] | None:
    """The history line of a finished run folder that holds ``results.json`` but no
    ``record.json`` (its rank 0 could not write the history): made here, as rank 0 would
    have (origin ``cluster``). None when the results are unreadable."""
    try:
        doc = loads_bounded(read_regular(folder / RESULTS_JSON))
        results = [CheckResult.from_dict(c) for c in doc.get("checks", [])]
        return make_record(doc, results, cluster, folder, origin="cluster")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, InputError):
        return None
