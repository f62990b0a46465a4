"""A run's default output fits a 100-column terminal: a check's metrics that do not fit
are counted, not printed (results.json has them), and a reason continues on lines of its
own; the CLI's console filter lets those continuation lines through."""

from __future__ import annotations

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging.verdict import reason_text
from mlenv.acceptance.reports import console
from mlenv.acceptance.run.local import ConsoleFilter

LONG = (
    "backend gloo (CPU): NCCL is not in use, so there is no NCCL network transport to "
    "prove; run on GPUs across at least two nodes"
)


def _printed(r: CheckResult) -> list[str]:
    return [console.PREFIX + ln for ln in console.check_lines(r)]


def test_four_collective_metrics_and_a_reason_fit_in_100_columns() -> None:
    r = CheckResult(
        "collectives.reduce_scatter",
        Status.WARN,
        scope="world",
        metrics={
            "algbw_gbps_max": 0.2687,
            "busbw_gbps_avg": 0.048,
            "busbw_gbps_large": 0.1344,
            "busbw_gbps_max": 0.1344,
        },
        reasons=[LONG],
        duration_s=0.8,
    )
    lines = _printed(r)
    assert all(len(ln) <= 100 for ln in lines), [len(ln) for ln in lines]
    head = lines[0]
    shown = [w for w in head.split() if "=" in w]
    assert shown and head.endswith(f" +{4 - len(shown)}  (0.8 s)")  # the rest counted
    reason = " ".join(ln.removeprefix(console.PREFIX).strip() for ln in lines[1:])
    assert reason == "— " + reason_text(r)


def test_a_long_host_name_moves_the_figures_to_a_line_of_their_own() -> None:
    r = CheckResult(
        "compute.matmul",
        Status.PASS,
        node="gpu-node-017.rack-04.example-site.internal",
        rank=12,
        metrics={"tflops_fp32": 41.2},
        duration_s=1.2,
    )
    head, figures = _printed(r)
    assert head.endswith("rank 12 (gpu-node-017.rack-04.example-site.internal)")
    assert figures.endswith("        tflops_fp32=41.2  (1.2 s)")
    assert len(head) <= 100 and len(figures) <= 100


def test_the_verdict_block_wraps_reasons_and_the_console_filter_shows_all_of_it() -> None:
    doc = {
        "verdict": "PASS",
        "reasons": [f"WARN: fabric.transport world: {LONG}", "WARN: memory.copy rank 0 (vm): x"],
    }
    block = console.verdict_block(doc, "/tmp/a-rather-long/report/folder/name/for/this/run")
    lines = block.splitlines()
    assert all(len(ln) <= 100 for ln in lines) and len(lines) > 4
    f = ConsoleFilter("normal")
    text = [*lines, "Traceback (most recent call last):", "    raise X"]
    assert [ln for ln in text if f.shown(ln)] == lines
