"""``bundle verify`` accepts only what GNU tar and Python extract identically: a fuzzer of
tar variants (every type flag, GNU/PAX/ustar/old headers, sparse maps, long names,
duplicate names, renamed top folders, trailing data, damaged fields, reordering, several
gzip members) where every archive verify accepts must extract, with GNU tar, with Python's
tarfile and with ``bundle verify --extract``, to exactly the bytes MANIFEST lists.

Real processes (GNU tar), so an integration test. A fixed seed runs in ``make test``
(a few seconds); ``MLENV_FUZZ_CASES=5000 MLENV_FUZZ_SEED=…`` runs longer on demand."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Literal

import pytest
from typer.testing import CliRunner

from mlenv.acceptance.judging import baselines
from mlenv.acceptance.records import bundle
from mlenv.cli.app import app

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar is not installed"),
]

CASES = int(os.environ.get("MLENV_FUZZ_CASES", "300"))
SEED = int(os.environ.get("MLENV_FUZZ_SEED", "41"))
BLOCK = 512
RUN = "20260101-000000-abc123"
TOP = bundle.top_dir(RUN)
TYPE_FLAGS = b"0\x001234567ADEGIKLMNSVXgx"


def _checksum(block: bytearray) -> None:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\x00 " % sum(block)


def _members(raw: bytes) -> tuple[list[tuple[bytearray, bytes]], bytes]:
    """(header, data with padding) of each member of a plain archive, and what follows."""
    out, at = [], 0
    while raw[at : at + BLOCK] != b"\0" * BLOCK:
        head = bytearray(raw[at : at + BLOCK])
        size = _size(head)
        span = size + (-size % BLOCK)
        out.append((head, raw[at + BLOCK : at + BLOCK + span]))
        at += BLOCK + span
    return out, raw[at:]


def _size(head: bytearray) -> int:
    try:
        return int(bytes(head[124:136]).rstrip(b"\0 ") or b"0", 8)
    except ValueError:  # a field the fuzzer itself damaged: read as empty
        return 0


def _join(members: list[tuple[bytearray, bytes]], end: bytes) -> bytes:
    return b"".join(bytes(h) + d for h, d in members) + end


def _name(head: bytearray) -> str:
    name = bytes(head[:100]).split(b"\0", 1)[0]
    prefix = bytes(head[345:500]).split(b"\0", 1)[0]
    return ((prefix + b"/" + name) if prefix else name).decode("latin-1")


def _set_name(head: bytearray, name: str) -> None:
    head[0:100] = name.encode("latin-1")[:100].ljust(100, b"\0")
    head[345:500] = b"\0" * 155
    _checksum(head)


def _extra(name: str, data: bytes, fmt: Literal[0, 1, 2], **pax: str) -> bytes:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
    if pax:
        ti.pax_headers = dict(pax)
    return ti.tobuf(fmt) + data + b"\0" * (-len(data) % BLOCK)


def _sparse(name: str, real: bytes, forged: bytes) -> bytes:
    """A GNU old-style sparse member whose map writes ``forged`` over ``real`` (both chunks
    at offset 0): GNU tar unpacks the forgery, a reader of the raw bytes sees ``real`` first."""
    head = bytearray(BLOCK)
    head[0:100] = name.encode().ljust(100, b"\0")
    head[100:108] = b"0000644\0"
    head[108:116] = head[116:124] = b"0000000\0"
    stored = real + forged
    head[124:136] = b"%011o\0" % len(stored)
    head[136:148] = b"%011o\0" % 0
    head[156:157] = b"S"
    head[257:265] = b"ustar  \0"
    head[386:398] = b"%011o\0" % 0
    head[398:410] = b"%011o\0" % len(real)
    head[410:422] = b"%011o\0" % 0
    head[422:434] = b"%011o\0" % len(forged)
    head[483:495] = b"%011o\0" % max(len(real), len(forged))
    _checksum(head)
    return bytes(head) + stored + b"\0" * (-len(stored) % BLOCK)


def _mutate(rng: random.Random, raw: bytes, results: bytes) -> tuple[bytes, str]:
    """One variant of the archive's tar stream and a word on what was done."""
    members, end = _members(raw)
    forged = results.replace(b'"FAIL"', b'"PASS"').replace(b'"PASS"', b'"PASS"') + b" "
    done = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        i = rng.randrange(len(members))
        head, data = members[i]
        op = rng.choice(
            (
                "type",
                "magic",
                "pax",
                "gnu-long",
                "sparse",
                "duplicate",
                "rename-top",
                "trailing",
                "junk",
                "flip",
                "field",
                "swap",
                "mtime",
                "data",
                "prefix",
                "folder",
            )
        )
        done.append(op)
        if op == "type":
            head[156:157] = bytes([rng.choice(TYPE_FLAGS)])
            _checksum(head)
        elif op == "magic":
            head[257:265] = rng.choice((b"ustar  \0", b"\0" * 8, b"ustar\x0001", b"ustar\x0000"))
            _checksum(head)
        elif op == "pax":
            key = rng.choice(("path", "size", "linkpath", "GNU.sparse.map", "uid", "mtime"))
            value = {
                "path": f"{TOP}/run/results.json",
                "size": str(rng.randrange(0, 4096)),
                "linkpath": "/etc/passwd",
                "GNU.sparse.map": "0,10,0,10",
                "uid": "0",
                "mtime": "1",
            }[key]
            extra = _extra(_name(head), data[: _size(head)], tarfile.PAX_FORMAT, **{key: value})
            members[i : i + 1] = _members(extra + b"\0" * 1024)[0]
        elif op == "gnu-long":
            long = f"{TOP}/run/" + "l" * rng.randrange(90, 300) + ".log"
            extra = _extra(long, b"x", tarfile.GNU_FORMAT)
            members[i:i] = _members(extra + b"\0" * 1024)[0]
        elif op == "sparse":
            members.insert(
                i, *_members(_sparse(f"{TOP}/run/results.json", results, forged) + b"\0" * 1024)[0]
            )
        elif op == "duplicate":
            extra = _extra(f"{TOP}/run/results.json", forged, tarfile.USTAR_FORMAT)
            members.insert(rng.randrange(len(members) + 1), *_members(extra + b"\0" * 1024)[0])
        elif op == "rename-top":
            other = bundle.top_dir("20260202-000000-def456")
            for h, _d in members:
                _set_name(h, _name(h).replace(TOP, other, 1))
        elif op == "trailing":
            end = end + rng.choice(
                (
                    b"\0" * 1024,
                    _extra(f"{TOP}/run/results.json", forged, tarfile.USTAR_FORMAT),
                    b"junk",
                )
            )
        elif op == "junk":
            members.insert(i, (bytearray(rng.randbytes(BLOCK)), b""))
        elif op == "flip":
            at = rng.randrange(BLOCK)
            head[at] = rng.randrange(256)
            if rng.random() < 0.7:
                _checksum(head)
        elif op == "field":
            start, size = rng.choice(
                (
                    (100, 8),
                    (108, 8),
                    (116, 8),
                    (124, 12),
                    (136, 12),
                    (157, 100),
                    (265, 32),
                    (297, 32),
                    (329, 8),
                )
            )
            head[start : start + size] = rng.choice(
                (
                    b"\x80" + b"\0" * (size - 2) + b"\x01",
                    b" " * size,
                    b"7" * (size - 1) + b"\0",
                    b"root".ljust(size, b"\0"),
                )
            )
            _checksum(head)
        elif op == "swap" and len(members) > 2:
            j = rng.randrange(len(members))
            members[i], members[j] = members[j], members[i]
        elif op == "mtime":
            head[136:148] = b"%011o\0" % rng.randrange(8**11)
            _checksum(head)
        elif op == "data" and data:
            at = rng.randrange(len(data))
            members[i] = (head, data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
        elif op == "prefix":
            name = _name(head)
            if "/" in name and len(name.split("/", 1)[1]) <= 100:
                p, n = name.split("/", 1)
                head[0:100] = n.encode().ljust(100, b"\0")
                head[345:500] = p.encode().ljust(155, b"\0")
                _checksum(head)
        elif op == "folder":
            ti = tarfile.TarInfo(f"{TOP}/run/")
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 0
            members.insert(i, (bytearray(ti.tobuf(tarfile.USTAR_FORMAT)), b""))
    return _join(members, end), "+".join(done)


def _gz(rng: random.Random, raw: bytes) -> bytes:
    if rng.random() < 0.2:  # several gzip members: both readers concatenate them
        cut = rng.randrange(len(raw))
        return gzip.compress(raw[:cut]) + gzip.compress(raw[cut:])
    return gzip.compress(raw)


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def _expected(manifest: bytes) -> dict[str, str]:
    want = {f"{TOP}/{line[66:]}": line[:64] for line in manifest.decode().splitlines()}
    want[f"{TOP}/MANIFEST"] = hashlib.sha256(manifest).hexdigest()
    return want


def make_report(d: Path) -> Path:
    """A finished run's report folder: results, JUnit, summary, a PNG and rank/NCCL logs."""
    d.mkdir(parents=True)
    check = {
        "name": "compute.matmul",
        "status": "PASS",
        "scope": "rank",
        "node": "h0",
        "rank": 0,
        "metrics": {"tflops_fp32": 0.1},
    }
    doc = {
        "schema_version": 3,
        "run_id": RUN,
        "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T00:01:00+00:00",
        "verdict": "PASS",
        "reasons": [],
        "profile": "quick",
        "world": {"nodes": 1, "ranks": 1, "backend": "gloo", "device": "cpu", "hosts": ["h0"]},
        "checks": [check],
    }
    (d / "results.json").write_text(json.dumps(doc))
    (d / "results.jsonl").write_text(json.dumps(check) + "\n")
    (d / "junit.xml").write_text("<testsuites/>\n")
    (d / "summary.md").write_text("# Acceptance: PASS\n")
    (d / "tflops.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(64)))
    (d / "logs").mkdir()
    (d / "logs" / "rank-0.log").write_text("rank 0 says hello\n")
    (d / "nccl").mkdir()
    (d / "nccl" / "rank0.h0.123.log").write_text("NCCL INFO Bootstrap\n")
    return d


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes, bytes]:
    d = tmp_path_factory.mktemp("base")
    report = make_report(d / "report")
    doc = json.loads((report / "results.json").read_text())
    doc["verdict"] = "FAIL"
    (report / "results.json").write_text(json.dumps(doc))
    path, _ = bundle.build(
        report, d / "b.tar.gz", baseline=baselines.load(baselines.builtin_dir() / "cpu.yaml")
    )
    raw = gzip.decompress(path.read_bytes())
    return (
        raw,
        bundle.read_member(path, "run/results.json") or b"",
        bundle.read_member(path, "MANIFEST") or b"",
    )


def test_every_accepted_variant_extracts_to_the_hashed_bytes_everywhere(
    base: tuple[bytes, bytes, bytes], tmp_path: Path
) -> None:
    raw, results, manifest = base
    rng = random.Random(SEED)
    want = _expected(manifest)
    accepted: list[str] = []
    for case in range(CASES):
        variant, what = _mutate(rng, raw, results) if case else (raw, "none")
        archive = tmp_path / f"v{case}.tar.gz"
        archive.write_bytes(_gz(rng, variant))
        if bundle.verify(archive):
            archive.unlink()
            continue
        accepted.append(what)
        gnu, py, ours = (tmp_path / f"{k}{case}" for k in ("gnu", "py", "ours"))
        gnu.mkdir()
        subprocess.run(
            ["tar", "-xzf", str(archive), "-C", str(gnu)], check=True, capture_output=True
        )
        with tarfile.open(archive, "r:gz") as tf:
            tf.extractall(py, filter="fully_trusted")
        where, problems = bundle.extract(archive, ours)
        assert problems == [] and where == ours / TOP, (case, what)
        for name, got in (
            ("GNU tar", _tree(gnu)),
            ("tarfile", _tree(py)),
            ("--extract", _tree(ours)),
        ):
            assert got == want, (case, what, name)
        for d in (gnu, py, ours):
            shutil.rmtree(d)
        archive.unlink()
    print(f"accepted {len(accepted)} of {CASES}:", sorted(set(accepted)))
    # the fuzzer must reach both sides: the untouched archive and benign changes pass
    assert accepted[0] == "none" and len(accepted) > 1, accepted


def test_a_sparse_member_with_an_overlapping_map_is_refused(
    base: tuple[bytes, bytes, bytes], tmp_path: Path
) -> None:
    """GNU tar writes the forged chunk over the real one; verify once hashed the real bytes."""
    raw, results, _ = base
    members, end = _members(raw)
    forged = results.replace(b'"FAIL"', b'"PASS"')
    at = next(i for i, (h, _) in enumerate(members) if _name(h) == f"{TOP}/run/results.json")
    members[at : at + 1] = _members(
        _sparse(f"{TOP}/run/results.json", results, forged) + b"\0" * 1024
    )[0]
    archive = tmp_path / "sparse.tar.gz"
    archive.write_bytes(gzip.compress(_join(members, end)))
    out = tmp_path / "gnu"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(out)], capture_output=True, check=False)
    assert b'"PASS"' in (out / TOP / "run" / "results.json").read_bytes()  # the threat is real
    problems = bundle.verify(archive)
    assert re.fullmatch(
        r"refused: data the verification cannot read at byte [0-9]+ of the tar stream \(not a "
        r"POSIX ustar header \(GNU, old-style or unknown format\), named "
        rf"'{TOP}/run/results.json': GNU tar may unpack files there that no MANIFEST check saw\)",
        problems[0],
    ), problems
    r = CliRunner().invoke(
        app, ["bundle", "verify", str(archive), "--extract", str(tmp_path / "x")]
    )
    assert r.exit_code == 1 and not (tmp_path / "x" / TOP).exists()


