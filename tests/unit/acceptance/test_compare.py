"""mlenv compare: per-rank deltas, a planted drop on one GPU named, tolerances, exit codes, history CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.records import bundle, history
from mlenv.acceptance.records.compare import compare, load_run, tolerance_for
from mlenv.cli.app import app

HOSTS = ["h0"] * 4 + ["h1"] * 4  # 2 nodes x 4 GPUs


def run_results(
    seed: int, drop: dict[int, float] | None = None, p50_up: float = 0.0
) -> list[CheckResult]:
    """8 H100-like ranks with a little jitter; ``drop`` {rank: fraction} lowers that GPU's TFLOPS."""
    rnd = random.Random(seed)
    out = []
    for r, h in enumerate(HOSTS):
        tf = 760.0 * (1 + rnd.uniform(-0.02, 0.02)) * (1 - (drop or {}).get(r, 0.0))
        out.append(CheckResult("compute.matmul", Status.PASS, "rank", h, r, {"tflops_bf16": tf}))
        out.append(
            CheckResult(
                "training.step_time",
                Status.PASS,
                "rank",
                h,
                r,
                {"p50_ms": 100.0 * (1 + p50_up), "p99_ms": 180.0 * rnd.uniform(1, 2)},
            )
        )
    out.append(
        CheckResult(
            "collectives.all_reduce",
            Status.PASS,
            "world",
            metrics={"busbw_gbps_large": 360.0, "wrong_elements": 0.0},
            details={"group": "world"},
        )
    )
    out.append(
        CheckResult(
            "collectives.all_reduce",
            Status.PASS,
            "intra",
            "h1",
            metrics={"busbw_gbps_large": 400.0},
            details={"group": "node 1 (h1)"},
        )
    )
    return out


def write_run(
    d: Path, run_id: str, rs: list[CheckResult], verdict: str = "PASS", baseline: str | None = None
) -> Path:
    d.mkdir(parents=True)
    doc = {
        "schema_version": 1,
        "run_id": run_id,
        "started": f"2026-01-01T00:0{run_id[-1]}:00+00:00",
        "finished": "2026-01-01T00:10:00+00:00",
        "verdict": verdict,
        "reasons": [],
        "profile": "quick",
        "baseline": baseline,
        "world": {"nodes": 2, "ranks": 8, "backend": "nccl", "device": "cuda", "hosts": HOSTS},
        "checks": [r.to_dict() for r in rs],
    }
    (d / "results.json").write_text(json.dumps(doc))
    return d


def test_a_planted_15_percent_drop_on_one_gpu_is_the_one_regression_named(tmp_path: Path) -> None:
    a = load_run(str(write_run(tmp_path / "a", "run1", run_results(1))))
    b = load_run(str(write_run(tmp_path / "b", "run2", run_results(2, drop={5: 0.15}))))
    c = compare(a, b)
    regs = c.regressions
    assert [(r.check, r.where, r.metric) for r in regs] == [
        ("compute.matmul", "rank 5 (h1, GPU 1)", "tflops_bf16")
    ]
    assert regs[0].reason().startswith("compute.matmul rank 5 (h1, GPU 1): tflops_bf16 ")
    assert "% worse; tolerance 10%, default)" in regs[0].reason()
    assert -0.20 < (regs[0].delta_frac or 0) < -0.10
    # every rank was compared, rank by rank, not as one average
    assert len([r for r in c.rows if r.check == "compute.matmul"]) == 8
    # tails are shown with --all but never judged
    assert all(r.state == "not judged" for r in c.rows if r.metric == "p99_ms")


def test_a_drop_within_tolerance_and_an_improvement_are_not_regressions(tmp_path: Path) -> None:
    a = load_run(str(write_run(tmp_path / "a", "run1", run_results(1))))
    b = load_run(str(write_run(tmp_path / "b", "run2", run_results(1, drop={2: 0.05, 3: -0.3}))))
    c = compare(a, b)
    assert c.regressions == []
    assert [r.where for r in c.rows if r.state == "improved"] == ["rank 3 (h0, GPU 3)"]


def test_lower_is_better_times_and_status_changes_regress(tmp_path: Path) -> None:
    a_rs, b_rs = run_results(1), run_results(1, p50_up=0.25)
    b_rs[-2].status = Status.FAIL  # the world all_reduce now fails its bar
    c = compare(
        load_run(str(write_run(tmp_path / "a", "run1", a_rs))),
        load_run(str(write_run(tmp_path / "b", "run2", b_rs, "FAIL"))),
    )
    names = {(r.check, r.metric) for r in c.regressions}
    assert ("training.step_time", "p50_ms") in names and (
        "collectives.all_reduce",
        "status",
    ) in names
    status = next(r for r in c.regressions if r.metric == "status")
    assert (
        status.where == "world"
        and status.reason() == "collectives.all_reduce world: status PASS → FAIL"
    )


