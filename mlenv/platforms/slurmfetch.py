"""Runs that Slurm started on its own (the scheduled re-check, ``recheck.sbatch``; a
hand-submitted ``sbatch acceptance.sbatch``) into this machine's history.

``mlenv acceptance --cluster`` copies its run back and records it here as it ends; a run
nobody waited for stays under ``<shared_dir>/results/<run-id>/``, recorded only in the
shared folder's own history. :func:`fetch_runs` brings each such run over once: its folder
to ``reports/<cluster>/<run-id>/`` (with the job's output as ``job.out``) and one history
line per run id, so ``mlenv history`` and the trends show scheduled runs like any other.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mlenv.config.model import Cluster
from mlenv.contract import is_run_id, read_results
from mlenv.errors import InfraError, InputError

Say = Callable[[str], None]
# A job id → its Slurm state ("RUNNING", "COMPLETED", …), None when Slurm no longer knows it.
JobState = Callable[[str], str | None]


def slurm_job_state(job: str) -> str | None:
    """The job's state from ``scontrol``/``sacct`` (None: Slurm has forgotten it)."""
    from mlenv.platforms import slurm

    info = slurm.job_info(job)
    return None if info is None else info.get("JobState", "UNKNOWN").split()[0]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One fetch at a time per history: two would both find a run missing and record it twice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".fetch.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def fetch_runs(
    cluster: Cluster, history_root: Path, say: Say, job_state: JobState = slurm_job_state
) -> list[str]:
    """Import the runs under ``<slurm.shared_dir>/results/`` that this machine's history
    (``<history_root>/<cluster>/history.jsonl``: ``reports/`` or ``$MLENV_HISTORY_DIR``, as
    ``mlenv history`` resolves it) lacks, each copied to ``<history_root>/<cluster>/<run-id>/``;
    the run ids imported, oldest first. A second call imports nothing new.

    Skipped, each said once: a folder not named like a run id; a run of another cluster
    (its ``record.json`` names it); a run whose job is still queued or running. A run whose
    job ended without rank 0's ``results.json`` (killed, node lost) is imported as ERROR
    saying so, judged as ``mlenv acceptance --cluster`` would. Raises InfraError (exit 3)
    when the shared folder or the history cannot be read or written.
    """
    from mlenv.acceptance.records import history

    results = Path(cluster.slurm.shared_dir) / "results"
    path = history.history_path(history_root, cluster.name)
    if not results.is_dir():
        say(f"fetch: no runs yet: {results} does not exist")
        return []
    imported: list[str] = []
    try:
        with _locked(path):
            known = history.known_run_ids(history_root, cluster.name)
            for d in sorted(results.iterdir()):
                if (
                    d.is_dir()
                    and is_run_id(d.name)
                    and d.name not in known
                    and _import(cluster, history_root, d, say, job_state)
                ):
                    imported.append(d.name)
    except OSError as e:
        raise InfraError(f"fetch: {e.filename or results}: {e.strerror or e}") from None
    say(
        f"fetch: {len(imported)} new run(s) from {results} in {path}"
        if imported
        else f"fetch: no new runs in {results} (history: {path})"
    )
    return imported


def _import(cluster: Cluster, history_root: Path, src: Path, say: Say, job_state: JobState) -> bool:
    """One run folder into reports/ and the history; False when it is skipped (said why)."""
    from mlenv.acceptance.core.result import CheckResult
    from mlenv.acceptance.records import history

    rid = src.name
    rec = _record(src)
    if rec.get("cluster") not in (None, cluster.name):
        say(f"fetch: run {rid} is cluster {rec.get('cluster')}'s, not {cluster.name}'s: skipped")
        return False
    doc = read_results(src)
    if doc is None:
        doc = _ended_without_results(src, rid, say, job_state)
        if doc is None:
            return False
    elif _still_active(doc, rid, say, job_state):
        return False  # rank 0 writes record.json, the trends and summary.md after results.json
    if doc.get("run_id") != rid:
        say(f"fetch: {src} holds run {doc.get('run_id')}, not {rid}: skipped")
        return False
    dest = history_root / cluster.name / rid
    shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)
    job = doc.get("job") if isinstance(doc.get("job"), dict) else None
    if job and str(job.get("id", "")).isdigit():
        for out in sorted(src.parent.glob(f"*-{job['id']}.out"))[
            :1
        ]:  # #SBATCH --output=results/%x-%j.out
            shutil.copyfile(out, dest / "job.out")
    try:
        results = [CheckResult.from_dict(c) for c in doc.get("checks", [])]
        # origin "cluster": the suite ran as a Slurm job; the config it ran with is not known here
        history.record_run(dest, doc, results, cluster.name, history_root, origin="cluster")
    except (ValueError, KeyError, TypeError, InputError) as e:
        say(f"fetch: run {rid}: not recorded ({e})")
        return False
    say(f"fetch: run {rid}: {doc.get('verdict')}, copied to {dest}")
    return True


def _still_active(doc: dict[str, Any], rid: str, say: Say, job_state: JobState) -> bool:
    """Whether the run's job is still queued, running or completing (said): its folder is
    copied once, after Slurm has ended the job, as ``mlenv acceptance --cluster`` does."""
    from mlenv.platforms import slurm

    job = doc.get("job") if isinstance(doc.get("job"), dict) else None
    if not job or not str(job.get("id", "")).isdigit():
        return False
    state = job_state(str(job["id"]))
    if state in slurm.ACTIVE:
        say(f"fetch: run {rid} (job {job['id']}) is {str(state).lower()}: not yet")
        return True
    return False


def _record(src: Path) -> dict[str, Any]:
    """The run's ``record.json`` (rank 0's history line), {} when absent or unreadable."""
    import json

    try:
        rec = json.loads((src / "record.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) else {}


def _ended_without_results(
    src: Path, rid: str, say: Say, job_state: JobState
) -> dict[str, Any] | None:
    """The ERROR document of a run whose job has ended with no ``results.json``; None (said)
    while the job is still active or when the folder names no job."""
    from mlenv.acceptance.reports import RunMeta
    from mlenv.platforms import slurm

    meta = RunMeta.read(src)
    job = (meta.job or {}).get("id") if meta is not None else None
    if not job:
        say(f"fetch: run {rid} has no results.json and names no Slurm job: skipped")
        return None
    state = job_state(str(job))
    if state in slurm.ACTIVE:
        say(f"fetch: run {rid} (job {job}) is {state.lower()}: not yet")
        return None
    why = f"job {job} ended {state or 'and is gone from Slurm'} before rank 0 wrote results.json"
    return slurm.judge_report(src, rid, forced_error=why, fallback_why=why, job=str(job))