def test_a_bundle_renamed_to_another_run_does_not_verify(
    base: tuple[bytes, bytes, bytes], tmp_path: Path
) -> None:
    raw, _, _ = base
    members, end = _members(raw)
    other = bundle.top_dir("20260202-000000-def456")
    for h, _d in members:
        _set_name(h, _name(h).replace(TOP, other, 1))
    archive = tmp_path / "renamed.tar.gz"
    archive.write_bytes(gzip.compress(_join(members, end)))
    assert bundle.verify(archive) == [
        f"tampered: the top folder {other} is not {TOP}, the folder of run {RUN}"
    ]


def test_extract_writes_exactly_the_verified_files(
    base: tuple[bytes, bytes, bytes], tmp_path: Path
) -> None:
    raw, _, manifest = base
    archive = tmp_path / "b.tar.gz"
    archive.write_bytes(gzip.compress(raw))
    r = CliRunner().invoke(
        app, ["bundle", "verify", str(archive), "--extract", str(tmp_path / "out")]
    )
    assert r.exit_code == 0, r.output
    assert f"extracted: {tmp_path / 'out' / TOP}/" in r.stdout
    assert _tree(tmp_path / "out") == _expected(manifest)
    r = CliRunner().invoke(
        app, ["bundle", "verify", str(archive), "--extract", str(tmp_path / "out")]
    )
    assert r.exit_code == 1 and "exists: extract into an empty folder" in r.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [TOP]  # no temp folder left
