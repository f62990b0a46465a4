"""A rank leaves with ``_leave`` (``mlenv/acceptance/__main__.py``): no interpreter teardown,
but nothing that teardown would have written is lost: the exit code, Python's and C's
buffered output, the ``atexit`` handlers (logging's flush, temporary folders' finalizers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import atexit, ctypes, logging, sys, tempfile
from pathlib import Path
from mlenv.acceptance.__main__ import _leave

out = Path(sys.argv[1])
log = logging.getLogger("t")
log.addHandler(logging.FileHandler(out / "log.txt"))
log.warning("logged")  # FileHandler buffers nothing, but logging.shutdown closes it at exit
atexit.register(lambda: (out / "atexit.txt").write_text("ran"))
keep = tempfile.TemporaryDirectory(dir=out)  # its finalizer removes it at exit
(out / "tmpdir.txt").write_text(keep.name)
libc = ctypes.CDLL(None)
libc.printf(b"c-level line\n")  # C stdio, block-buffered into a pipe: only fflush writes it
sys.stdout.write("python line without a flush\n")
_leave(7)
"""


def test_leave_keeps_what_teardown_would_have_written(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert p.returncode == 7, p.stderr
    assert "python line without a flush" in p.stdout and "c-level line" in p.stdout, p.stdout
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "log.txt").read_text() == "logged\n"
    assert not Path((tmp_path / "tmpdir.txt").read_text()).exists()  # the finalizer ran
    assert p.stderr == ""
