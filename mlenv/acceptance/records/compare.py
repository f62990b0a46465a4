"""Compare two acceptance runs: per check, per place (rank/GPU, node, group), per metric.

A metric whose better direction is known (declared by its check, in the run's
``metric_meaning``; the name rule for a document from before: rates up, median times
down) is a **regression** when run B is worse than run A by more than its
tolerance: 10 % unless the baseline's ``tolerances:`` names the metric (a check glob and
a metric, with a source). Both runs may be far above the absolute bar: a GPU that lost
15 % after a driver update is still news. A check whose status got worse (PASS/WARN to
FAIL/ERROR) is a regression too. Per-rank figures are compared rank by rank and named
``rank 3 (host, GPU 3)``, so the one GPU that lost ground is named, not averaged away.

A run is a report folder (``results.json``), a ``results.json`` file, a sign-off bundle
(``*.tar.gz``), or a run id from the history. Stdlib only.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlenv.acceptance.core import metrics
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.records import gpus
from mlenv.acceptance.records.history import RECORD_FILE, find_run
from mlenv.contract import loads_bounded, read_regular, shown
from mlenv.errors import InputError

DEFAULT_TOLERANCE = 0.10
_BAD = (Status.FAIL, Status.ERROR)
_GOOD = (Status.PASS, Status.WARN)


@dataclass
class Run:
    """One side of a comparison."""

    ref: str  # what the user gave
    doc: dict[str, Any]
    results: list[CheckResult]
    cluster: str | None = None

    @property
    def run_id(self) -> str:
        """The run id from results.json."""
        return str(self.doc.get("run_id") or "?")

    @property
    def meaning(self) -> dict[str, dict[str, metrics.Metric]]:
        """What its checks declared their metrics to mean (``metric_meaning``; a document
        from before declarations has none, and its figures are judged by the name rule)."""
        return metrics.table_from_json(self.doc.get("metric_meaning"))

    def label(self) -> str:
        """``<run id> (<verdict>, <started>)``."""
        return f"{self.run_id} ({self.doc.get('verdict')}, {self.doc.get('started')})"


@dataclass
class Row:
    """One compared figure."""

    check: str
    where: str
    metric: str
    a: float | None
    b: float | None
    delta_frac: float | None  # (b - a) / a
    tolerance: float | None
    tolerance_source: str
    state: str  # ok | REGRESSION | improved | not judged | only in A | only in B
    a_status: str = ""  # the two statuses, on a "status" row
    b_status: str = ""

    def reason(self) -> str:
        """One line for a regression."""
        if self.metric == "status":
            return f"{self.check} {self.where}: status {self.a_text()} → {self.b_text()}"
        worse = abs(self.delta_frac or 0.0)
        return (
            f"{self.check} {self.where}: {self.metric} {self.a_text()} → {self.b_text()} "
            f"({100 * worse:.0f}% worse; tolerance {100 * (self.tolerance or 0):g}%, {self.tolerance_source})"
        )

    def a_text(self) -> str:
        """Value of run A for tables."""
        return self.a_status if self.metric == "status" else _num(self.a)

    def b_text(self) -> str:
        """Value of run B for tables."""
        return self.b_status if self.metric == "status" else _num(self.b)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


# -- loading a run -----------------------------------------------------------------------


def _doc_from_bytes(data: bytes, where: str) -> dict[str, Any]:
    try:
        doc = loads_bounded(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{where}: not a results document: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list):
        raise InputError(f"{where}: not a results document (no 'checks' list)")
    return doc


def _from_bundle(path: Path) -> tuple[dict[str, Any], str | None]:
    from mlenv.acceptance.records.bundle import BundleError, read_member

    try:
        data = read_member(path, "run/results.json")
        rec = read_member(path, f"run/{RECORD_FILE}", missing_ok=True)
    except BundleError as e:
        raise InputError(f"{path}: {e}") from None
    cluster = None
    if rec:
        try:
            cluster = loads_bounded(rec).get("cluster")
        except ValueError:
            cluster = None
    return _doc_from_bytes(data or b"", f"{path}:run/results.json"), cluster


def load_run(ref: str, history_root: Path | None = None, asked: str | None = None) -> Run:
    """The run ``ref`` names: a report folder, a results.json, a bundle, or a run id in the history
    (``asked``: the run id the folder must hold, when ``ref`` came from the history)."""
    from mlenv.acceptance.records.rundir import check_folder

    p = Path(ref)
    cluster: str | None = None
    if p.is_dir():
        p = p / "results.json"
        if not p.is_file():
            raise InputError(f"{ref}: no results.json in this folder (not a report folder)")
    if p.is_file() and p.name.endswith((".tar.gz", ".tgz")):
        doc, cluster = _from_bundle(p)
    elif p.is_file():
        try:
            doc = _doc_from_bytes(read_regular(p), str(p))
        except OSError as e:
            raise InputError(f"{p}: cannot read: {e.strerror or e}") from None
        check_folder(p.parent, doc, asked)
        rec_path = p.parent / RECORD_FILE
        if rec_path.is_file():
            try:
                rec = loads_bounded(read_regular(rec_path))
                if rec.get("run_id") == doc.get("run_id"):
                    cluster = rec.get("cluster")
            except (OSError, ValueError, AttributeError):
                cluster = None
    else:
        rec = find_run(history_root, ref) if history_root is not None else None
        if rec is None:
            raise InputError(
                f"{ref}: neither a report folder, a results.json, a bundle nor a run id in the "
                f"history ({history_root})"
            )
        return load_run(str(Path(str(rec.get("report_dir"))) / "results.json"), None, asked=ref)
    try:
        results = [CheckResult.from_dict(c) for c in doc["checks"]]
    except (KeyError, ValueError, TypeError) as e:
        raise InputError(
            f"{ref}: malformed check entry in results.json ({type(e).__name__}: {e})"
        ) from None
    return Run(ref=ref, doc=doc, results=results, cluster=cluster)


def refuse_interrupted(*runs: Run) -> None:
    """InputError (exit 2) when a run was INTERRUPTED: its figures may be cut short, so a
    "regression" or "no regression" against it would say nothing (``--include-interrupted``
    compares anyway)."""
    for run in runs:
        if run.doc.get("verdict") == "INTERRUPTED":
            raise InputError(
                f"{run.ref}: run {run.run_id} was INTERRUPTED (someone stopped it): its figures may be "
                "cut short; pass --include-interrupted to compare it anyway"
            )


def baseline_of(run: Run) -> baselines.Baseline | None:
    """The baseline run B was judged with (``results.json``'s ``baseline``: ``MODEL (PATH)``), if still there."""
    text = str(run.doc.get("baseline") or "")
    if not text.endswith(")") or " (" not in text:
        return None
    model, _, path = text[:-1].partition(" (")
    try:
        if Path(path).is_file():
            return baselines.load(path)
        return baselines.find_for_device([model])
    except InputError:
        return None


# -- comparing ---------------------------------------------------------------------------


def tolerance_for(
    check: str, metric: str, base: baselines.Baseline | None, default: float = DEFAULT_TOLERANCE
) -> tuple[float, str]:
    """(tolerance, where it comes from) for one metric."""
    if base is not None:
        for t in base.tolerances:
            if fnmatch.fnmatchcase(check, t.check) and fnmatch.fnmatchcase(metric, t.metric):
                return t.value, f"baseline {base.model}: {t.source}"
    return default, "default"


def _where(r: CheckResult, run: Run) -> str:
    """``rank 1 (host)`` / ``rank 1 (host, GPU 1)``, ``node host``, ``world``, ``intra node 1 (pod-1)``."""
    if r.scope == "rank":
        host = r.node or ""
        world = run.doc.get("world") or {}
        raw = world.get("hosts")
        hosts: list[Any] = raw if isinstance(raw, list) else []
        gpu = ""
        if world.get("device") == "cuda" and r.rank is not None and r.rank < len(hosts):
            gpu = f", GPU {sum(1 for h in hosts[: r.rank] if h == hosts[r.rank])}"
        return f"rank {r.rank} ({host}{gpu})" if host else f"rank {r.rank}"
    if r.scope == "node":
        return f"node {r.node}"
    return f"{r.scope} {r.group}" if r.group and r.group != r.scope else r.scope


def _index(run: Run) -> dict[tuple[str, str], CheckResult]:
    # A rank's result whose GPU the run named is keyed by the GPU's UUID, not by its rank
    # and index: a GPU moved or re-indexed between the runs is compared with itself.
    known = gpus.uuid_map(run.results)
    out: dict[tuple[str, str], CheckResult] = {}
    for r in run.results:
        uuid = gpus.uuid_of(r, known)
        out.setdefault((r.name, uuid if uuid else _where(r, run)), r)
    return out


@dataclass
class Comparison:
    """Everything ``mlenv compare`` shows."""

    a: Run
    b: Run
    rows: list[Row]
    notes: list[str]

    @property
    def regressions(self) -> list[Row]:
        """Rows judged a regression."""
        return [r for r in self.rows if r.state == "REGRESSION"]

    def to_dict(self) -> dict[str, Any]:
        """JSON for ``-o json``."""
        side = {"run_id": None, "ref": None, "verdict": None, "started": None, "cluster": None}
        return {
            "a": {
                **side,
                "run_id": self.a.run_id,
                "ref": self.a.ref,
                "verdict": self.a.doc.get("verdict"),
                "started": self.a.doc.get("started"),
                "cluster": self.a.cluster,
            },
            "b": {
                **side,
                "run_id": self.b.run_id,
                "ref": self.b.ref,
                "verdict": self.b.doc.get("verdict"),
                "started": self.b.doc.get("started"),
                "cluster": self.b.cluster,
            },
            "rows": [r.to_dict() for r in self.rows],
            "regressions": [r.reason() for r in self.regressions],
            "notes": self.notes,
        }


def compare(
    a: Run,
    b: Run,
    base: baselines.Baseline | None = None,
    default_tolerance: float = DEFAULT_TOLERANCE,
) -> Comparison:
    """Compare run B with the earlier run A."""
    notes: list[str] = []
    if a.doc.get("profile") != b.doc.get("profile"):
        notes.append(
            f"note: the runs used different profiles ({a.doc.get('profile')} vs {b.doc.get('profile')}): "
            "their sizes differ, so their figures are not comparable"
        )
    wa, wb = a.doc.get("world") or {}, b.doc.get("world") or {}
    if (wa.get("ranks"), wa.get("device")) != (wb.get("ranks"), wb.get("device")):
        notes.append(
            f"note: the worlds differ ({wa.get('ranks')} {wa.get('device')} rank(s) vs "
            f"{wb.get('ranks')} {wb.get('device')} rank(s))"
        )
    sa, sb = training_setup(a), training_setup(b)
    if sa is not None and sb is not None and sa != sb:
        notes.append(
            f"note: the training runs used different setups ({sa} vs {sb}): their training figures "
            "are not comparable"
        )
    ia, ib = _index(a), _index(b)
    table = metrics.merged([a.meaning, b.meaning])  # B's declaration wins: the newer run
    rows: list[Row] = []
    for key in sorted(set(ia) | set(ib), key=lambda k: (k[0], k[1])):
        ra, rb = ia.get(key), ib.get(key)
        check, where = key
        if ra is None or rb is None:
            only = "only in B" if ra is None else "only in A"
            rows.append(Row(check, where, "*", None, None, None, None, "", only))
            continue
        if ra.status in _GOOD and rb.status in _BAD:
            rows.append(
                Row(
                    check,
                    where,
                    "status",
                    None,
                    None,
                    None,
                    None,
                    "a check that passed no longer does",
                    "REGRESSION",
                    ra.status.value,
                    rb.status.value,
                )
            )
        for metric in sorted(set(ra.metrics) | set(rb.metrics)):
            va, vb = ra.metrics.get(metric), rb.metrics.get(metric)
            d = metrics.meaning(table, check, metric).direction
            rows.append(_row(check, where, metric, va, vb, d, base, default_tolerance))
    return Comparison(a, b, rows, notes)


def training_setup(run: Run) -> str | None:
    """The training setup of ``run``'s ``training.deepspeed`` result as one line, or None (no training).

    Runs from before the setup was recorded name their precision and ZeRO stage.
    """
    for r in run.results:
        if r.name != "training.deepspeed" or not isinstance(r.details, dict):
            continue
        setup = r.details.get("setup")
        if isinstance(setup, dict) and setup.get("name"):
            return str(setup["name"])
        if "precision" in r.details or "zero_stage" in r.details:
            return (
                f"{r.details.get('precision', '?')}, ZeRO-{r.details.get('zero_stage', '?')} "
                "(setup not recorded)"
            )
    return None


def _row(
    check: str,
    where: str,
    metric: str,
    va: float | None,
    vb: float | None,
    d: int,
    base: baselines.Baseline | None,
    default_tolerance: float,
) -> Row:
    if va is None or vb is None:
        return Row(
            check, where, metric, va, vb, None, None, "", "only in A" if vb is None else "only in B"
        )
    delta = (vb - va) / abs(va) if va else None
    if d == 0 or delta is None:
        return Row(check, where, metric, va, vb, delta, None, "", "not judged")
    tol, src = tolerance_for(check, metric, base, default_tolerance)
    worse = -delta if d > 0 else delta
    state = "REGRESSION" if worse > tol else ("improved" if -worse > tol else "ok")
    return Row(check, where, metric, va, vb, delta, tol, src, state)


def table(c: Comparison, everything: bool = False) -> str:
    """The comparison as a text table: judged rows (all rows with ``everything``), then the regressions."""
    rows = c.rows if everything else [r for r in c.rows if r.state not in ("not judged",)]
    head = ("check", "where", "metric", "A", "B", "delta", "tolerance", "")
    # every value read from the runs is escaped (shown): a crafted check name must not write
    # an OSC sequence to the terminal or \r over a REGRESSION line
    body = [
        tuple(
            shown(x)
            for x in (
                r.check,
                r.where,
                r.metric,
                r.a_text(),
                r.b_text(),
                "—" if r.delta_frac is None else f"{100 * r.delta_frac:+.1f}%",
                "—" if r.tolerance is None else f"{100 * r.tolerance:g}%",
                r.state,
            )
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = [
        f"A: {shown(c.a.label())}  [{shown(c.a.ref)}]",
        f"B: {shown(c.b.label())}  [{shown(c.b.ref)}]",
        "",
    ]
    lines += [
        "  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip()
        for row in [head, *body]
    ]
    lines += ["", *(shown(n) for n in c.notes)] if c.notes else []
    regs = c.regressions
    lines.append("")
    lines += [f"REGRESSION: {shown(r.reason())}" for r in regs]
    lines.append(
        f"{len(regs)} regression(s) beyond tolerance" if regs else "no regression beyond tolerance"
    )
    return "\n".join(lines)
