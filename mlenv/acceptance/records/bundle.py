"""Sign-off bundle: one ``.tar.gz`` per run that a reviewer can check file by file.

Layout (the contract in docs/acceptance.md, "Sign-off bundle"), all under one top folder
``mlenv-bundle-<run id>/``::

    MANIFEST          sha256 and path of every other file ("<hex>  <path>", sha256sum -c reads it)
    bundle.json       index: run, verdict, cluster, config + sha256, deployment, baseline with
                      every threshold's source, versions per node, logs
    run/...           the report folder: results.json(l), run.json, record.json, junit.xml,
                      summary.md, its PNGs, logs/ (each rank's log, NCCL logs) when present
    config/<name>     the cluster config (cluster runs)
    deployed/<mode>/  the rendered manifests and whether each matches a fresh render
    baseline/<file>   the baseline file the verdict used

``verify`` recomputes every hash without extracting anything and refuses what a
hostile archive could use against whoever unpacks it: absolute paths, ``..``, links,
devices, duplicate names, entries outside the top folder, and any data it could not read
(a bad header, bytes after the end-of-archive blocks: GNU tar unpacks past both).
Stdlib only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import Any

from mlenv.acceptance.core.result import CheckResult
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.records.history import LOCAL_CLUSTER, node_versions
from mlenv.contract import RESULTS_JSON, read_results

BUNDLE_SCHEMA = 1
MANIFEST = "MANIFEST"
INDEX = "bundle.json"
ARCHIVE_PREFIX = "mlenv-bundle-"
MAX_MEMBER_BYTES = 256 * 2**20  # read_member: no results.json is this big
_MANIFEST_LINE = re.compile(r"([0-9a-f]{64})  (.+)")
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")
LOCAL_DEPLOYMENT: dict[str, Any] = {
    "deployed": False,
    "note": "a --local run on this machine: nothing was deployed, so no cluster config or manifests apply",
    "trees": [],
}


class BundleError(Exception):
    """An archive that cannot be read as a bundle."""


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def top_dir(run_id: str) -> str:
    """``mlenv-bundle-<run id>`` with anything but ``[A-Za-z0-9._-]`` replaced."""
    return ARCHIVE_PREFIX + (_SAFE_ID.sub("_", run_id).strip("._") or "run")


def default_path(report_dir: Path, run_id: str) -> Path:
    """``<report dir>/mlenv-bundle-<run id>.tar.gz``."""
    return report_dir / f"{top_dir(run_id)}.tar.gz"


# A file last written this long before the run started is not the run's (clocks of the
# hosts writing to shared storage may differ by a little; an earlier run's logs by far more).
BEFORE_RUN_SLACK_S = 300.0


def run_files(report_dir: Path, started: float | None = None) -> tuple[list[Path], list[str]]:
    """Regular files of the report folder (recursively) and notes on what was left out.

    Left out: earlier bundles, temp files, the run's claim lock, links (a link could pull any
    file of the machine into what a customer receives), and with ``started`` (the run's
    start, epoch seconds) every file last written well before it: another run's or another
    host's leftovers are not this run's evidence.
    """
    from mlenv.acceptance.records.rundir import LOCK_FILE

    files: list[Path] = []
    notes: list[str] = []
    for dirpath, dirnames, filenames in os.walk(report_dir):
        d = Path(dirpath)
        for name in sorted(dirnames):
            if (d / name).is_symlink():
                notes.append(f"left out {(d / name).relative_to(report_dir)}/: a link")
        dirnames[:] = sorted(n for n in dirnames if not (d / n).is_symlink())
        for name in sorted(filenames):
            p = d / name
            rel = p.relative_to(report_dir).as_posix()
            if p.is_symlink():
                notes.append(f"left out {rel}: a link")
            elif _unsafe(rel):
                notes.append(
                    f"left out {rel.encode('unicode_escape').decode('ascii')}: {_unsafe(rel)}"
                )
            elif (
                name.startswith(ARCHIVE_PREFIX)
                and name.endswith(".tar.gz")
                or name.endswith(".tmp")
                or rel == LOCK_FILE
            ):
                continue
            elif not p.is_file():
                notes.append(f"left out {rel}: not a regular file")
            elif started is not None and p.stat().st_mtime < started - BEFORE_RUN_SLACK_S:
                notes.append(f"left out {rel}: written before the run started (not this run's)")
            else:
                files.append(p)
    return files, notes


def _epoch(iso: object) -> float | None:
    """Seconds since the epoch of an ISO time with its zone (``started``), else None."""
    from datetime import datetime

    try:
        t = datetime.fromisoformat(str(iso))
    except ValueError:
        return None
    return t.timestamp() if t.tzinfo is not None else None


def baseline_index(b: baselines.Baseline | None, archived_as: str | None) -> dict[str, Any] | None:
    """The baseline as bundle.json records it: every rule and expected value with its source."""
    if b is None:
        return None
    return {
        "model": b.model,
        "file": archived_as,
        "source_path": b.path,
        "sha256": sha256_file(Path(b.path)) if Path(b.path).is_file() else None,
        "rules": [asdict(r) for r in b.rules],
        "expected": [asdict(e) for e in b.expected],
        "outliers": dict(b.outliers),
        "tolerances": [asdict(t) for t in b.tolerances],
    }


def _info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = size, int(mtime), 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def build(
    report_dir: Path,
    out: Path | None = None,
    *,
    cluster: str = LOCAL_CLUSTER,
    config: tuple[str, bytes] | None = None,
    deployment: dict[str, Any] | None = None,
    deployed_files: dict[str, bytes] | None = None,
    baseline: baselines.Baseline | None = None,
    ran: dict[str, Any] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Write the bundle of the run in ``report_dir``; returns (archive, bundle.json).

    ``config``: (file name, content) of the cluster config; ``deployed_files``: archive
    path (``deployed/<mode>/<file>``) → content, described by ``deployment`` (see
    :data:`LOCAL_DEPLOYMENT` for a --local run); ``ran``: where and on what the run ran
    (``signoff.what_ran``). Raises BundleError without results.json.
    """
    doc = read_results(report_dir)
    if doc is None:
        raise BundleError(
            f"{report_dir}: no readable {RESULTS_JSON} (absent, not JSON, or not an object)"
        )
    try:
        results = [CheckResult.from_dict(c) for c in doc["checks"]]
    except (ValueError, KeyError, TypeError) as e:
        raise BundleError(
            f"{report_dir}: no readable {RESULTS_JSON} ({type(e).__name__}: {e})"
        ) from None
    run_id = str(doc.get("run_id") or "unknown")
    files, notes = run_files(report_dir, _epoch(doc.get("started")))
    entries: dict[str, bytes | Path] = {
        f"run/{p.relative_to(report_dir).as_posix()}": p for p in files
    }
    config_index = None
    if config is not None:
        name, data = config
        entries[f"config/{PurePosixPath(name).name}"] = data
        config_index = {
            "file": f"config/{PurePosixPath(name).name}",
            "source": name,
            "sha256": sha256_bytes(data),
        }
    for arc, data in (deployed_files or {}).items():
        entries[arc] = data
    archived_baseline = None
    if baseline is not None and Path(baseline.path).is_file():
        archived_baseline = f"baseline/{Path(baseline.path).name}"
        entries[archived_baseline] = Path(baseline.path)
    logs = sorted(
        a for a in entries if a.startswith("run/") and (a.endswith(".log") or "/logs/" in a)
    )
    index = {
        "bundle_schema": BUNDLE_SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "run_id": run_id,
        "verdict": doc.get("verdict"),
        "reasons": doc.get("reasons", []),
        "started": doc.get("started"),
        "finished": doc.get("finished"),
        "profile": doc.get("profile"),
        "world": doc.get("world"),
        "cluster": cluster,
        "ran": ran,
        "config": config_index,
        "deployment": deployment if deployment is not None else LOCAL_DEPLOYMENT,
        "baseline": baseline_index(baseline, archived_baseline),
        "versions": node_versions(results, doc),
        "logs": logs or "none in the report folder",
        "left_out": notes,
    }
    text = json.dumps(index, indent=2, ensure_ascii=False) + "\n"
    entries[INDEX] = text.encode("utf-8")
    index = json.loads(text)  # what the file says (tuples became lists)
    manifest = []
    for arc in sorted(entries):
        src = entries[arc]
        manifest.append(
            f"{sha256_file(src) if isinstance(src, Path) else sha256_bytes(src)}  {arc}"
        )
    entries[MANIFEST] = ("\n".join(manifest) + "\n").encode("utf-8")
    out = out or default_path(report_dir, run_id)
    top = top_dir(run_id)
    now = time.time()
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for arc in [MANIFEST, *sorted(a for a in entries if a != MANIFEST)]:
            src = entries[arc]
            if isinstance(src, Path):
                st = src.stat()
                with src.open("rb") as f:
                    tf.addfile(_info(f"{top}/{arc}", st.st_size, st.st_mtime), f)
            else:
                tf.addfile(_info(f"{top}/{arc}", len(src), now), io.BytesIO(src))
    os.replace(tmp, out)
    return out, index


