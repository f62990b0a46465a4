"""metrics.prom: a judged run's series, read back with prometheus_client's own parser."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from mlenv.acceptance.checks import gpuhealth
from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.evidence import nvsmi
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.judging.verdict import judge
from mlenv.acceptance.records import history, prom

DATA = Path(__file__).resolve().parents[2] / "data"
REPO = Path(__file__).resolve().parents[3]
UUID = "GPU-513536b6-7d19-9063-b049-1e69664bb298"


def _doc() -> dict[str, Any]:
    """A two-rank GPU run judged against the A100 baseline and floors: rank 0's GPU is the
    A100 capture (healthy), its host copies slow; rank 1 has no UUID-naming result."""
    (g,) = nvsmi.parse((DATA / "nvidia-smi" / "a100-sxm4-v12.xml").read_text()).gpus
    rs = [
        gpuhealth.judge_gpu(g, host="node-a", rank=0),
        CheckResult(
            name="memory.h2d",
            status=Status.PASS,
            scope="rank",
            node="node-a",
            rank=0,
            metrics={"h2d_gbps": 11.5, "d2h_gbps": 25.0},
            details={"gpu_uuid": UUID},
        ),
        CheckResult(
            name="compute.matmul",
            status=Status.PASS,
            scope="rank",
            node="node-a",
            rank=0,
            metrics={"tflops_bf16": 280.0},
        ),
        CheckResult(
            name="compute.matmul",
            status=Status.PASS,
            scope="rank",
            node="node-a",
            rank=1,
            metrics={"tflops_bf16": 281.0},
        ),
    ]
    j = judge(rs, baselines.resolve(None, ["NVIDIA A100-SXM4-80GB"]))
    return {
        "run_id": "20261129-010000-abcdef",
        "finished": "2026-11-29T01:00:00+00:00",
        "verdict": j.verdict.value,
        "node_verdicts": {
            "nodes": [
                {
                    "node": "node-a",
                    "status": "FAIL",
                    "action": {"id": "reset-gpu", "quarantine": True},
                }
            ]
        },
        "checks": [r.to_dict() for r in j.results],
    }


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_series_read_back_with_their_labels() -> None:
    doc = _doc()
    fams = _families(prom.render(doc, "prod-a").decode())
    assert set(fams) == set(prom.METRICS)
    verdict = {s.labels["verdict"]: s.value for s in fams["mlenv_acceptance_run_verdict"].samples}
    assert verdict == {"PASS": 0.0, "FAIL": 1.0, "ERROR": 0.0, "INTERRUPTED": 0.0}
    (run,) = fams["mlenv_acceptance_run_finished_timestamp_seconds"].samples
    assert run.labels == {"cluster": "prod-a", "run_id": "20261129-010000-abcdef"}
    (act,) = fams["mlenv_acceptance_node_action"].samples
    assert act.labels["action"] == "reset-gpu" and act.labels["quarantine"] == "true"
    fig = {
        (s.labels["check"], s.labels["metric"], s.labels["rank"]): s
        for s in fams["mlenv_acceptance_figure"].samples
    }
    h2d = fig[("memory.h2d", "h2d_gbps", "0")]
    assert h2d.value == 11.5 and h2d.labels["gpu_uuid"] == UUID and h2d.labels["node"] == "node-a"
    # the rank's other results are about the same GPU: they carry its UUID too
    assert fig[("compute.matmul", "tflops_bf16", "0")].labels["gpu_uuid"] == UUID
    assert fig[("compute.matmul", "tflops_bf16", "1")].labels["gpu_uuid"] == ""
    assert fig[("gpu.health", "pcie_gen_max", "0")].value == 4.0


def test_each_bar_names_the_table_that_judged_the_figure() -> None:
    fams = _families(prom.render(_doc(), "prod-a").decode())
    bars = {
        (s.labels["check"], s.labels["metric"]): s for s in fams["mlenv_acceptance_bar"].samples
    }
    h2d = bars[("memory.h2d", "h2d_gbps")]
    assert h2d.value == 24.0 and h2d.labels["op"] == ">="
    assert h2d.labels["judged_by"] == "per-SKU floor A100 80GB SXM"
    assert bars[("compute.matmul", "tflops_bf16")].labels["judged_by"] == "baseline A100 80GB"
    status = {
        (s.labels["check"], s.labels["rank"], s.labels["status"]): s.value
        for s in fams["mlenv_acceptance_result_status"].samples
    }
    assert status[("memory.h2d", "0", "FAIL")] == 1.0  # 11.5 GB/s against the floor of 24
    assert status[("memory.h2d", "0", "PASS")] == 0.0


def test_a_recorded_run_writes_metrics_prom_beside_record_json(tmp_path: Path) -> None:
    doc = _doc()
    report = tmp_path / "run"
    report.mkdir()
    (report / prom.METRICS_FILE).write_text("stale 1\n")
    results = [CheckResult.from_dict(c) for c in doc["checks"]]
    history.record_run(
        report, {**doc, "started": doc["finished"]}, results, "prod-a", tmp_path / "h"
    )
    assert (report / "record.json").is_file()
    text = (report / prom.METRICS_FILE).read_text()
    assert "stale" not in text and 'cluster="prod-a"' in text
    assert set(_families(text)) == set(prom.METRICS)


def test_textfile_names_stay_inside_the_directory() -> None:
    assert prom.textfile_name("prod-a") == "mlenv_acceptance_prod-a.prom"
    assert prom.textfile_name("../x y") == "mlenv_acceptance_.._x_y.prom"
    assert "/" not in prom.textfile_name("a/b")


def test_the_dashboard_uses_only_series_and_labels_we_write() -> None:
    board = json.loads((REPO / "dashboards" / "mlenv-acceptance.json").read_text())
    exprs = [
        t["expr"]
        for p in board["panels"]
        for t in p.get("targets", [])
        if isinstance(t, dict) and "expr" in t
    ]
    exprs += [
        v["query"]
        for v in board.get("templating", {}).get("list", [])
        if v.get("type") == "query" and isinstance(v.get("query"), str)
    ]
    assert len(exprs) >= 5
    labels = {lab for _, labs in prom.METRICS.values() for lab in labs}
    for e in exprs:
        names = set(re.findall(r"\bmlenv_[a-z_]+", e))
        assert names, e
        assert names <= set(prom.METRICS), (e, names - set(prom.METRICS))
        for lab in re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"", e):
            assert lab in labels, (e, lab)
        for group in re.findall(r"\bby\s*\(([^)]*)\)", e):
            for lab in (x.strip() for x in group.split(",") if x.strip()):
                assert lab in labels, (e, lab)
