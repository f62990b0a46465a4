"""a full disk at the writers' boundary (OSError ENOSPC injected where the bytes
go): no torn line, the verdict still known and recorded, one line naming the folder and its
free space. The real thing, a small tmpfs under a whole run, is in
tests/integration/test_run_records.py."""

from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.records import history
from mlenv.acceptance.reports import RunMeta, finalize
from mlenv.acceptance.reports.document import ReportWriteError, no_space_line
from mlenv.acceptance.reports.jsonl import JsonlWriter, read_partial
from mlenv.acceptance.run import local

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
R = [
    CheckResult("compute.matmul", Status.PASS, "rank", "h0", i, {"tflops_fp32": 1.0 + i})
    for i in range(3)
]


def _meta() -> RunMeta:
    return RunMeta(
        run_id="20260101-000000-abcdef",
        started="2026-01-01T00:00:00+00:00",
        profile="quick",
        checks=["compute.matmul"],
        world={"nodes": 1, "ranks": 3, "backend": "gloo", "device": "cpu", "hosts": ["h0"] * 3},
    )


def _half_then_full(monkeypatch: pytest.MonkeyPatch, name: str, after: int) -> None:
    """``os.<name>`` writes ``after`` calls as usual, then half its bytes, then ENOSPC (a disk
    filling up part way through a line)."""
    real = getattr(os, name)
    calls = {"n": 0}

    def write(fd: int, data: bytes, *rest: int) -> int:
        calls["n"] += 1
        if calls["n"] <= after:
            return int(real(fd, data, *rest))
        if calls["n"] == after + 1:
            return int(real(fd, bytes(data)[: len(data) // 2], *rest))
        raise ENOSPC

    monkeypatch.setattr(os, name, write)


def test_results_jsonl_never_keeps_a_torn_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.jsonl"
    w = JsonlWriter(path)
    w.append(R[0])
    _half_then_full(monkeypatch, "pwrite", after=0)
    with pytest.raises(OSError) as e:
        w.append(R[1])
    assert e.value.errno == errno.ENOSPC
    monkeypatch.undo()
    w.close()
    text = path.read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 1  # cut back to the last whole line
    assert read_partial(path) == ([R[0]], [])  # nothing for a reader to skip


def test_a_history_append_cut_short_leaves_no_torn_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "local" / "history.jsonl"
    history.append(path, {"run_id": "a", "verdict": "PASS"})
    _half_then_full(monkeypatch, "write", after=0)
    with pytest.raises(OSError):
        history.append(path, {"run_id": "b", "verdict": "PASS", "pad": "x" * 1000})
    monkeypatch.undo()
    assert [json.loads(x)["run_id"] for x in path.read_text().splitlines()] == ["a"]


def test_a_full_report_folder_still_gives_the_verdict_for_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """finalize that cannot write results.json raises with the document (ERROR, the folder and
    its free space first among the reasons) and leaves no temp file of its own behind."""
    real_open = Path.open

    def full(self: Path, *a: Any, **k: Any) -> Any:
        if self.name.endswith(".tmp"):
            real_open(self, "w").close()  # created, then the disk is full
            raise ENOSPC
        return real_open(self, *a, **k)

    monkeypatch.setattr(Path, "open", full)
    with pytest.raises(ReportWriteError) as e:
        finalize(tmp_path, _meta(), R, plots=False)
    monkeypatch.undo()
    doc = e.value.doc
    assert doc["verdict"] == "ERROR" and len(doc["checks"]) == 3
    assert doc["reasons"][0].startswith(
        f"the report could not be written: {tmp_path}: no space left on device ("
    )
    assert str(e.value) == no_space_line(tmp_path) and " free)" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # results.json.tmp removed: it was ours
    # the history, elsewhere, still gets the run; record.json (in the full folder) is not needed for that
    lines = history.after_run(tmp_path / "gone", doc, tmp_path / "hist", "local", plots=False)
    assert lines[0].startswith("history: run 20260101-000000-abcdef appended")
    assert (
        json.loads((tmp_path / "hist" / "local" / "history.jsonl").read_text())["verdict"]
        == "ERROR"
    )


def test_the_launcher_log_filling_up_costs_no_thread_traceback() -> None:
    class FullLog(io.StringIO):
        def write(self, s: str) -> int:
            raise ENOSPC

    out = io.StringIO()
    local._pump(io.StringIO("line 1\nline 2\n"), FullLog(), out, local.ConsoleFilter("verbose"))
    assert out.getvalue() == "line 1\nline 2\n"  # the console still gets every line
