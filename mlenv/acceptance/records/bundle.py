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

``verify`` recomputes every hash with its own strict tar reader and accepts only the one
form every extractor reads alike (below, "reading and verifying"): anything else — links,
devices, sparse members, PAX or GNU headers, duplicate or non-canonical names, a second
top folder, data it could not read — is refused, and the run id binds the top folder,
bundle.json and results.json. ``extract`` writes exactly the bytes it hashed.
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


def _unarchivable(name: str) -> str | None:
    """Why ``name`` cannot be a member of a bundle that verifies, or None: each part of the
    path of printable ASCII from a small set, and short enough for a plain ustar header."""
    if not all(_NAME_OK.fullmatch(part) for part in name.split("/")):
        return "a name outside [A-Za-z0-9._+@=,:~-] (a bundle holds plain names only)"
    try:
        _info(name, 0, 0).tobuf(tarfile.USTAR_FORMAT)
    except ValueError:
        return "a name too long for a plain tar header"
    return None


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
    top = top_dir(run_id)
    for arc in sorted(entries):
        why = _unarchivable(f"{top}/{arc}")
        if why:  # verify takes one plain form of a name only: what cannot be written so stays out
            notes.append(f"left out {_shown(arc)}: {why}")
            del entries[arc]
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
    now = time.time()
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, "w:gz", format=tarfile.USTAR_FORMAT) as tf:
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
#
# verify reads the archive with its own strict reader, not tarfile: a bundle is accepted only
# in the one form that every extractor reads alike. Python's tarfile and GNU tar disagree on
# sparse maps (GNU tar writes the bytes its map says, tarfile hands out the raw ones), PAX
# size and path overrides, GNU long names, old-style and GNU headers, base-256 numbers and
# damaged headers (GNU tar skips to the next one). So: POSIX ustar headers only ("ustar\0"
# "00"), each checksum right, type 0 (a regular file) or 5 (a folder) only, every field in
# its plain form (octal digits, NUL-padded, no link name), mode 0644/0755, owner 0, names
# of printable ASCII in canonical form under one top folder, each once, MANIFEST first and
# the rest in byte order, padding and the end of the archive all zeros. What passes, GNU
# tar and Python both extract to exactly the bytes that were hashed (the fuzzer in
# tests/unit/acceptance/test_bundle_fuzz.py checks that against both).

_BLOCK = 512
_USTAR = b"ustar\x0000"
_REGULAR, _FOLDER = b"0", b"5"
_NAME_OK = re.compile(r"[A-Za-z0-9._+@=,:~-]+")  # one path component, printable ASCII


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


def _shown(name: str | bytes) -> str:
    text = name.decode("latin-1") if isinstance(name, bytes) else name
    return text.encode("unicode_escape").decode("ascii")


class _Refused(Exception):
    """A header the strict reader does not take (the message names why)."""


def _field(block: bytes, start: int, size: int) -> bytes:
    """A NUL-terminated text field; bytes after its NUL must all be NUL (one spelling)."""
    raw = block[start : start + size]
    text, _, rest = raw.partition(b"\0")
    if rest.strip(b"\0"):
        raise _Refused("a header field holds data after its end")
    return text


def _octal(block: bytes, start: int, size: int, what: str) -> int:
    """A plain octal number field (digits, then NUL or space padding)."""
    raw = block[start : start + size]
    digits = raw.rstrip(b"\0 ")
    if not digits or not re.fullmatch(rb"[0-7]+", digits) or raw[len(digits) :].strip(b"\0 "):
        raise _Refused(f"its {what} is not a plain octal number")
    return int(digits, 8)


def _header(block: bytes) -> tuple[str, bytes, int]:
    """(name, type, size) of a ustar header block; _Refused for anything else."""
    try:
        chk = _octal(block, 148, 8, "checksum")
    except _Refused:
        raise _Refused("a damaged header (no checksum)") from None
    if chk != sum(block[:148]) + 8 * 32 + sum(block[156:]):
        raise _Refused("a damaged header (its checksum does not match)")
    if block[257:265] != _USTAR:
        raise _Refused("not a POSIX ustar header (GNU, old-style or unknown format)")
    kind = block[156:157]
    size = _octal(block, 124, 12, "size")
    name = _field(block, 0, 100)
    prefix = _field(block, 345, 155)
    full = (prefix + b"/" + name) if prefix else name
    try:
        text = full.decode("ascii")
    except UnicodeDecodeError:
        raise _Refused("a name that is not ASCII") from None
    if kind == b"x" or kind == b"g":
        raise _Refused("a PAX header (it may override the size or the path)")
    if kind in (b"L", b"K"):
        raise _Refused("a GNU long name or link header")
    if kind == b"S":
        raise _Refused("a GNU sparse file (its map decides what tar writes)")
    if kind in (b"1", b"2"):
        raise _Refused(f"a link (to {_shown(_field(block, 157, 100))})")
    if kind not in (_REGULAR, _FOLDER):
        raise _Refused(f"not a regular file (type {_shown(kind)})")
    if _field(block, 157, 100):
        raise _Refused("a link name on a file")
    mode = _octal(block, 100, 8, "mode")
    if mode != (0o644 if kind == _REGULAR else 0o755):
        raise _Refused(f"mode {mode:o} (a bundle's files are 644, its folders 755)")
    if _octal(block, 108, 8, "owner") or _octal(block, 116, 8, "group"):
        raise _Refused("an owner other than 0")
    _octal(block, 136, 12, "mtime")
    for start, size_, what in ((265, 32, "owner name"), (297, 32, "group name")):
        if _field(block, start, size_):
            raise _Refused(f"an {what}")
    for start in (329, 337):  # device numbers: empty or plain octal, as tarfile writes them
        if block[start : start + 8].strip(b"\0 "):
            _octal(block, start, 8, "device number")
    if block[500:].strip(b"\0"):
        raise _Refused("data in the header's unused bytes")
    if kind == _FOLDER and size:
        raise _Refused("a folder with content")
    return text, kind, size