# -- reading and verifying -----------------------------------------------------------------


def _unsafe(name: str) -> str | None:
    """Why an archive member name is refused, or None."""
    if not name or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if ".." in parts:
        return "'..' in the path"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "control character in the name"
    return None


def _members(
    tf: tarfile.TarFile, on_file: Callable[[str, tarfile.TarInfo], None] | None = None
) -> tuple[str, dict[str, tarfile.TarInfo], list[str]]:
    """(top folder, relative name → regular-file member, problems) of an open archive.

    ``on_file`` is called for each accepted file as the archive streams past (reading it
    then needs no seek back through the gzip stream).
    """
    problems: list[str] = []
    files: dict[str, tarfile.TarInfo] = {}
    tops: set[str] = set()
    for m in tf:
        shown = m.name.encode("unicode_escape").decode("ascii")
        why = _unsafe(m.name)
        if why:
            problems.append(f"refused: {shown}: {why}")
            continue
        if m.issym() or m.islnk():
            problems.append(
                f"refused: {shown}: a link (to {m.linkname.encode('unicode_escape').decode('ascii')})"
            )
            continue
        if m.isdir():
            continue
        if not m.isreg():
            problems.append(f"refused: {shown}: not a regular file")
            continue
        top, _, rel = m.name.strip("/").partition("/")
        tops.add(top)
        if not rel:
            problems.append(f"extra: {shown} (outside the bundle's top folder)")
            continue
        # run/./results.json and run//results.json unpack onto run/results.json: one name
        rel = PurePosixPath(rel).as_posix()
        if rel in files:
            problems.append(f"refused: {shown}: appears twice in the archive")
            continue
        files[rel] = m
        if on_file is not None:
            on_file(rel, m)
    if len(tops) > 1:
        problems.append(f"refused: more than one top folder ({', '.join(sorted(tops))})")
    unread = _unread_data(tf)
    if unread:
        problems.append(unread)
    return (sorted(tops)[0] if tops else ""), files, problems


