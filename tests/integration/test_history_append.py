"""The run history under real processes: parallel writers append whole lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


_WRITER = """
import sys
from pathlib import Path
from mlenv.acceptance.records.history import append
proc, n, size = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    append(Path(sys.argv[1]), {"run_id": f"p{proc}-{i}", "pad": str(proc) * size})
"""


def test_parallel_processes_append_without_lost_or_torn_lines(tmp_path: Path) -> None:
    """Real processes, lines far larger than a pipe buffer or a page: the lock keeps each whole."""
    path = tmp_path / "local" / "history.jsonl"
    procs_n, lines_n, size = 6, 40, 100_000
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), str(p), str(lines_n), str(size)], cwd=ROOT
        )
        for p in range(procs_n)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * procs_n
    raw = path.read_text()
    lines = raw.splitlines()
    assert raw.endswith("\n") and len(lines) == procs_n * lines_n
    recs = [json.loads(line) for line in lines]  # every line parses: nothing torn
    assert all(r["pad"] == r["run_id"][1] * size for r in recs)  # nothing interleaved
    assert sorted(r["run_id"] for r in recs) == sorted(
        f"p{p}-{i}" for p in range(procs_n) for i in range(lines_n)
    )
    # each writer's own lines stay in its order
    for p in range(procs_n):
        mine = [int(r["run_id"].split("-")[1]) for r in recs if r["run_id"].startswith(f"p{p}-")]
        assert mine == list(range(lines_n))
