"""Console lines as checks finish (rank 0 only), and the closing verdict block.

A check's line is printed from the results *as the verdict will judge them*
(:func:`mlenv.acceptance.judging.verdict.judge_check`, the same rules and peer comparison), so
the status a person watches is the one the verdict uses: a GPU that measures fine but
below its baseline reads FAIL live, not PASS-then-FAIL.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mlenv.acceptance.core.result import CheckResult
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.judging.verdict import judge_check, one_line, reason_text, where
from mlenv.contract import shown

if TYPE_CHECKING:
    from mlenv.acceptance.reports.document import RunMeta


PREFIX = "[acceptance] "
WIDTH = 100  # the terminal a run's default output fits (a quick run printed up to 235 columns)
_INDENT = " " * 8  # a check line's continuation: under the check's name


def fold(text: str, width: int = WIDTH, indent: str = "    ") -> list[str]:
    """``text`` in lines of at most ``width`` columns, the later ones indented; a word longer
    than a line (a path) is kept whole rather than cut."""
    import textwrap

    return textwrap.wrap(
        text,
        width,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [""]


def check_lines(r: CheckResult, width: int = WIDTH - len(PREFIX)) -> list[str]:
    """``  PASS  compute.matmul             rank 0 (host)  tflops_fp32=0.41  (1.2 s)``, in
    ``width`` columns: the metrics that fit (``+N``: how many more results.json holds), then
    the reason on lines of its own."""
    head = shown(f"  {r.status.value:<5} {r.name:<26} {where(r):<12}")
    tail = f"  ({r.duration_s:.1f} s)"
    metrics = [shown(f"{k}={v:.4g}") for k, v in sorted(r.metrics.items())]
    text = reason_text(r)
    why = fold(f"{_INDENT}— {shown(text)}", width, _INDENT + "  ") if text else []
    first = len(metrics[0]) + 2 if metrics else 0
    if len(head) + first + len(tail) > width:  # a long host name: the figures go below it
        return [head.rstrip(), *fold(_INDENT + "  ".join(metrics) + tail, width, _INDENT), *why]
    kept: list[str] = []
    for i, m in enumerate(metrics):
        more = len(metrics) - i - 1
        mark = f" +{more}" if more else ""
        if kept and len(head) + 2 + len("  ".join([*kept, m])) + len(mark) + len(tail) > width:
            break
        kept.append(m)
    left = len(metrics) - len(kept)
    line = head + ("  " + "  ".join(kept) if kept else "") + (f" +{left}" if left else "") + tail
    return [line, *why]


def check_line(r: CheckResult) -> str:
    """The check's lines as one string (newline-separated), for tests and logs."""
    return "\n".join(check_lines(r))


def print_check(r: CheckResult, out: TextIO | None = None) -> None:
    """Print one check's lines and flush (the launcher interleaves ranks' output)."""
    stream = out or sys.stdout
    stream.write("".join(f"{PREFIX}{line}\n" for line in check_lines(r)))
    stream.flush()


def print_note(line: str, out: TextIO | None = None, indent: str = "  ") -> None:
    """A run-level finding as it is known (a node outlier), in the verdict's own words."""
    stream = out or sys.stdout
    lines = fold(f"{indent}{shown(one_line(line))}", WIDTH - len(PREFIX), indent + "  ")
    stream.write("".join(f"{PREFIX}{x}\n" for x in lines))
    stream.flush()


class LiveJudge:
    """Judges each check's results as they arrive, with the baseline the verdict will use.

    The baseline is picked the way :func:`mlenv.acceptance.reports.finalize` picks it
    (``--baseline``, else by the GPU names the environment check recorded, which runs
    first), and handed to ``finalize`` afterwards so both use the very same one.
    """

    def __init__(
        self, meta: RunMeta, baseline_spec: str | None = None, out: TextIO | None = None
    ) -> None:
        self.meta = meta
        self.spec = baseline_spec
        self.out = out
        self.seen: list[CheckResult] = []
        self.baseline: baselines.Baseline | None = None
        self._resolved = False

    def _baseline(self) -> baselines.Baseline | None:
        from mlenv.acceptance.reports.document import device_names

        # Resolve once the environment check has named the devices (or at once when it
        # was not selected: then finalize has no more to go on either).
        has_env = any(r.name == "environment" for r in self.seen)
        if not self._resolved and (has_env or self.spec or "environment" not in self.meta.checks):
            self.baseline = baselines.resolve(self.spec, device_names(self.meta, self.seen))
            self._resolved = True
        return self.baseline

    def show(self, results: list[CheckResult]) -> list[CheckResult]:
        """Print one line per result with the status the verdict will give it; returns them."""
        self.seen += results
        try:
            judged, extra = judge_check(results, self._baseline())
        except Exception as e:  # a console line must never cost the run: print as measured
            judged, extra = (
                results,
                [f"note: not judged live ({type(e).__name__}: {e}); the verdict decides"],
            )
        for r in judged:
            print_check(r, self.out)
        for line in extra:
            print_note(line, self.out)
        return judged


_REPORT_FILES = ("results.json", "results.jsonl", "junit.xml", "summary.md")


def report_files(report_dir: str) -> list[str]:
    """The report files to name: those of :data:`_REPORT_FILES` in ``report_dir``, then every
    PNG there (busbw.png, tflops.png, trend-*.png); the fixed list when the folder is not
    on this machine (a pod's, named from outside)."""
    d = Path(report_dir)
    if not d.is_dir():
        return list(_REPORT_FILES)
    try:
        pngs = sorted(p.name for p in d.iterdir() if p.suffix == ".png" and p.is_file())
    except OSError:
        pngs = []
    return [f for f in _REPORT_FILES if (d / f).is_file()] + pngs


def verdict_block(doc: dict[str, Any], report_dir: str) -> str:
    """The verdict, its reasons (one line each: stacks stay in results.json) and where the reports are."""
    # a report may come from anywhere (mlenv finalize reads one): nothing in it drives the
    # terminal. Each line fits WIDTH; what runs over continues on lines indented by four.
    lines = [f"verdict: {shown(str(doc.get('verdict')))}"]
    reasons = doc.get("reasons")
    for r in reasons if isinstance(reasons, list) else []:
        lines += fold(f"  - {shown(one_line(str(r)))}")
    files = ", ".join(report_files(report_dir)) or "none written"
    lines += fold(f"reports: {shown(report_dir)}/ ({files})")
    return "\n".join(lines)