def _unread_data(tf: tarfile.TarFile) -> str | None:
    """Why the archive holds bytes past the last member tarfile read, or None.

    tarfile stops without a word at the first bad header or end-of-archive block; GNU tar
    skips a bad header ("Skipping to next header") and extracts what follows. So a junk
    header followed by a forged run/results.json, or members appended after the end
    blocks, would be unpacked by a reviewer but never seen by verify. Past the last member
    only zeros (the end blocks and the record padding) may follow.
    """
    at = tf.offset  # where the header that ended the iteration starts
    f = tf.fileobj
    f.seek(at)
    pos = at
    while chunk := f.read(1 << 20):
        stripped = chunk.lstrip(b"\0")
        if stripped:
            where = pos + len(chunk) - len(stripped)
            return (
                f"refused: data the verification cannot read at byte {where} of the tar stream "
                f"(a damaged header or something after the end-of-archive blocks: GNU tar may unpack "
                f"files there that no MANIFEST check saw)"
            )
        pos += len(chunk)
    return None


def _open(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:gz")
    except (OSError, tarfile.TarError, EOFError) as e:
        raise BundleError(f"not a readable .tar.gz archive ({type(e).__name__}: {e})") from None


def manifest_sha256(path: Path) -> str | None:
    """sha256 of the bundle's MANIFEST: the one figure to send a reviewer through a second channel."""
    try:
        data = read_member(path, MANIFEST, missing_ok=True)
    except BundleError:
        return None
    return sha256_bytes(data) if data is not None else None


def verify(path: Path) -> list[str]:
    """Problems with the bundle at ``path`` (empty: every file matches MANIFEST, nothing extra).

    Each problem is one line naming the file: ``tampered: run/results.json (…)``,
    ``missing: …``, ``extra: …``, ``refused: …``.
    """
    digests: dict[str, str] = {}
    kept: dict[str, bytes] = {}

    def on_file(rel: str, m: tarfile.TarInfo) -> None:
        f = tf.extractfile(m)
        if f is None:
            return
        h = hashlib.sha256()
        while chunk := f.read(1 << 20):
            h.update(chunk)
            if rel == MANIFEST and sum(len(x) for x in kept.values()) < MAX_MEMBER_BYTES:
                kept[rel] = kept.get(rel, b"") + chunk
        digests[rel] = h.hexdigest()

    try:
        tf = _open(path)
        with tf:
            _, files, problems = _members(tf, on_file)
    except BundleError as e:
        return [f"unreadable: {e}"]
    except (OSError, tarfile.TarError, EOFError, zlib.error) as e:
        return [f"unreadable: the archive is damaged ({type(e).__name__}: {e})"]
    manifest_raw = kept.get(MANIFEST) if MANIFEST in files else None
    if manifest_raw is None:
        return [*problems, f"missing: {MANIFEST} (nothing to verify against)"]
    listed: dict[str, str] = {}
    for i, line in enumerate(manifest_raw.decode("utf-8", errors="replace").splitlines(), 1):
        mt = _MANIFEST_LINE.fullmatch(line)
        if not mt or _unsafe(mt.group(2)):
            problems.append(f"tampered: {MANIFEST} line {i} is not '<sha256>  <path>'")
            continue
        if mt.group(2) in listed:
            problems.append(f"tampered: {MANIFEST} lists {mt.group(2)} twice")
        listed[mt.group(2)] = mt.group(1)
    for rel, want in sorted(listed.items()):
        got = digests.get(rel)
        if got is None:
            problems.append(f"missing: {rel} (listed in {MANIFEST})")
        elif got != want:
            problems.append(f"tampered: {rel} (sha256 {got[:16]}…, {MANIFEST} says {want[:16]}…)")
    for rel in sorted(set(digests) - set(listed) - {MANIFEST}):
        problems.append(f"extra: {rel} (not in {MANIFEST})")
    return problems


def _read(tf: tarfile.TarFile, m: tarfile.TarInfo | None) -> bytes | None:
    if m is None:
        return None
    if m.size > MAX_MEMBER_BYTES:
        raise BundleError(f"{m.name}: {m.size} bytes, more than a bundle file should hold")
    f = tf.extractfile(m)
    return f.read() if f is not None else None


def read_member(path: Path, rel: str, missing_ok: bool = False) -> bytes | None:
    """The content of ``<top>/<rel>`` in a bundle (no extraction); links and unsafe names refused."""
    with _open(path) as tf:
        try:
            _, files, problems = _members(tf)
            refused = [p for p in problems if p.startswith("refused")]
            if refused:
                raise BundleError(refused[0])
            data = _read(tf, files.get(rel))
        except (OSError, tarfile.TarError, EOFError, zlib.error) as e:
            raise BundleError(f"the archive is damaged ({type(e).__name__}: {e})") from None
    if data is None and not missing_ok:
        raise BundleError(f"no {rel} in the bundle")
    return data
