"""Each rank's log: a tee of what the rank prints, kept even when the rank exits hard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mlenv.acceptance.run import ranklog

ROOT = Path(__file__).resolve().parents[3]

_RANK = """
import os, sys
from pathlib import Path
from mlenv.acceptance.run import ranklog
print(ranklog.start(Path(sys.argv[1]), 3, "pod-1.svc/x y"))
print("measured 42 TFLOPS")
print("rank 3 lost its peer", file=sys.stderr)
sys.stdout.write("no newline yet")
os._exit(7)  # like the kill fault: no cleanup, no flush at exit
"""


def test_a_rank_that_exits_hard_keeps_everything_it_printed_in_its_log(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-c", _RANK, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert p.returncode == 7
    log = tmp_path / "logs" / "rank3.pod-1.svc_x_y.log"
    assert p.stdout.splitlines()[0] == str(log)  # the terminal still gets the output
    assert "rank 3 lost its peer" in p.stderr
    text = log.read_text()
    assert text.startswith("# rank 3 on pod-1.svc/x y, started ")
    assert (
        "measured 42 TFLOPS\n" in text
        and "rank 3 lost its peer\n" in text
        and text.endswith("no newline yet")
    )


def test_an_unwritable_report_folder_leaves_the_streams_alone(tmp_path: Path) -> None:
    blocker = tmp_path / "report"
    blocker.write_text("a file, not a folder")
    before = (sys.stdout, sys.stderr)
    assert ranklog.start(blocker, 0, "h") is None
    assert (sys.stdout, sys.stderr) == before
