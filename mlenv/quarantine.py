"""``mlenv quarantine RUN`` / ``mlenv release RUN``: hand FAILED nodes to the
scheduler's own quarantine, dry run first, and undo exactly that.

The plan comes from the run's ``node_verdicts`` (results.json): every FAIL node, with the
check and figure that failed it in the note ``mlenv <run-id>: <check> <figure>``.

This module is the platform-neutral half: reading the run, the targets, the records and
the order of things (permission first, then each node judged, then the marks, the record
written before and after). What a mark is on each platform, and how many nodes one
command marks, is a :class:`Marker` the platform supplies (``mlenv/platforms``, the CLI
calls ``platform.quarantine``/``release``):

- Kubernetes/OpenShift: label ``ml-dev-env.io/health=fail``, the note in the annotation
  ``ml-dev-env.io/quarantine``, a ``NoSchedule`` taint with the label's key
  (``mlenv/platforms/kubenodes.py`` over :mod:`mlenv.cluster.nodemarks`, run through
  ``ClusterClient.mark_nodes``: one call per kind of mark for all the nodes);
- Slurm: ``scontrol update NodeName=X State=DRAIN Reason="<note>"``
  (``mlenv/platforms/slurmnodes.py``);
- plain hosts: the list (:class:`ListMarker`: there is no scheduler to tell).

What ``--apply`` did is written to ``<report dir>/quarantine.json`` and appended to
``<history root>/<cluster>/quarantine.jsonl``; ``release`` reads the former and undoes
only what it lists, only on nodes whose mark still carries this run's id (a node someone
drained or labelled for another reason is left alone, at apply and at release), and only
for nodes that passed a later run (``--after``) or with ``--force``.

Nothing here prints: lines go to the ``say``/``warn`` callbacks the platform passes on
from the CLI's session.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from mlenv import argv
from mlenv.errors import InfraError, InputError

QUARANTINE_FILE = "quarantine.json"
QUARANTINE_HISTORY = "quarantine.jsonl"
# Record states release undoes: fully applied, or stopped half-way through the marks.
MARKED = ("applied", "applying")
VERSION = 1

Say = Callable[[str], None]
# takes a dry run as data (``-o json|yaml``) instead of its printed commands
Plan = Callable[[dict[str, Any]], None]


def now_iso() -> str:
    """UTC, second precision."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class Target:
    """One FAILED node of a run and why."""

    node: str
    hosts: tuple[str, ...]
    node_from: str  # "kubernetes" | "host"
    check: str
    figure: str
    run_id: str
    # FAILed on hardware evidence (wrong answers, DCGM, XID-class): confirmed by one run
    hard: bool = False
    # release of a quarantine that stopped half-way: some marks may never have been set
    partial: bool = False

    @property
    def note(self) -> str:
        """``mlenv <run-id>: <check> <figure>``: the annotation and the drain reason."""
        return argv.note_text(f"mlenv {self.run_id}: {self.check} {self.figure}")


