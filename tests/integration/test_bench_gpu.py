"""`make bench-gpu` (benchmarks/bench_gpu.py): its CPU path end to end, so it cannot rot before a
GPU runs it; the no-CUDA answer of the make target; `make bench-record` into a copy of the doc."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")
torch = pytest.importorskip("torch")

# One worker for the module: its fixture (the CPU path, about two minutes) is module-scoped,
# and CI ran it twice (117 s setup each) on two workers while no xdist group held
# (docs/benchmarks.md; pyproject.toml pins the pytest that keeps groups).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("bench_gpu")]
ROOT = Path(__file__).resolve().parents[2]
# A script of benchmarks/, not a package: loaded from its file.
_spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
assert _spec is not None and _spec.loader is not None
bench_gpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_gpu)


def _env() -> dict[str, str]:
    # One thread: the CPU path proves the command, its figures mean nothing, and beside the
    # other workers' ranks on 2 cores libgomp's second thread spin-waits (measured with two
    # busy loops beside it: 72 s of user CPU with torch's default 2 threads, 27 s with 1).
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MAKEFLAGS": "",
        "MAKELEVEL": "",
        "OMP_NUM_THREADS": "1",
        "TORCH_EXTENSIONS_DIR": os.environ.get(
            "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/mlenv/torch_extensions")
        ),
    }


@pytest.fixture(scope="module")
def cpu_rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, object]], str]:
    """One run of the CPU path through the same wrapper `make bench-gpu` uses (2 rounds)."""
    out = tmp_path_factory.mktemp("bench") / "rows.jsonl"
    p = subprocess.run(
        [
            "bash",
            str(ROOT / "benchmarks" / "bench_gpu.sh"),
            "--cpu",
            "--rounds",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**_env(), "PYTHON": sys.executable},
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    return [json.loads(line) for line in out.read_text().splitlines()], p.stdout


def test_pairs_alternate_which_side_goes_first() -> None:
    """On an H200 the side that ran first won by 14 % (boost clock before the power limit
    bites): even rounds run the reference first, odd rounds ours, each result in its place."""
    for r, order in (
        (0, ["ref", "ours"]),
        (1, ["ours", "ref"]),
        (2, ["ref", "ours"]),
        (3, ["ours", "ref"]),
    ):
        calls: list[str] = []

        def side(name: str, value: str, calls: list[str] = calls) -> str:
            calls.append(name)
            return value

        got = bench_gpu.in_turn(r, partial(side, "ref", "R"), partial(side, "ours", "O"))
        assert got == ("R", "O") and calls == order


def test_cpu_path_measures_every_figure_interleaved(
    cpu_rows: tuple[list[dict[str, object]], str],
) -> None:
    rows, stdout = cpu_rows
    assert [r["figure"] for r in rows] == [
        "matmul_fp32",
        "copy",
        "training_plain",
        "training_deepspeed",
    ]
    for r in rows:
        assert set(r) == set(bench_gpu.ROW_KEYS)
        assert r["rounds"] == 2 and r["deepspeed"] == __import__("deepspeed").__version__
        assert r["torch"] == torch.__version__ and str(r["device"]).startswith("CPU (")
        lo, mid, hi = float(r["ratio_min"]), float(r["ratio_median"]), float(r["ratio_max"])  # type: ignore[arg-type]
        assert 0 < lo <= mid <= hi, r
        # Real measurements: the median of two paired ratios is their mean, and the ratio of
        # the medians of each side is what was printed, not a constant.
        assert float(r["reference"]) > 0 and float(r["ours"]) > 0  # type: ignore[arg-type]
        assert mid == pytest.approx((lo + hi) / 2)
    training = [r for r in rows if str(r["figure"]).startswith("training")]
    assert all(r["setup"] == "fp32, ZeRO-0, channels_last" for r in training)
    # The printed table carries each ratio with its spread; the rows file is what bench-record reads.
    for r in rows:
        assert f"| {r['figure']} |" in stdout


def test_rows_are_recorded_into_the_benchmarks_table(
    cpu_rows: tuple[list[dict[str, object]], str], tmp_path: Path
) -> None:
    rows, _ = cpu_rows
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = tmp_path / "benchmarks.md"
    shutil.copy(ROOT / "docs" / "benchmarks.md", doc)
    before = doc.read_text()
    p = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "-C",
            str(ROOT),
            "bench-record",
            f"BENCH_OUT={rows_file}",
            f"BENCH_PY={sys.executable}",
        ],
        capture_output=True,
        text=True,
        env={**_env(), "BENCH_DOC": str(doc)},
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    after = doc.read_text()
    added = [line for line in after.splitlines() if line not in before.splitlines()]
    assert len(added) == len(rows)
    head, _, table = after.partition(bench_gpu.MARKER)
    assert head == before.partition(bench_gpu.MARKER)[0]  # nothing above the table moved
    for r, line in zip(rows, added, strict=True):
        assert line.startswith(f"| {r['date']} | {r['device']} | ")
        assert f"**{float(r['ratio_median']):.3f}**" in line  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no rows"),
        ("{not json\n", ":1: not a JSON row"),
        ('{"figure": "copy"}\n', ":1: expected a row with the keys date, device"),
    ],
)
def test_bench_record_refuses_bad_rows_with_one_line(
    tmp_path: Path, content: str, message: str
) -> None:
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text(content)
    doc = tmp_path / "benchmarks.md"
    shutil.copy(ROOT / "docs" / "benchmarks.md", doc)
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_gpu.py"),
            "--record",
            str(rows_file),
            "--doc",
            str(doc),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, (
        p.stderr
    )
    assert doc.read_text() == (ROOT / "docs" / "benchmarks.md").read_text()


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="the no-CUDA answer needs a machine without CUDA"
)
def test_make_bench_gpu_without_cuda_says_so_and_claims_nothing(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    p = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "-C",
            str(ROOT),
            "bench-gpu",
            f"BENCH_OUT={out}",
            f"BENCH_PY={sys.executable}",
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    said = [line for line in p.stdout.splitlines() if line.startswith("bench-gpu:")]
    assert said == [
        f"bench-gpu: no CUDA device on this machine (torch {torch.__version__}): nothing measured"
    ]
    assert not out.exists()
