"""Run history: the line's content, appends from parallel processes, torn lines, trends."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.records import history
from mlenv.errors import InputError

# matplotlib (about 0.6 s of CPU to import) comes in with the module, once per worker, as
# the torch tests import torch: the first test that draws does not carry the import.
# Without it, only the tests that draw fail.
with contextlib.suppress(ImportError):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

ENV_DETAILS = {
    "host": "h0",
    "torch": "2.13.0",
    "cuda": "12.4",
    "nccl": "2.21.5",
    "deepspeed": "0.19.8",
    "python": "3.11.7",
    "driver": "550.54.15",
    "gpu_models": ["NVIDIA H100 80GB HBM3"],
    "ibv_devinfo": "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n"
    "hca_id:\tmlx5_1\n\tfw_ver:\t\t\t\t28.39.1002\n",
}


def results() -> list[CheckResult]:
    return [
        CheckResult(
            "environment", Status.PASS, "rank", "h0", 0, {"gpu_count": 8.0}, details=ENV_DETAILS
        ),
        CheckResult(
            "environment",
            Status.PASS,
            "rank",
            "h1",
            1,
            {"gpu_count": 8.0},
            details={"host": "h1", "torch": "2.13.0", "python": "3.11.7", "gpu_models": []},
        ),
        CheckResult(
            "compute.matmul",
            Status.PASS,
            "rank",
            "h0",
            0,
            {"tflops_bf16": 700.0, "tflops_fp32": 50.0},
        ),
        CheckResult(
            "compute.matmul",
            Status.PASS,
            "rank",
            "h1",
            1,
            {"tflops_bf16": 600.0, "tflops_fp32": 40.0},
        ),
        CheckResult(
            "collectives.all_reduce",
            Status.PASS,
            "world",
            metrics={"busbw_gbps_large": 300.0, "busbw_gbps_max": 310.0, "wrong_elements": 0.0},
        ),
        CheckResult(
            "collectives.all_reduce",
            Status.PASS,
            "intra",
            "h0",
            metrics={"busbw_gbps_large": 400.0},
            details={"group": "node 0 (h0)"},
        ),
        CheckResult("memory.copy", Status.ERROR, "rank", "h1", 1, {"copy_gbps": 1.0}),
        CheckResult("training.deepspeed", Status.SKIP, "world", reasons=["not run"]),
    ]


def doc_for(
    rs: list[CheckResult], run_id: str = "r1", started: str = "2026-01-01T00:00:00+00:00"
) -> dict:
    return {
        "run_id": run_id,
        "started": started,
        "finished": started,
        "verdict": "PASS",
        "profile": "quick",
        "baseline": "CPU (x)",
        "world": {
            "nodes": 2,
            "ranks": 2,
            "backend": "nccl",
            "device": "cuda",
            "hosts": ["h0", "h1"],
        },
        "checks": [r.to_dict() for r in rs],
    }


def test_headline_is_the_median_of_measured_rank_and_world_figures() -> None:
    h = history.headline(results())
    assert h == {
        "collectives.all_reduce": {"busbw_gbps_large": 300.0},  # world only, not the intra group
        "compute.matmul": {"tflops_bf16": 650.0, "tflops_fp32": 45.0},
    }  # ERROR/SKIP left out


def test_versions_per_node_with_hca_firmware_and_not_present() -> None:
    v = history.node_versions(results())
    assert v["h0"]["driver"] == "550.54.15" and v["h0"]["gpu_models"] == "NVIDIA H100 80GB HBM3"
    assert v["h0"]["hca_firmware"] == "mlx5_0: 28.39.1002, mlx5_1: 28.39.1002"
    assert v["h0"]["vbios"] == "not present"
    assert v["h1"]["driver"] == v["h1"]["cuda"] == v["h1"]["hca_firmware"] == "not present"
    assert v["h1"]["torch"] == "2.13.0"
    assert set(v["h0"]) == set(history.VERSION_KEYS)


def test_record_is_one_ascii_line_and_record_json_matches(tmp_path: Path) -> None:
    rs = results()
    rs[0].details = dict(ENV_DETAILS, host="h0\nsecond line", driver="ü-driver")
    path, rec = history.record_run(tmp_path, doc_for(rs), rs, "barcelona", tmp_path / "reports")
    assert path == tmp_path / "reports" / "barcelona" / "history.jsonl"
    raw = path.read_bytes()
    assert raw.count(b"\n") == 1 and raw.isascii()
    line = json.loads(raw)
    assert line == rec and json.loads((tmp_path / "record.json").read_text()) == rec
    assert (line["cluster"], line["run_id"], line["verdict"], line["config_sha256"]) == (
        "barcelona",
        "r1",
        "PASS",
        None,
    )
    assert line["metrics"]["compute.matmul"]["tflops_bf16"] == 650.0
    assert line["versions"]["h0"]["driver"] == "ü-driver"


@pytest.mark.parametrize("bad", ["../etc", "a/b", "", "-rf", "UPPER", "x" * 64])
def test_cluster_name_is_refused_when_not_a_label(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InputError, match="expected a cluster name"):
        history.history_path(tmp_path, bad)


def test_current_cluster_is_local_unless_the_pod_says(monkeypatch: pytest.MonkeyPatch) -> None:
    assert history.current_cluster({}) == "local"
    assert history.current_cluster({"MLENV_CLUSTER": "barcelona"}) == "barcelona"
    assert history.current_cluster({"MLENV_CLUSTER": "../x"}) == "local"


def test_a_line_cut_short_by_a_crash_does_not_swallow_the_next(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text('{"run_id": "ok"}\n{"run_id": "cut sh')
    history.append(path, {"run_id": "next"})
    recs, notes = history.read(path)
    assert [r["run_id"] for r in recs] == ["ok", "next"]
    assert notes == ["history.jsonl: 1 unreadable line(s) skipped (line 2)"]


def test_newest_first_by_start_then_file_order() -> None:
    recs = [
        {"run_id": "a", "started": "2026-01-02"},
        {"run_id": "b", "started": "2026-01-03"},
        {"run_id": "c", "started": "2026-01-02"},
    ]
    assert [r["run_id"] for r in history.newest_first(recs)] == ["b", "c", "a"]


def test_after_run_appends_draws_trends_and_links_them_once(tmp_path: Path) -> None:
    report, root = tmp_path / "report", tmp_path / "reports"
    report.mkdir()
    (report / "summary.md").write_text("# Acceptance: PASS\n")
    rs = results()
    for i, tf in enumerate((700.0, 690.0, 350.0)):
        rs[2].metrics["tflops_bf16"] = tf
        lines = history.after_run(
            report,
            doc_for(rs, f"r{i}", f"2026-01-0{i + 1}T00:00:00+00:00"),
            root,
            cluster="barcelona",
        )
        assert lines == [f"history: run r{i} appended to {root / 'barcelona' / 'history.jsonl'}"]
    recs, _ = history.read(root / "barcelona" / "history.jsonl")
    assert [r["metrics"]["compute.matmul"]["tflops_bf16"] for r in recs] == [650.0, 645.0, 475.0]
    summary = (report / "summary.md").read_text()
    assert summary.count("## Trends on cluster `barcelona`") == 1 and "3 run(s)" in summary
    for name in (
        "trend-compute.matmul-tflops_bf16.png",
        "trend-collectives.all_reduce-busbw_gbps_large.png",
    ):
        assert f"![{name}]({name})" in summary
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    history.clear_stale(report)
    assert not list(report.glob("trend-*.png")) and not (report / "record.json").exists()


def test_a_metric_is_plotted_from_its_second_run(tmp_path: Path) -> None:
    """One point is not a trend: the first run draws nothing (and imports no matplotlib,
    rank 0's cost before it can exit) and says when plots start; the second draws them."""
    root = tmp_path / "reports"
    reports = [tmp_path / "a", tmp_path / "b"]
    for i, report in enumerate(reports):
        report.mkdir()
        (report / "summary.md").write_text("# Acceptance: PASS\n")
        history.after_run(
            report,
            doc_for(results(), f"r{i}", f"2026-01-0{i + 1}T00:00:00+00:00"),
            root,
            cluster="barcelona",
        )
    first, second = ((r / "summary.md").read_text() for r in reports)
    assert not list(reports[0].glob("trend-*.png"))
    assert (
        "No trend plot yet: a metric is plotted from its second run on." in first
        and "![" not in first
    )
    made = sorted(p.name for p in reports[1].glob("trend-*.png"))
    assert "trend-compute.matmul-tflops_bf16.png" in made and "No trend plot yet" not in second
    assert all(f"![{m}]({m})" in second for m in made)


def test_after_run_never_raises_on_an_unwritable_history(tmp_path: Path) -> None:
    blocker = tmp_path / "reports"
    blocker.write_text("a file where the folder should be")
    lines = history.after_run(tmp_path, doc_for(results()), blocker, cluster="local")
    assert len(lines) == 1 and lines[0].startswith("note: run not added to the history:")


def test_versions_without_the_environment_check_come_from_rank_0s_env() -> None:
    rs = [r for r in results() if r.name != "environment"]
    doc = doc_for(rs)
    doc["env"] = {
        "torch": "2.13.0",
        "cuda": None,
        "nccl": None,
        "deepspeed": "0.19.8",
        "driver": None,
        "gpus": [],
    }
    v = history.node_versions(rs, doc)
    assert list(v) == ["h0"] and v["h0"]["torch"] == "2.13.0" and v["h0"]["cuda"] == "not present"
    assert history.node_versions(rs) == {}