@dataclass
class Run:
    """A finished run as quarantine reads it."""

    run_id: str
    started: str
    report_dir: Path | None
    doc: dict[str, Any]
    cluster: str | None

    def verdicts(self) -> list[dict[str, Any]]:
        """The run's node verdicts (empty for a run written before node verdicts existed)."""
        sec = self.doc.get("node_verdicts")
        nodes = sec.get("nodes") if isinstance(sec, dict) else None
        return [n for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else []

    def node_status(self, node: str) -> str | None:
        """This run's status of ``node`` (None: the run did not have it)."""
        for n in self.verdicts():
            if n.get("node") == node or node in (n.get("hosts") or []):
                return str(n.get("status"))
        return None


def load_run(ref: str, history_root: Path) -> Run:
    """A report folder, a results.json, or a run id in the history; InputError (exit 2) otherwise."""
    from mlenv.acceptance.records import history
    from mlenv.contract import read_results

    p = Path(ref)
    folder: Path | None = None
    if p.is_dir():
        folder = p
    elif p.is_file() and p.name.endswith(".json"):
        folder = p.parent
    else:
        rec = history.find_run(history_root, ref)
        if rec is None:
            raise InputError(
                f"{ref}: no such run (neither a report folder, a results.json nor a run id in the "
                f"history under {history_root})"
            )
        folder = Path(str(rec.get("report_dir")))
    doc = read_results(folder)
    if doc is None:
        raise InputError(f"{ref}: no readable results.json in {folder}")
    cluster = None
    try:
        rec = json.loads((folder / history.RECORD_FILE).read_text(encoding="utf-8"))
        if isinstance(rec, dict) and rec.get("run_id") == doc.get("run_id"):
            cluster = rec.get("cluster")
    except (OSError, ValueError):
        cluster = None
    run_id = str(doc.get("run_id") or "")
    if not run_id:
        raise InputError(f"{ref}: results.json names no run_id")
    return Run(
        run_id=run_id,
        started=str(doc.get("started") or ""),
        report_dir=folder,
        doc=doc,
        cluster=str(cluster) if cluster else None,
    )


def targets(run: Run, only: str | None = None) -> list[Target]:
    """The run's FAILED nodes (``only``: that one node, which must be in the run: InputError)."""
    verdicts = run.verdicts()
    if not verdicts and "node_verdicts" not in run.doc:
        raise InputError(
            f"run {run.run_id}: results.json has no node_verdicts (written before node verdicts "
            "existed); re-run the suite"
        )
    if only is not None and run.node_status(only) is None:
        known = ", ".join(str(n.get("node")) for n in verdicts) or "none"
        raise InputError(f"--node {only}: not a node of run {run.run_id} (its nodes: {known})")
    out = []
    for n in verdicts:
        if n.get("status") != "FAIL":
            continue
        if only is not None and only != n.get("node") and only not in (n.get("hosts") or []):
            continue
        findings = [
            f for f in n.get("findings") or [] if isinstance(f, dict) and f.get("status") == "FAIL"
        ]
        first = findings[0] if findings else {}
        out.append(
            Target(
                node=str(n.get("node")),
                hosts=tuple(str(h) for h in n.get("hosts") or []),
                node_from=str(n.get("node_from") or "host"),
                check=str(first.get("check") or "?"),
                figure=str(first.get("figure") or ""),
                run_id=run.run_id,
                hard=any(str(f.get("check")) in HARD_EVIDENCE for f in findings),
            )
        )
    return out


# --- confirmation: N FAILs of the last M runs of the cluster ---------------------------

# Checks whose FAIL is evidence enough in one run: a GPU computing wrong answers (silent
# data corruption), DCGM's hardware diagnostics, XID/ECC-class health. A slow figure may
# be load or noise (a healthy 3-node run under load FAILed one node): it must repeat.
HARD_EVIDENCE = frozenset({"compute.quorum", "gpu.dcgm", "gpu.health"})
DEFAULT_CONFIRM = (2, 3)
MAX_CONFIRM_RUNS = 50


def parse_confirm(text: str) -> tuple[int, int]:
    """``N/M`` (1 <= N <= M <= 50); InputError (exit 2) otherwise."""
    n_s, sep, m_s = text.strip().partition("/")
    if sep and n_s.strip().isdigit() and m_s.strip().isdigit():
        n, m = int(n_s), int(m_s)
        if 1 <= n <= m <= MAX_CONFIRM_RUNS:
            return n, m
    raise InputError(
        f"--confirm {text!r}: expected N/M, N FAILs in the last M runs "
        f"(1 <= N <= M <= {MAX_CONFIRM_RUNS}), e.g. 2/3"
    )


def earlier_runs(run: Run, cluster: str, history_root: Path, count: int) -> list[tuple[str, Any]]:
    """Up to ``count`` runs of ``cluster`` that started before ``run``, newest first, each
    (run id, its results document or None when its report is gone)."""
    from mlenv.acceptance.records import history
    from mlenv.contract import read_results

    records, _ = history.read(history.history_path(history_root, cluster))
    out: list[tuple[str, Any]] = []
    for rec in history.distinct(history.newest_first(records)):
        rid, started = str(rec.get("run_id")), str(rec.get("started") or "")
        if rid == run.run_id or not started or not run.started or started >= run.started:
            continue
        folder = rec.get("report_dir")
        out.append((rid, read_results(str(folder)) if folder else None))
        if len(out) >= count:
            break
    return out


def _status_in(doc: Any, node: str) -> str | None:
    sec = doc.get("node_verdicts") if isinstance(doc, dict) else None
    for n in sec.get("nodes", []) if isinstance(sec, dict) else []:
        if isinstance(n, dict) and (n.get("node") == node or node in (n.get("hosts") or [])):
            return str(n.get("status"))
    return None


def confirm(
    run: Run,
    ts: list[Target],
    cluster: str,
    history_root: Path,
    rule: tuple[int, int] = DEFAULT_CONFIRM,
) -> tuple[list[Target], list[str]]:
    """The targets confirmed (hardware evidence: this run; else FAILed in N of the last M
    runs of the cluster, this one included) and one line per target, naming the runs."""
    n, m = rule
    earlier = earlier_runs(run, cluster, history_root, m - 1) if m > 1 else []
    ok: list[Target] = []
    lines: list[str] = []
    for t in ts:
        if t.hard:
            ok.append(t)
            lines.append(
                f"{t.node}: confirmed by run {run.run_id} alone ({t.check}: hardware evidence)"
            )
            continue
        failed = [run.run_id] + [rid for rid, doc in earlier if _status_in(doc, t.node) == "FAIL"]
        seen = 1 + len(earlier)
        said = (
            f"FAILed in {len(failed)} of the last {seen} run(s) of {cluster} ({', '.join(failed)})"
        )
        if len(failed) >= n:
            ok.append(t)
            lines.append(f"{t.node}: confirmed: {said}, --confirm {n}/{m}")
        else:
            lines.append(
                f"{t.node}: not confirmed, left in service: {said}; --confirm {n}/{m} needs {n} "
                f"of the last {m} (re-run the suite, or --confirm 1/1 to act on this run alone)"
            )
    return ok, lines


# --- what a mark is, per platform ------------------------------------------------------


@dataclass
class Marked:
    """What :meth:`Marker.mark_all` could not do: the nodes whose marks did not (all) go on,
    or off, and why; and what could not be told of nodes that are marked (an Event, a
    condition): their marks stand, the verb still ends in an error."""

    failed: dict[str, str] = field(default_factory=dict)
    untold: list[str] = field(default_factory=list)


class Marker(Protocol):
    """How one platform marks nodes (the platform builds it; the order is this module's)."""

    kind: str  # "kubernetes" | "slurm" | "hosts": recorded as the record's ``platform``
    acts: bool  # False: nothing to run (hosts), the printed list is the hand-off

    def plan(self, ts: list[Target], *, remove: bool = False) -> list[str]:
        """The exact commands for these targets, as an operator would type them, in the
        calls :meth:`mark_all` makes (on Kubernetes one per kind of mark, not per node)."""
        ...

    def unusable(self, t: Target) -> str | None:
        """Why this target cannot be marked here (None: it can)."""
        ...

    def permitted(self) -> tuple[bool, str]:
        """Whether this user may change nodes, checked before anything is changed: (ok, why not)."""
        ...

    def read(self, nodes: list[str]) -> None:
        """Read what :meth:`foreign_mark` and :meth:`not_ours_now` need of these nodes, in
        as few calls as the platform allows (before they are asked node by node)."""
        ...

    def foreign_mark(self, t: Target) -> str | None:
        """Why the node must be left alone because someone else marked it (None: it is free)."""
        ...

    def not_ours_now(self, t: Target) -> str | None:
        """Why the mark on the node is no longer this run's (someone changed it): left alone."""
        ...

    def mark_all(
        self, ts: list[Target], *, remove: bool = False, done: Callable[[Target], None]
    ) -> Marked:
        """Run :meth:`plan` (``remove``: the commands undoing it), calling ``done`` for each
        target as soon as its marks are known to be on (off); a node a call could not mark
        is in the answer with why. Raises when nothing more can be known (unreachable)."""
        ...


class OneByOne:
    """A platform that marks one node after another (Slurm, hosts): :meth:`plan` and
    :meth:`mark_all` are its per-node ``commands`` and ``mark``; the first failure stops
    the rest (it raises), the nodes before it stay done."""

    def commands(self, t: Target, *, remove: bool = False) -> list[str]:
        raise NotImplementedError

    def mark(self, t: Target, *, remove: bool = False) -> None:
        raise NotImplementedError

    def plan(self, ts: list[Target], *, remove: bool = False) -> list[str]:
        return [line for t in ts for line in self.commands(t, remove=remove)]

    def read(self, nodes: list[str]) -> None:
        return None

    def mark_all(
        self, ts: list[Target], *, remove: bool = False, done: Callable[[Target], None]
    ) -> Marked:
        for t in ts:
            self.mark(t, remove=remove)
            done(t)
        return Marked()


class ListMarker(OneByOne):
    """Plain hosts: no scheduler to tell; the list is the hand-off and nothing is run."""

    kind = "hosts"
    acts = False

    def commands(self, t: Target, *, remove: bool = False) -> list[str]:
        return [
            f"# {'put back' if remove else 'take out of the hosts list'}: {t.node} ({t.check}: {t.figure})"
        ]

    def unusable(self, t: Target) -> str | None:
        return None

    def permitted(self) -> tuple[bool, str]:
        return True, ""

    def foreign_mark(self, t: Target) -> str | None:
        return None

    def not_ours_now(self, t: Target) -> str | None:
        return None

    def mark(self, t: Target, *, remove: bool = False) -> None:
        return None


# --- records ------------------------------------------------------------------------------


@dataclass
class Record:
    """``<report dir>/quarantine.json``: what ``--apply`` did to which node, and what release undid."""

    run_id: str
    cluster: str
    platform: str
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the commands each --apply ran, in order (one per kind of mark and group of nodes)
    commands: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, report_dir: Path) -> Record | None:
        """The run's record, None when there is none; InputError when it is unreadable."""
        path = report_dir / QUARANTINE_FILE
        if not path.is_file():
            return None
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                run_id=str(d["run_id"]),
                cluster=str(d["cluster"]),
                platform=str(d["platform"]),
                nodes={str(k): dict(v) for k, v in dict(d["nodes"]).items()},
                commands=[str(c) for c in d.get("commands") or []],
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(
                f"{path}: unreadable quarantine record ({type(e).__name__}: {e})"
            ) from None

    def write(self, report_dir: Path) -> Path:
        """Write atomically."""
        path = report_dir / QUARANTINE_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(
            json.dumps(
                {
                    "version": VERSION,
                    "run_id": self.run_id,
                    "cluster": self.cluster,
                    "platform": self.platform,
                    "nodes": self.nodes,
                    "commands": self.commands,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        os.replace(tmp, path)
        return path


def log_event(history_root: Path, cluster: str, event: dict[str, Any]) -> Path:
    """Append one event line to ``<root>/<cluster>/quarantine.jsonl`` (locked, one write)."""
    from mlenv.acceptance.records import history

    path = history.history_path(history_root, cluster).with_name(QUARANTINE_HISTORY)
    history.append(path, event)
    return path


def log_node_event(
    history_root: Path,
    cluster: str,
    run: Run,
    platform: str,
    node: str,
    event: str,
    at: str,
    **more: str,
) -> Path:
    """One node's quarantine or release as an event line (log_event): the run, platform,
    node, event and time, then what only that event says (its note, why it was released)."""
    return log_event(
        history_root,
        cluster,
        {
            "run_id": run.run_id,
            "cluster": cluster,
            "platform": platform,
            "node": node,
            "event": event,
            "at": at,
            **more,
        },
    )


# --- acting -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one quarantine/release did, node by node, for the caller to print."""

    done: list[str] = field(default_factory=list)  # nodes changed
    left: list[tuple[str, str]] = field(default_factory=list)  # (node, why it was left alone)
    lines: list[str] = field(default_factory=list)
    # nodes a call could not mark (unmark), and why; what could not be told of marked ones
    failed: list[tuple[str, str]] = field(default_factory=list)
    untold: list[str] = field(default_factory=list)


def apply(
    run: Run, marker: Marker, cluster: str, ts: list[Target], *, history_root: Path
) -> Outcome:
    """Mark every target (skipping nodes someone else marked), then record what was done."""
    assert run.report_dir is not None
    out = Outcome()
    rec = Record.read(run.report_dir) or Record(run.run_id, cluster, marker.kind)
    marker.read(
        [
            t.node
            for t in ts
            if marker.unusable(t) is None and rec.nodes.get(t.node, {}).get("state") != "applied"
        ]
    )
    chosen = []
    for t in ts:
        why = marker.unusable(t)
        prior = rec.nodes.get(t.node, {})
        if why is None and prior.get("state") == "applied":
            why = f"already quarantined by this run at {prior.get('applied_at')}"
        if why is None:
            why = marker.foreign_mark(t)
        if why is not None:
            out.left.append((t.node, why))
            continue
        # Recorded before the first mark: a call failing half-way leaves a record that
        # release can undo ("applying": whatever of the marks is there).
        rec.nodes[t.node] = {
            "state": "applying",
            "note": t.note,
            "check": t.check,
            "figure": t.figure,
            "hosts": list(t.hosts),
            "started_at": now_iso(),
        }
        chosen.append(t)
    if not chosen:
        return out
    rec.commands += marker.plan(chosen)
    # The record is written twice, not twice per node (rewriting it after every node made
    # a quarantine grow with the square of its nodes: 77 s at 4096): once with every node
    # "applying" before the first mark, once at the end, also when a call fails, so what
    # was done reads "applied" and the rest stays "applying" for release to undo.
    rec.write(run.report_dir)

    def done(t: Target) -> None:
        at = now_iso()
        rec.nodes[t.node].update({"state": "applied", "applied_at": at})
        log_node_event(
            history_root, cluster, run, marker.kind, t.node, "quarantine", at, note=t.note
        )
        out.done.append(t.node)

    try:
        res = marker.mark_all(chosen, done=done)
        for node, why in res.failed.items():
            rec.nodes[node]["error"] = why
        out.failed, out.untold = list(res.failed.items()), list(res.untold)
    finally:
        rec.write(run.report_dir)
    return out


def _releasable(
    run: Run, rec: Record | None, *, after: Run | None, force: bool, only: str | None
) -> Record:
    """The run's record when release may go ahead; InputError (exit 2) naming why not."""
    assert run.report_dir is not None
    if rec is None or not any(v.get("state") in MARKED for v in rec.nodes.values()):
        raise InputError(
            f"run {run.run_id}: nothing was quarantined by it (no applied node in "
            f"{run.report_dir / QUARANTINE_FILE}); nothing to release"
        )
    if only is not None and only not in rec.nodes:
        raise InputError(
            f"--node {only}: run {run.run_id} quarantined no such node "
            f"(it did: {', '.join(sorted(rec.nodes)) or 'none'})"
        )
    if after is None and not force:
        raise InputError(
            "release needs --after RUN2 (a later run that measured the node and passed it) or --force"
        )
    if after is not None:
        if not after.started or not run.started or after.started <= run.started:
            raise InputError(
                f"--after {after.run_id}: started {after.started or 'at an unknown time'}, not "
                f"after run {run.run_id} ({run.started or 'unknown'})"
            )
        if after.cluster != rec.cluster:
            raise InputError(
                f"--after {after.run_id}: a run of {after.cluster or 'an unknown cluster'}, not of "
                f"{rec.cluster} where run {run.run_id} quarantined its nodes"
            )
    return rec


def quarantined_nodes(run: Run, only: str | None = None) -> list[str]:
    """The nodes ``run`` quarantined and has not released (``only``: that one), for
    ``mlenv recheck``; InputError (exit 2) when there are none."""
    assert run.report_dir is not None
    rec = Record.read(run.report_dir)
    nodes = sorted(n for n, v in (rec.nodes if rec else {}).items() if v.get("state") in MARKED)
    if only is not None:
        if only not in nodes:
            raise InputError(
                f"--node {only}: run {run.run_id} has no such node in quarantine "
                f"(it has: {', '.join(nodes) or 'none'})"
            )
        return [only]
    if not nodes:
        raise InputError(
            f"run {run.run_id}: no node of it is in quarantine (no applied node in "
            f"{run.report_dir / QUARANTINE_FILE}); nothing to re-check"
        )
    return nodes


def release(
    run: Run,
    marker: Marker,
    cluster: str,
    *,
    after: Run | None,
    force: bool,
    only: str | None,
    history_root: Path,
    dry_run: bool = False,
) -> Outcome:
    """Undo what ``apply`` recorded for this run, node by node, where allowed."""
    assert run.report_dir is not None
    rec = _releasable(run, Record.read(run.report_dir), after=after, force=force, only=only)
    out = Outcome()
    # The record is written once at the end (also when an undo fails half-way), not after
    # every node: rewriting it per node made a release grow with the square of its nodes.
    try:
        _release_nodes(run, marker, cluster, rec, out, after, force, only, history_root, dry_run)
    finally:
        if out.done and not dry_run:
            rec.write(run.report_dir)
    return out


def _release_nodes(
    run: Run,
    marker: Marker,
    cluster: str,
    rec: Record,
    out: Outcome,
    after: Run | None,
    force: bool,
    only: str | None,
    history_root: Path,
    dry_run: bool,
) -> None:
    """The work of :func:`release`, recording in ``rec`` (written by the caller): each
    node judged on its own (the later run's evidence, whose marks it carries now), the
    ones released undone together (one call per kind of mark on Kubernetes)."""
    held: list[tuple[Target, dict[str, Any]]] = []
    for node, entry in sorted(rec.nodes.items()):
        if (only is not None and node != only) or entry.get("state") not in MARKED:
            continue
        if after is not None and not force:
            st = after.node_status(node)
            if st != "PASS":
                out.left.append(
                    (
                        node,
                        f"run {after.run_id} did not pass it ({st or 'not measured by that run'})",
                    )
                )
                continue
        t = Target(
            node=node,
            hosts=tuple(entry.get("hosts") or []),
            node_from="kubernetes",
            check=str(entry.get("check")),
            figure=str(entry.get("figure")),
            run_id=run.run_id,
            partial=entry.get("state") == "applying",
        )
        held.append((t, entry))
    marker.read([t.node for t, _ in held])
    chosen: list[Target] = []
    for t, _ in held:
        why = marker.not_ours_now(t)
        if why is not None:
            out.left.append((t.node, why))
            continue
        chosen.append(t)
    if not chosen:
        return
    out.lines += marker.plan(chosen, remove=True)
    if dry_run:
        out.done += [t.node for t in chosen]
        return
    why_released = "forced (--force)" if force else f"passed run {after.run_id if after else '?'}"

    def done(t: Target) -> None:
        at = now_iso()
        rec.nodes[t.node].update(
            {"state": "released", "released_at": at, "released_because": why_released}
        )
        log_node_event(
            history_root, cluster, run, marker.kind, t.node, "release", at, because=why_released
        )
        out.done.append(t.node)

    res = marker.mark_all(chosen, remove=True, done=done)
    out.failed, out.untold = list(res.failed.items()), list(res.untold)


# --- the verbs, as every platform runs them ---------------------------------------------


def quarantine_verb(
    run: Run,
    marker: Marker,
    cluster: str,
    ts: list[Target],
    *,
    apply_them: bool,
    only: str | None,
    history_root: Path,
    say: Say,
    warn: Say,
    plan: Plan | None = None,
) -> None:
    """``mlenv quarantine``: print the commands (dry run), or check permission and apply them.
    ``plan`` takes the dry run as data instead (``-o json|yaml``): the run, its cluster and
    platform, the commands, each node and the FAILED nodes that cannot be marked here.
    A node a call could not mark is named, recorded ``applying`` and the verb exits 3.

    Not permitted: the commands are printed for an admin and InfraError (exit 3) is
    raised, nothing changed."""
    if plan is not None and not apply_them:
        doc = _plan_doc(run, marker, cluster, ts)
        plan(doc)
        _unmarkable([f"{n['node']}: {n['cannot']}" for n in doc["nodes"] if n["cannot"]])
        return
    if not ts:
        say(
            f"run {run.run_id}: no FAILED node"
            + (f" matching --node {only}" if only else "")
            + "; nothing to quarantine"
        )
        return
    markable: list[Target] = []
    cannot: list[str] = []  # FAILED nodes this platform cannot mark: never a quiet exit 0
    for t in ts:
        why = marker.unusable(t)
        if why:
            warn(f"note: {t.node}: {why}")
            cannot.append(f"{t.node}: {why}")
            continue
        markable.append(t)
    lines = marker.plan(markable) if markable else []
    if not apply_them:
        say(
            f"# run {run.run_id} ({cluster}, {marker.kind}): {len(ts)} FAILED node(s); dry run, nothing changed "
            "(--apply runs these):"
        )
        for ln in lines:
            say(ln)
        _unmarkable(cannot)
        return
    if not marker.acts:
        for ln in lines:
            say(ln)
    ok, why = marker.permitted()
    if not ok:
        say(f"# not permitted to change nodes ({why}); commands for an admin to run:")
        for ln in lines:
            say(ln)
        raise InfraError(f"not permitted: {why}; nothing was changed")
    out = apply(run, marker, cluster, ts, history_root=history_root)
    for n, why in out.left:
        warn(f"left alone: {n}: {why}")
    for n in out.done:
        say(f"quarantined {n} ({marker.kind}): recorded in {run.report_dir}/{QUARANTINE_FILE}")
    for n, why in out.failed:
        warn(f"not quarantined: {n}: {why}")
    say(
        f"quarantine of run {run.run_id}: {len(out.done)} node(s) quarantined, {len(out.left)} left alone"
        + (f", {len(out.failed)} not quarantined (recorded as applying)" if out.failed else "")
    )
    _not_done("quarantined", out)
    _unmarkable(cannot)


def _plan_doc(run: Run, marker: Marker, cluster: str, ts: list[Target]) -> dict[str, Any]:
    """The dry run as data: the commands ``--apply`` would run (one per kind of mark and
    group of nodes on Kubernetes, so they are the plan's, not each node's), the nodes it
    would mark with their notes, and those it cannot mark, with why."""
    markable = [t for t in ts if marker.unusable(t) is None]
    return {
        "run_id": run.run_id,
        "cluster": cluster,
        "platform": marker.kind,
        "dry_run": True,
        "commands": marker.plan(markable) if markable else [],
        "nodes": [{"node": t.node, "note": t.note, "cannot": marker.unusable(t)} for t in ts],
    }


def _not_done(what: str, out: Outcome) -> None:
    """InfraError (exit 3) naming every node whose marks a call could not set (or take
    off), and what could not be told of marked ones; printed and recorded before."""
    parts = [f"{n}: {why}" for n, why in out.failed] + [f"not told: {u}" for u in out.untold]
    if parts:
        raise InfraError(
            f"{len(out.failed)} node(s) not {what}"
            + (f", {len(out.untold)} tell(s) failed" if out.untold else "")
            + ": "
            + "; ".join(parts)
        )


def _unmarkable(cannot: list[str]) -> None:
    """InfraError (exit 3) naming every FAILED node that cannot be marked, and why."""
    if cannot:
        raise InfraError(
            f"{len(cannot)} FAILED node(s) cannot be quarantined here: " + "; ".join(cannot)
        )


def release_verb(
    run: Run,
    marker: Marker,
    cluster: str,
    *,
    after: Run | None,
    force: bool,
    only: str | None,
    dry_run: bool,
    history_root: Path,
    say: Say,
    warn: Say,
) -> None:
    """``mlenv release``: the request checked (exit 2), then permission (unless a dry run,
    exit 3), then each node judged and the released ones undone together; a node a call
    could not undo is named and the verb exits 3."""
    assert run.report_dir is not None
    _releasable(run, Record.read(run.report_dir), after=after, force=force, only=only)
    if not dry_run:
        ok, why = marker.permitted()
        if not ok:
            raise InfraError(f"not permitted: {why}; nothing was changed")
    out = release(
        run,
        marker,
        cluster,
        after=after,
        force=force,
        only=only,
        history_root=history_root,
        dry_run=dry_run,
    )
    for ln in out.lines:
        say(ln)
    for n, why in out.left:
        warn(f"kept: {n}: {why}")
    verb = "would release" if dry_run else "released"
    for n in out.done:
        say(f"{verb} {n}")
    for n, why in out.failed:
        warn(f"not released: {n}: {why}")
    say(
        f"release of run {run.run_id}: {len(out.done)} node(s) {verb}, {len(out.left)} kept"
        + (f", {len(out.failed)} not released (still recorded as held)" if out.failed else "")
    )
    _not_done("released", out)
