"""Read finished runs out of pod-0's results folder (``mlenv history CLUSTER --fetch``).

Scheduled re-checks (the CronJob) and any ``mlenv launch`` leave each run's report folder
in pod-0's workspace volume, ``/workspace/results/<run-id>/``. Two read-only scripts run
there through exec, as ``sync``'s listing does (the same argv machinery, so the oc and
kubectl clients and the fake behave alike):

- :data:`RUNS_SCRIPT` lists the run folders (names in the run-id format only, no links)
  with each one's ``record.json`` (the history line the run wrote) and whether it has a
  ``results.json`` (finished);
- :data:`PACK_SCRIPT` prints one run folder's regular files as JSON (relative path →
  base64), refusing a folder over :data:`MAX_RUN_BYTES`.

What comes back was written in a pod (a namespace neighbour's code could run there), so
it is data: names are checked here, paths before anything is written
(:func:`safe_files`), and the records by the history's own import.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass

from mlenv.cluster import treehash
from mlenv.cluster.api import ClusterClient
from mlenv.contract import is_run_id
from mlenv.errors import InfraError

RESULTS_DIR = "/workspace/results"  # where `mlenv.pod launch` puts a run (docs/contracts.md)
RECORD_JSON = "record.json"  # the run's history line (mlenv.acceptance.records.history)
MAX_RECORD_BYTES = 1 << 20
MAX_RUN_BYTES = 256 << 20  # one run's folder: reports and per-rank logs, not checkpoints

# Stdlib only and short: it runs with the pod image's python3 (treehash.POD_PYTHON).
RUNS_SCRIPT = r"""
import json, os, re, sys
root, limit = sys.argv[1], int(sys.argv[2])
rid = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
out = {}
try:
    names = sorted(os.listdir(root))
except (FileNotFoundError, NotADirectoryError):
    names = []
for n in names:
    d = os.path.join(root, n)
    if not rid.match(n) or os.path.islink(d) or not os.path.isdir(d):
        continue
    rec = os.path.join(d, "record.json")
    text = None
    if os.path.isfile(rec) and not os.path.islink(rec) and os.path.getsize(rec) <= limit:
        with open(rec, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
    res = os.path.join(d, "results.json")
    out[n] = {"record": text, "finished": os.path.isfile(res) and not os.path.islink(res)}
json.dump(out, sys.stdout, sort_keys=True)
"""

PACK_SCRIPT = r"""
import base64, json, os, sys
top, limit = os.path.join(sys.argv[1], sys.argv[2]), int(sys.argv[3])
out, total = {}, 0
for d, dirs, files in os.walk(top):
    dirs[:] = sorted(x for x in dirs if not os.path.islink(os.path.join(d, x)))
    for f in sorted(files):
        p = os.path.join(d, f)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        total += os.path.getsize(p)
        if total > limit:
            json.dump({"error": "the run folder holds more than %d bytes" % limit}, sys.stdout)
            sys.exit(0)
        with open(p, "rb") as fh:
            out[os.path.relpath(p, top).replace(os.sep, "/")] = base64.b64encode(fh.read()).decode("ascii")
json.dump({"files": out}, sys.stdout, sort_keys=True)
"""


@dataclass(frozen=True)
class PodRun:
    """One run folder in pod-0: its name (the run id), the record it wrote (None when it
    wrote none, e.g. the history could not be written) and whether it finished."""

    run_id: str
    record: dict[str, object] | None
    finished: bool


def _json(text: str, what: str, pod: str) -> object:
    try:
        return json.loads(text or "null")
    except ValueError:
        raise InfraError(f"{pod}: {what} printed no JSON: {text.strip()[:200]!r}") from None


def list_runs(
    client: ClusterClient, namespace: str, pod: str, *, timeout: float | None = None
) -> list[PodRun]:
    """The run folders under :data:`RESULTS_DIR` in ``pod`` (pod-0), oldest first (run
    ids sort by start)."""
    res = client.exec(
        pod,
        namespace,
        [*treehash.POD_PYTHON, RUNS_SCRIPT, RESULTS_DIR, str(MAX_RECORD_BYTES)],
        timeout=timeout,
    )
    data = _json(res.stdout, "the run listing", pod)
    if not isinstance(data, dict):
        raise InfraError(f"{pod}: the run listing is not a mapping")
    out = []
    for name, entry in sorted(data.items()):
        if not is_run_id(name) or not isinstance(entry, dict):
            continue  # the script lists only run-id folders; anything else is not ours to read
        rec = None
        if isinstance(entry.get("record"), str):
            try:
                parsed = json.loads(entry["record"])
            except ValueError:
                parsed = None
            rec = parsed if isinstance(parsed, dict) else None
        out.append(PodRun(name, rec, bool(entry.get("finished"))))
    return out


def read_run(
    client: ClusterClient,
    namespace: str,
    pod: str,
    run_id: str,
    *,
    timeout: float | None = None,
    root: str = RESULTS_DIR,
) -> dict[str, bytes]:
    """The files of one run folder under ``root`` in ``pod`` (pod-0's results folder; the
    re-check Pod's is another; relative path → content), checked by
    :func:`safe_files`; InfraError when the pod refuses or the folder is too large."""
    if not is_run_id(run_id):
        raise InfraError(f"{run_id!r} is not a run id")
    res = client.exec(
        pod,
        namespace,
        [*treehash.POD_PYTHON, PACK_SCRIPT, root, run_id, str(MAX_RUN_BYTES)],
        timeout=timeout,
    )
    data = _json(res.stdout, f"the copy of run {run_id}", pod)
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        why = data.get("error") if isinstance(data, dict) else None
        raise InfraError(f"{pod}: run {run_id} not copied: {why or 'unexpected answer'}")
    files: dict[str, bytes] = {}
    for rel, b64 in data["files"].items():
        if isinstance(rel, str) and isinstance(b64, str):
            try:
                files[rel] = base64.b64decode(b64, validate=True)
            except ValueError:
                raise InfraError(f"{pod}: run {run_id}: {rel!r} is not base64") from None
    return dict(safe_files(files))


def safe_files(files: dict[str, bytes]) -> Iterator[tuple[str, bytes]]:
    """The entries of ``files`` whose path stays inside the run folder: relative, no
    ``..``, ``.`` or empty component, no control character or backslash. The others are
    dropped (the pod's own script never prints them)."""
    for rel, data in sorted(files.items()):
        parts = rel.split("/")
        if (
            not rel
            or rel.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
            or any(ord(c) < 32 or ord(c) == 127 or c == "\\" for c in rel)
        ):
            continue
        yield rel, data
