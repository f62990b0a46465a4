"""the in-pod scripts of ``history --fetch`` over real folders (the fake runs the
same scripts), and the path check on what a pod sends back."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

from mlenv.cluster import fetch


def _script(script: str, *args: str) -> object:
    out = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_the_listing_names_run_folders_only_and_reads_their_record(tmp_path: Path) -> None:
    res = tmp_path / "results"
    (res / "20261122-030000-aaaaaa").mkdir(parents=True)
    (res / "20261122-030000-aaaaaa" / "record.json").write_text(
        '{"run_id": "20261122-030000-aaaaaa"}'
    )
    (res / "20261122-030000-aaaaaa" / "results.json").write_text("{}")
    (res / "20261129-030000-bbbbbb").mkdir()  # running: nothing written yet
    (res / "my-own-run").mkdir()  # `launch --run-id my-own-run`: not a run id, not listed
    os.symlink(tmp_path, res / "20261206-030000-cccccc")  # a link out of the volume
    got = _script(fetch.RUNS_SCRIPT, str(res), "1000")
    assert got == {
        "20261122-030000-aaaaaa": {
            "record": '{"run_id": "20261122-030000-aaaaaa"}',
            "finished": True,
        },
        "20261129-030000-bbbbbb": {"record": None, "finished": False},
    }
    assert _script(fetch.RUNS_SCRIPT, str(tmp_path / "absent"), "1000") == {}


def test_the_copy_holds_regular_files_only_and_has_a_size_limit(tmp_path: Path) -> None:
    run = tmp_path / "results" / "20261122-030000-aaaaaa"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "rank0.log").write_bytes(b"\x00binary\xff")
    (run / "summary.md").write_text("# ok\n")
    os.symlink("/etc/passwd", run / "passwd")  # never followed
    got = _script(fetch.PACK_SCRIPT, str(tmp_path / "results"), run.name, "1000")
    assert isinstance(got, dict)
    files = {k: base64.b64decode(v) for k, v in got["files"].items()}
    assert files == {"logs/rank0.log": b"\x00binary\xff", "summary.md": b"# ok\n"}
    assert "error" in _script(fetch.PACK_SCRIPT, str(tmp_path / "results"), run.name, "5")  # type: ignore[operator]


def test_paths_that_leave_the_run_folder_are_dropped() -> None:
    files = {
        "ok.txt": b"1",
        "logs/r0.log": b"2",
        "../x": b"3",
        "/etc/x": b"4",
        "a/../../x": b"5",
        "a//b": b"6",
        "nl\nx": b"7",
        "back\\slash": b"8",
        "": b"9",
        "./x": b"10",
    }
    assert dict(fetch.safe_files(files)) == {"logs/r0.log": b"2", "ok.txt": b"1"}