class _Scan:
    """One strict pass over a bundle: the hash of every file, the bytes of those asked for,
    and every problem; with ``into``, each file's bytes are written there as they stream by."""

    def __init__(self, keep: tuple[str, ...] = (), into: Path | None = None) -> None:
        self.keep = keep
        self.into = into
        self.top = ""
        self.digests: dict[str, str] = {}
        self.kept: dict[str, bytes] = {}
        self.problems: list[str] = []
        self.order: list[str] = []

    def run(self, path: Path) -> _Scan:
        import gzip

        try:
            with gzip.open(path, "rb") as f:
                self._read(f)
        except (OSError, EOFError, zlib.error) as e:
            self.problems.append(f"unreadable: the archive is damaged ({type(e).__name__}: {e})")
        return self

    def _refuse_at(self, at: int, why: str) -> None:
        self.problems.append(
            f"refused: data the verification cannot read at byte {at} of the tar stream "
            f"({why}: GNU tar may unpack files there that no MANIFEST check saw)"
        )

    def _read(self, f: Any) -> None:
        at = 0
        seen: set[str] = set()
        while True:
            block = f.read(_BLOCK)
            if not block:
                self._refuse_at(at, "the archive ends without its end-of-archive blocks")
                return
            if len(block) < _BLOCK:
                self._refuse_at(at, "a header cut short")
                return
            if block == b"\0" * _BLOCK:  # the end: only zeros may follow
                rest = at + _BLOCK
                while chunk := f.read(1 << 20):
                    stripped = chunk.lstrip(b"\0")
                    if stripped:
                        self._refuse_at(
                            rest + len(chunk) - len(stripped),
                            "something after the end-of-archive blocks",
                        )
                        return
                    rest += len(chunk)
                return
            try:
                name, kind, size = _header(block)
            except _Refused as e:
                shown = _shown(block[:100].split(b"\0", 1)[0][:60])
                why = str(e)
                if why.startswith("a damaged header") or why.startswith("not a POSIX"):
                    self._refuse_at(at, f"{why}, named {shown!r}")
                else:
                    self.problems.append(f"refused: {shown}: {why}")
                return  # past a header it does not take, nothing can be read alike
            at += _BLOCK
            if not self._entry(name, kind, seen):
                return
            if not self._data(f, name, kind, size):
                self._refuse_at(at, "a file cut short")
                return
            at += size + (-size % _BLOCK)

    def _entry(self, name: str, kind: bytes, seen: set[str]) -> bool:
        why = _unsafe(name)
        if why:
            self.problems.append(f"refused: {_shown(name)}: {why}")
            return False
        bare = name[:-1] if kind == _FOLDER and name.endswith("/") else name
        canon = PurePosixPath(bare).as_posix()
        top, _, rel = canon.partition("/")
        if canon in seen:
            self.problems.append(f"refused: {_shown(name)}: appears twice in the archive")
            return False
        if canon != bare or not all(_NAME_OK.fullmatch(part) for part in canon.split("/")):
            self.problems.append(f"refused: {_shown(name)}: a name not in canonical form")
            return False
        seen.add(canon)
        if self.top and top != self.top:
            self.problems.append(f"refused: more than one top folder ({self.top}, {top})")
            return False
        self.top = top
        if kind == _FOLDER:
            return True
        if not rel:
            self.problems.append(f"extra: {_shown(name)} (outside the bundle's top folder)")
            return False
        # out of order: said, and read on (every other problem is named too)
        if not self.order and rel != MANIFEST:
            self.problems.append(
                f"refused: {_shown(name)}: the archive does not start with {MANIFEST}"
            )
        elif self.order and (
            rel == MANIFEST or (self.order[-1] != MANIFEST and rel <= self.order[-1])
        ):
            self.problems.append(
                f"refused: {_shown(name)}: out of order ({MANIFEST} first, then names in byte order)"
            )
        self.order.append(rel)
        return True

    def _data(self, f: Any, name: str, kind: bytes, size: int) -> bool:
        rel = name.partition("/")[2]
        out = None
        if self.into is not None:
            dest = self.into / (name.rstrip("/"))
            if kind == _FOLDER:
                dest.mkdir(parents=True, exist_ok=True)
                return True
            dest.parent.mkdir(parents=True, exist_ok=True)
            out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        h = hashlib.sha256()
        keep = rel in self.keep and size <= MAX_MEMBER_BYTES
        chunks: list[bytes] = []
        left = size
        try:
            while left:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    return False
                left -= len(chunk)
                h.update(chunk)
                if keep:
                    chunks.append(chunk)
                if out is not None:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view) :]
        finally:
            if out is not None:
                os.close(out)
        pad = f.read(-size % _BLOCK)
        if len(pad) != -size % _BLOCK or pad.strip(b"\0"):
            return False
        if kind == _REGULAR:
            self.digests[rel] = h.hexdigest()
            if keep:
                self.kept[rel] = b"".join(chunks)
            elif rel in self.keep:
                self.problems.append(
                    f"refused: {rel}: {size} bytes, more than a bundle file should hold"
                )
        return True


