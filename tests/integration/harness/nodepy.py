"""A "node python" without mlenv: a venv of this machine's base interpreter
whose site-packages point, by a plain ``.pth`` line, at the project venv's. torch,
DeepSpeed and PyYAML import; mlenv does not (the project venv's editable hook is a ``.pth``
of its own, which a plain path line does not read), as on an NGC image."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def node_python(root: Path) -> Path:
    """Make it under ``root/nodepy``; its ``bin/python``."""
    venv = root / "nodepy"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run(
        [base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True
    )
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return py
