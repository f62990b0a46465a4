"""Console lines as checks finish (rank 0 only), and the closing verdict block."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from mlenv.acceptance.result import CheckResult
from mlenv.acceptance.verdict import where


def check_line(r: CheckResult, max_metrics: int = 4) -> str:
    """``  PASS  compute.matmul        rank 0 (host)  tflops_fp32=0.41  (1.2 s)``."""
    metrics = "  ".join(f"{k}={v:.4g}" for k, v in sorted(r.metrics.items())[:max_metrics])
    why = f"  — {'; '.join(r.reasons)}" if r.reasons else ""
    return f"  {r.status.value:<5} {r.name:<28} {where(r):<24} {metrics}  ({r.duration_s:.1f} s){why}"


def print_check(r: CheckResult, out: TextIO | None = None) -> None:
    """Print one check line and flush (the launcher interleaves ranks' output)."""
    stream = out or sys.stdout
    stream.write(f"[acceptance] {check_line(r)}\n")
    stream.flush()


def verdict_block(doc: dict[str, Any], report_dir: str) -> str:
    """The verdict, its reasons and where the reports are."""
    lines = [f"verdict: {doc['verdict']}"]
    lines += [f"  - {r}" for r in doc.get("reasons", [])]
    lines.append(f"reports: {report_dir}/ (results.json, results.jsonl, junit.xml, summary.md)")
    return "\n".join(lines)