def manifest_sha256(path: Path) -> str | None:
    """sha256 of the bundle's MANIFEST: the one figure to send a reviewer through a second channel."""
    scan = _Scan(keep=(MANIFEST,)).run(path)
    data = scan.kept.get(MANIFEST)
    return sha256_bytes(data) if data is not None and not scan.problems else None


def _check(scan: _Scan) -> list[str]:
    """Every problem of a finished scan, MANIFEST and run id checks included."""
    problems = list(scan.problems)
    if problems and problems[0].startswith("unreadable"):
        return problems
    manifest_raw = scan.kept.get(MANIFEST)
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
        got = scan.digests.get(rel)
        if got is None:
            problems.append(f"missing: {rel} (listed in {MANIFEST})")
        elif got != want:
            problems.append(f"tampered: {rel} (sha256 {got[:16]}…, {MANIFEST} says {want[:16]}…)")
    for rel in sorted(set(scan.digests) - set(listed) - {MANIFEST}):
        problems.append(f"extra: {rel} (not in {MANIFEST})")
    if not problems:
        problems += _run_id_bound(scan)
    return problems


def _run_id_bound(scan: _Scan) -> list[str]:
    """The run id bundle.json names (hashed in MANIFEST) must be the one results.json holds
    and the one the top folder is named for: a bundle renamed to another run does not verify."""
    try:
        index = json.loads(scan.kept.get(INDEX, b"").decode("utf-8"))
        results = json.loads(scan.kept.get(f"run/{RESULTS_JSON}", b"").decode("utf-8"))
        run_id = index["run_id"]
        have = results["run_id"]
    except (ValueError, KeyError, TypeError):
        return [f"tampered: {INDEX} or run/{RESULTS_JSON} does not name the run"]
    out = []
    if have != run_id:
        out.append(
            f"tampered: run/{RESULTS_JSON} holds run {_shown(str(have))}, {INDEX} names run {_shown(str(run_id))}"
        )
    if scan.top != top_dir(str(run_id)):
        out.append(
            f"tampered: the top folder {_shown(scan.top)} is not {top_dir(str(run_id))}, "
            f"the folder of run {_shown(str(run_id))}"
        )
    return out


def verify(path: Path) -> list[str]:
    """Problems with the bundle at ``path`` (empty: every file matches MANIFEST, nothing extra).

    Each problem is one line naming the file: ``tampered: run/results.json (…)``,
    ``missing: …``, ``extra: …``, ``refused: …``.
    """
    return _check(_Scan(keep=(MANIFEST, INDEX, f"run/{RESULTS_JSON}")).run(path))


def extract(path: Path, dest: Path) -> tuple[Path, list[str]]:
    """Verify the bundle and write exactly the bytes that were hashed under ``dest/<top>/``
    in the same pass; (that folder, problems). With any problem nothing is left behind."""
    import shutil
    import tempfile

    dest.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".mlenv-extract-", dir=dest))
    try:
        scan = _Scan(keep=(MANIFEST, INDEX, f"run/{RESULTS_JSON}"), into=work).run(path)
        problems = _check(scan)
        target = dest / scan.top
        if not problems and (target.exists() or target.is_symlink()):
            problems = [f"refused: {target} exists: extract into an empty folder"]
        if problems:
            return target, problems
        os.rename(work / scan.top, target)
        return target, []
    except OSError as e:
        return dest, [f"unreadable: cannot extract ({e.strerror or e})"]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_member(path: Path, rel: str, missing_ok: bool = False) -> bytes | None:
    """The content of ``<top>/<rel>`` in a bundle (no extraction), read by the strict reader:
    an archive it refuses (links, unsafe names, anything extractors read differently) is a
    BundleError."""
    scan = _Scan(keep=(rel,)).run(path)
    if scan.problems:
        raise BundleError(scan.problems[0].removeprefix("unreadable: "))
    data = scan.kept.get(rel)
    if data is None and not missing_ok:
        raise BundleError(f"no {rel} in the bundle")
    return data
