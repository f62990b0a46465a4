"""The local suite end to end: `mlenv acceptance --local` through the DeepSpeed launcher."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
MLENV = [sys.executable, "-m", "mlenv"]


def run_local(
    tmp_path: Path,
    *args: str,
    fault: str = "",
    timeout: float = 240,
    extra_env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run `mlenv acceptance --local --nproc 2` with small sizes; returns (process, report dir)."""
    opts = tmp_path / "options.yaml"
    # Several multiplies per timed sample: one 256³ GEMM is a fifth of a millisecond on
    # a CPU core, and three such samples are a window that one scheduler hiccup fills
    # (a rank then reads as a peer outlier in a run where nothing was slow).
    opts.write_text(
        "compute: {n: 256, iters: 5, warmup: 1, inner: 8}\n"
        "memory: {bytes: 4194304, iters: 3}\n"
        "collectives: {min_bytes: 1024, max_bytes: 65536, factor: 8, iters: 3, warmup: 1}\n"
        "training: {model: resnet18, steps: 6, batch_size: 4}\n"
    )
    report = tmp_path / "report"
    env = dict(
        os.environ,
        PYTHONPATH=f"{ROOT / 'tests' / 'integration'}{os.pathsep}{ROOT}",
        TORCH_EXTENSIONS_DIR=os.environ.get(
            "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/mlenv/torch_extensions")
        ),
        DS_ACCELERATOR="cpu",
        MLENV_FAULT=fault,
        **(extra_env or {}),
    )
    p = subprocess.run(
        [
            *MLENV,
            "acceptance",
            "--local",
            "--nproc",
            "2",
            "--profile",
            "quick",
            "--report-dir",
            str(report),
            "--options",
            str(opts),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
    )
    return p, report


@pytest.mark.serial  # PASS needs no peer outlier among CPU ranks
def test_local_suite_passes_with_every_report(tmp_path: Path) -> None:
    p, report = run_local(tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "verdict: PASS" in p.stdout
    doc = json.loads((report / "results.json").read_text())
    assert (
        doc["verdict"] == "PASS"
        and doc["world"]["ranks"] == 2
        and doc["world"]["backend"] == "gloo"
    )
    names = {c["name"] for c in doc["checks"]}
    for fam in ("environment", "compute", "memory", "collectives", "training"):
        assert any(n == fam or n.startswith(fam + ".") for n in names), (fam, names)
    # gloo on CPU: no NCCL, so no network transport to prove; said so, not silently passed
    (fab,) = [c for c in doc["checks"] if c["name"] == "fabric.transport"]
    assert fab["status"] == "SKIP" and fab["scope"] == "world"
    assert fab["reasons"][0].startswith("backend gloo (CPU): NCCL is not in use"), fab
    assert not (report / "nccl").exists()  # nothing captured where NCCL never ran
    env_ranks = sorted(c["rank"] for c in doc["checks"] if c["name"] == "environment")
    assert env_ranks == [0, 1]
    lines = (report / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(doc["checks"])
    cases = ET.parse(report / "junit.xml").getroot().findall("testsuite/testcase")
    # one per result, one per node (node verdicts), and the verdict's own testcase
    assert len(cases) == len(doc["checks"]) + len(doc["node_verdicts"]["nodes"]) + 1
    assert (report / "summary.md").read_text().startswith("# Acceptance: PASS")
    assert (report / "tflops.png").exists()
    # the terminal holds progress and the verdict (it held ~65 lines of nccl-tests
    # tables, DeepSpeed's argv, warnings and a second verdict); the log holds the rest
    lines = [ln for ln in out.splitlines() if ln.strip()]
    # a reason or a long line continues on indented lines (the terminal is 100 columns)
    # a check still running says so every 30 s, and a loaded machine's outliers add WARN
    # reasons to the verdict: none of these counts against the bound
    more = re.compile(r"^(    |  - |\[acceptance\] +[—…/]|\[acceptance\] {8})")
    heads = [ln for ln in lines if not more.match(ln)]
    assert len(heads) <= len(doc["checks"]) + 8, out
    assert [ln for ln in lines if ln.startswith("verdict:")] == ["verdict: PASS"]
    assert all(
        ln.startswith(
            (
                "[acceptance]",
                "verdict: ",
                "  - ",
                "reports: ",
                "    ",
                "launching ",
                "run ",
                "wall time: ",
                "building DeepSpeed",
            )
        )
        for ln in lines
    ), out
    assert not re.search(r"^\d\d:\d\d:\d\d ", out, re.M)  # no time prefixes on the terminal
    assert "deepspeed.launcher" not in out and "Warning" not in out
    assert "out-of-place" not in out  # the nccl-tests tables (a check line names busbw_* metrics)
    log = (report / "launcher.log").read_text()
    assert "deepspeed.launcher" in log and "out-of-place" in log  # the argv and the tables


def test_quiet_fail_shows_the_verdict_and_errors_only(tmp_path: Path) -> None:
    """`-q` on a FAIL: the verdict block, nothing else (DeepSpeed's `[ERROR] sigkill_handler`
    line after a FAIL used to follow it)."""
    p, report = run_local(
        tmp_path, "-q", "--checks", "collectives", fault="corrupt:rank=1,check=collectives"
    )
    out = p.stdout + p.stderr
    assert p.returncode == 1, out[-4000:]
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines[0] == "verdict: FAIL", out
    start = next(i for i, ln in enumerate(lines) if ln.startswith("reports: "))
    assert " ".join(ln.strip() for ln in lines[start:]).startswith(f"reports: {report}"), out
    assert all(
        ln.startswith(("verdict: ", "  - ", "reports: ", "    ", "error: ")) for ln in lines
    ), out
    assert "sigkill_handler" in (report / "launcher.log").read_text()