def test_per_metric_tolerance_from_the_baseline_file(tmp_path: Path) -> None:
    base = tmp_path / "h100.yaml"
    base.write_text(
        "model: X\nrules: []\ntolerances:\n"
        "  - {check: 'compute.*', metric: 'tflops_*', value: 0.2, source: 'GEMM clocks vary 15% run to run'}\n"
    )
    b_file = baselines.load(base)
    assert tolerance_for("compute.matmul", "tflops_bf16", b_file) == (
        0.2,
        "baseline X: GEMM clocks vary 15% run to run",
    )
    assert tolerance_for("memory.copy", "copy_gbps", b_file) == (0.1, "default")
    a = write_run(tmp_path / "a", "run1", run_results(1))
    b = write_run(tmp_path / "b", "run2", run_results(2, drop={5: 0.15}), baseline=f"X ({base})")
    assert compare(load_run(str(a)), load_run(str(b)), baselines.load(base)).regressions == []
    # the CLI picks the baseline B was judged with, from its results.json
    r = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert r.exit_code == 0, r.output
    assert "no regression beyond tolerance" in r.stdout


def test_cli_exit_codes_table_and_json(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", "run1", run_results(1))
    b = write_run(tmp_path / "b", "run2", run_results(2, drop={5: 0.15}))
    r = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert r.exit_code == 1, r.output
    assert "REGRESSION: compute.matmul rank 5 (h1, GPU 1): tflops_bf16" in r.stdout
    assert "1 regression(s) beyond tolerance" in r.stdout
    r = CliRunner().invoke(app, ["compare", str(a), str(b), "-o", "json"])
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert (
        doc["a"]["run_id"] == "run1"
        and len(doc["regressions"]) == 1
        and "rank 5 (h1, GPU 1)" in doc["regressions"][0]
    )
    assert CliRunner().invoke(app, ["compare", str(a), str(a)]).exit_code == 0
    r = CliRunner().invoke(app, ["compare", str(a), str(b), "--tolerance", "0.5"])
    assert r.exit_code == 0


@pytest.mark.parametrize("bad", ["missing-dir", "notjson", "nochecks", "--oops"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, bad: str) -> None:
    a = write_run(tmp_path / "a", "run1", run_results(1))
    ref = str(tmp_path / bad)
    if bad == "notjson":
        (tmp_path / bad).mkdir()
        (tmp_path / bad / "results.json").write_text("{not json")
    elif bad == "nochecks":
        (tmp_path / bad).mkdir()
        (tmp_path / bad / "results.json").write_text('{"run_id": "x"}')
    elif bad == "--oops":  # an option-shaped run name after --: looked up as a name, never obeyed
        ref = "--oops"
    r = CliRunner().invoke(
        app, ["compare", str(a), "--", ref], env={"MLENV_HISTORY_DIR": str(tmp_path / "reports")}
    )
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1


def test_runs_by_id_from_the_history_and_from_a_bundle(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    a = write_run(tmp_path / "a", "run1", run_results(1))
    b = write_run(tmp_path / "b", "run2", run_results(2, drop={5: 0.15}))
    for d in (a, b):
        doc = json.loads((d / "results.json").read_text())
        history.after_run(d, doc, root, cluster="barcelona", plots=False)
    path, _ = bundle.build(b)
    env = {"MLENV_HISTORY_DIR": str(root)}
    r = CliRunner().invoke(app, ["compare", "run1", str(path)], env=env)
    assert r.exit_code == 1, r.output
    assert "rank 5 (h1, GPU 1)" in r.stdout
    # mlenv history: newest first, json too
    r = CliRunner().invoke(app, ["history", "barcelona"], env=env)
    assert r.exit_code == 0, r.output
    rows = r.stdout.splitlines()
    assert rows[0].split()[:3] == ["RUN", "STARTED", "VERDICT"]
    assert [x.split()[0] for x in rows[1:]] == ["run2", "run1"]
    r = CliRunner().invoke(app, ["history", "barcelona", "-o", "json", "--limit", "1"], env=env)
    assert [x["run_id"] for x in json.loads(r.stdout)] == ["run2"]
    for args in (["history", "../etc"], ["history", "barcelona", "-o", "yaml"], ["history", "-x"]):
        r = CliRunner().invoke(app, args, env=env)
        assert r.exit_code == 2 and "Traceback" not in r.output, (args, r.output)


def _training_world(setup: dict[str, object] | None, sps: float) -> CheckResult:
    details: dict[str, object] = {"precision": "bf16", "zero_stage": 2}
    if setup is not None:
        details["setup"] = setup
    return CheckResult(
        "training.deepspeed", Status.PASS, "world", metrics={"samples_per_s": sps}, details=details
    )


def test_compare_says_when_the_training_setups_differ(tmp_path: Path) -> None:
    """a run with the old DeepSpeed bf16 ZeRO-2 setup against one with torch_autocast
    ZeRO-0 is no regression or improvement of the cluster: the note says why the figures moved."""
    fast = {"name": "torch_autocast bf16, ZeRO-0, channels_last", "zero_stage": 0}
    old = load_run(
        str(write_run(tmp_path / "a", "run1", [*run_results(1), _training_world(None, 2800.0)]))
    )
    new = load_run(
        str(write_run(tmp_path / "b", "run2", [*run_results(1), _training_world(fast, 3600.0)]))
    )
    again = load_run(
        str(write_run(tmp_path / "c", "run3", [*run_results(1), _training_world(fast, 3590.0)]))
    )
    (note,) = compare(old, new).notes
    assert note == (
        "note: the training runs used different setups (bf16, ZeRO-2 (setup not recorded) vs "
        "torch_autocast bf16, ZeRO-0, channels_last): their training figures are not comparable"
    )
    assert compare(new, again).notes == []
    assert "different setups" in compare(old, new).to_dict()["notes"][0]


OSC = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # a clipboard write; "\x1b]0;…\x07" would set the title


def _no_control(text: str) -> None:
    assert not any(c in text for c in "\x1b\r\x07\x9b\u202e"), repr(text)


def test_compare_escapes_every_value_read_from_the_runs(tmp_path: Path) -> None:
    """a crafted results.json drove the terminal through compare: OSC title and
    clipboard writes, and a check name whose \\r went back over the REGRESSION line."""
    a = write_run(tmp_path / "a", "run1", run_results(1))
    hide = f"compute.matmul\r{' ' * 40}\rno regression beyond tolerance{OSC}"
    bad = run_results(2, drop={5: 0.15})
    bad.append(CheckResult(hide, Status.FAIL, "rank", f"h1{OSC}", 5, {"tflops_bf16": 1.0}))
    b = write_run(tmp_path / "b", "run2", bad)
    doc = json.loads((b / "results.json").read_text())
    doc.update(profile=f"quick{OSC}", started="2026\u202e-01-01")
    (b / "results.json").write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["compare", str(a), str(b), "--all"])
    assert r.exit_code == 1, r.output
    _no_control(r.stdout)
    _no_control(r.stderr)
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in r.stdout and "compute.matmul\\r" in r.stdout
    assert "\\u202e" in r.stdout


def test_history_escapes_every_value_and_fits_the_terminal(tmp_path: Path) -> None:
    """A crafted history line reached the terminal as it was, and rows of a
    full run's headline metrics ran to about 400 characters."""
    root = tmp_path / "reports"
    rec = {
        "schema_version": 2,
        "run_id": f"20260101-000000-aaaaaa{OSC}",
        "cluster": "barcelona",
        "started": "2026-01-01T00:00:00.123+00:00",
        "verdict": "PASS\rFAIL",
        "profile": f"quick{OSC}",
        "world": {"ranks": 16},
        "versions": {
            "h0": {"torch": "2.13.0", "driver": "550.54.15", "cuda": "12.4", "nccl": "2.21.5"}
        },
        "metrics": {
            f"collectives.op{i}": {"busbw_gbps_large": 123.456 + i, "alg_gbps": 99.5}
            for i in range(12)
        },
    }
    history.append(history.history_path(root, "barcelona"), rec)
    env = {"MLENV_HISTORY_DIR": str(root), "COLUMNS": "100"}
    r = CliRunner().invoke(app, ["history", "barcelona"], env=env)
    assert r.exit_code == 0, r.output
    _no_control(r.stdout)
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= 100, [len(x) for x in lines]
    assert lines[1].startswith("20260101-000000-aaaaaa\\x1b]52;c;") and lines[1].endswith("…")
    assert "rows cut at the terminal's width" in r.stderr
    r = CliRunner().invoke(app, ["history", "barcelona", "--wide"], env=env)
    _no_control(r.stdout)
    row = r.stdout.splitlines()[1]
    assert (
        len(row) > 300
        and "2026-01-01 00:00Z" in row
        and "PASS\\rFAIL" in row
        and "op9.busbw_gbps_large=132.5" in row
    )
    r = CliRunner().invoke(app, ["history", "barcelona", "-o", "json"], env=env)
    _no_control(r.stdout)
    assert (
        json.loads(r.stdout)[0]["verdict"] == "PASS\rFAIL"
    )  # JSON keeps the value, escaped by JSON itself


def test_an_error_quoting_a_crafted_run_id_is_escaped_too(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", "run1", run_results(1))
    b = write_run(tmp_path / "b", f"run2{OSC}\r", run_results(2), verdict="INTERRUPTED")
    r = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert r.exit_code == 2 and "was INTERRUPTED" in r.stderr, r.output
    _no_control(r.stderr)
