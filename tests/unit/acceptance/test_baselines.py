"""Baseline files: the shipped ones parse; a broken one gives file:line and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.acceptance.judging import baselines
from mlenv.errors import InputError

GOOD = """model: Test
rules:
  - {check: compute.matmul, metric: tflops_fp32, op: ">=", value: 1.5, source: "s"}
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "b.yaml"
    p.write_text(text)
    return p


def test_shipped_baselines_parse_with_a_source_for_every_number() -> None:
    models = {b.model for b in baselines.builtin()}
    assert {"H100 80GB", "H200", "A100 80GB", "CPU"} <= models
    for b in baselines.builtin():
        assert b.rules
        assert all(x.source.strip() for x in b.rules) and all(x.source.strip() for x in b.expected)


def test_every_shipped_figure_says_whether_it_was_measured_or_published() -> None:
    """each expected figure has a structured source, a dated measurement on a named
    machine or a citation, so a reader can tell a figure we measured from one we read."""
    import datetime

    for b in baselines.builtin():
        for e in b.expected:
            where = f"{b.path}: expected {e.check} {e.metric}"
            assert e.provenance is not None, f"{where}: source is free text"
            if e.provenance.kind == "measured":
                assert datetime.date.fromisoformat(e.provenance.date) <= datetime.date.today(), (
                    where
                )
                assert e.provenance.machine.strip(), where
                assert e.source.startswith(
                    f"measured {e.provenance.date} on {e.provenance.machine}: "
                ), where
            else:
                assert e.provenance.kind == "cited" and e.provenance.citation.startswith(
                    "https://"
                ), where
                assert e.provenance.citation in e.source, where
    # The published per-SKU floors the issue names are cited, not typed in from memory.
    h100 = baselines.find_for_device(["NVIDIA H100 80GB HBM3"])
    assert h100 is not None
    (nvlink,) = [e for e in h100.expected if e.metric == "busbw_gbps_large"]
    assert nvlink.value == 460 and nvlink.provenance is not None
    assert nvlink.provenance.citation.startswith(
        "https://github.com/Azure/azurehpc-health-checks/blob/"
    )
    assert "380 Gb/s" in nvlink.source and "48 GB/s" in nvlink.source


SOURCED = """model: Test
expected:
  - {check: compute.matmul, metric: tflops_fp32, value: 2, source: SRC}
rules:
  - {check: compute.matmul, metric: tflops_fp32, op: ">=", value: 1.5, source: "s"}
"""


def test_structured_sources_parse(tmp_path: Path) -> None:
    measured = '{measured: 2026-11-22, machine: "box", note: "n"}'
    b = baselines.load(_write(tmp_path, SOURCED.replace("SRC", measured)))
    assert b.expected[0].provenance == baselines.Provenance(
        "measured", note="n", date="2026-11-22", machine="box"
    )
    assert b.expected[0].source == "measured 2026-11-22 on box: n"
    cited = '{cited: "https://example.org/x.conf", note: "floor"}'
    b = baselines.load(_write(tmp_path, SOURCED.replace("SRC", cited)))
    assert b.expected[0].source == "floor (https://example.org/x.conf)"
    assert b.expected[0].provenance is not None and b.expected[0].provenance.kind == "cited"
    # A plain note still works (users' own baselines from before provenance was kept).
    assert (
        baselines.load(_write(tmp_path, SOURCED.replace("SRC", '"a note"'))).expected[0].provenance
        is None
    )


@pytest.mark.parametrize(
    ("src", "message"),
    [
        (
            '{measured: 22.11.2026, machine: "box", note: "n"}',
            ":3:79: expected[0].source.measured: expected the date of the measurement, YYYY-MM-DD (got '22.11.2026')",
        ),
        ('{measured: 2026-11-22, note: "n"}', ":3:68: expected[0].source: expected key 'machine'"),
        (
            '{cited: "see the datasheet", note: "n"}',
            ":3:76: expected[0].source.cited: expected the https:// address of the published figure",
        ),
        (
            '{cited: "https://x.org", note: "n", machine: "m"}',
            "expected[0].source.machine: expected one of the keys",
        ),
        (
            "{guessed: 1}",
            ":3:68: expected[0].source: expected a note, or a mapping with 'measured'",
        ),
    ],
)
def test_bad_structured_source_names_the_place(tmp_path: Path, src: str, message: str) -> None:
    p = _write(tmp_path, SOURCED.replace("SRC", src))
    with pytest.raises(InputError) as e:
        baselines.load(p)
    assert str(e.value).startswith(str(p) + ":") and message in str(e.value)


def test_pick_by_gpu_name_and_type() -> None:
    assert baselines.find_for_device(["NVIDIA H100 80GB HBM3"]).model == "H100 80GB"  # type: ignore[union-attr]
    assert baselines.find_for_device(["H200"]).model == "H200"  # type: ignore[union-attr]
    assert baselines.find_for_device(["NVIDIA A100-SXM4-80GB"]).model == "A100 80GB"  # type: ignore[union-attr]
    assert baselines.find_for_device(["Some Future GPU"]) is None
    assert baselines.resolve("H100-80GB", []).model == "H100 80GB"  # type: ignore[union-attr]
    with pytest.raises(InputError, match="neither a file nor a known GPU model"):
        baselines.resolve("Z9000", [])


def test_good_file(tmp_path: Path) -> None:
    b = baselines.load(_write(tmp_path, GOOD))
    assert b.rules[0].op == ">=" and b.rules[0].value == 1.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            GOOD.replace('">="', '"=>"'),
            ":3:54: rules[0].op: expected one of >=, <=, >, <, == (got '=>')",
        ),
        (GOOD.replace("value: 1.5", "value: fast"), ":3:67: rules[0].value: expected a number"),
        (GOOD.replace(', source: "s"', ""), ":3:5: rules[0]: expected key 'source'"),
        (
            GOOD.replace("op:", "opp:"),
            ":3:50: rules[0].opp: expected one of the keys check, metric, op, value, source, scope, when (did you mean 'op'?)",
        ),
        (
            GOOD.replace('op: ">="', 'op: ">=", when: [resnet50]'),
            ":3:66: rules[0].when: expected a mapping",
        ),
        (
            GOOD.replace('op: ">="', 'op: ">=", when: {model: [a, b]}'),
            ":3:74: rules[0].when.model: expected a string, number or boolean",
        ),
        ("model: X\nrules: {a: 1}\n", ":2:8: rules: expected a list"),
        ("model: [\n", ":2:1: invalid YAML"),
        ("", ":1:1: (root): expected a mapping"),
        (GOOD.replace('op: ">="', 'op: ">=", scope: galaxy'), ":3:"),
    ],
)
def test_broken_file_names_file_line_and_expectation(
    tmp_path: Path, text: str, message: str
) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(InputError) as e:
        baselines.load(p)
    assert str(e.value).startswith(str(p) + ":")
    assert message in str(e.value)


def test_cli_broken_baseline_exits_2_without_traceback(tmp_path: Path) -> None:
    from mlenv.cli.app import app

    p = _write(tmp_path, GOOD.replace('">="', '"~"'))
    res = CliRunner().invoke(
        app, ["acceptance", "--local", "--baseline", str(p), "--report-dir", str(tmp_path / "r")]
    )
    assert res.exit_code == 2
    assert f"{p}:3:" in res.output and "rules[0].op: expected one of" in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "r").exists()  # nothing was launched


def test_cli_bad_flags_exit_2(tmp_path: Path) -> None:
    from mlenv.cli.app import app

    r = CliRunner()
    assert r.invoke(app, ["acceptance", "--local", "--profile", "huge"]).exit_code == 2
    assert r.invoke(app, ["acceptance", "--local", "--checks", "nosuch"]).exit_code == 2
    assert r.invoke(app, ["acceptance"]).exit_code == 2
    opts = tmp_path / "o.yaml"
    opts.write_text("compute: [1, 2\n")
    res = r.invoke(app, ["acceptance", "--local", "--options", str(opts)])
    assert res.exit_code == 2 and f"{opts}:2:1: invalid YAML" in res.output


def test_cli_bad_training_option_exits_2_before_launch(tmp_path: Path) -> None:
    """A typo in the training options is an input error up front, not ERROR from every rank."""
    from mlenv.cli.app import app

    opts = tmp_path / "opts.json"
    opts.write_text('{"training": {"dataset": "imagenet"}}')
    res = CliRunner().invoke(
        app,
        [
            "acceptance",
            "--local",
            "--checks",
            "training",
            "--options",
            str(opts),
            "--report-dir",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code == 2
    assert "dataset" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "r" / "results.json").exists()  # nothing was launched


def test_entry_bad_training_option_exits_2(tmp_path: Path) -> None:
    from mlenv.acceptance.__main__ import main

    opts = tmp_path / "opts.json"
    opts.write_text('{"training": {"zero_stage": 7}}')
    assert (
        main(["--checks", "training", "--options", str(opts), "--report-dir", str(tmp_path / "r")])
        == 2
    )


WHEN = """model: Test
expected:
  - {check: training.deepspeed, metric: samples_per_s_per_rank, value: 2800, source: "published",
     when: {model: resnet50, batch_size_per_rank: 256}}
  - {check: collectives.all_reduce, metric: busbw_gbps_large, value: 400, source: "nvlink", when: {nodes: 1}}
rules:
  - {check: training.deepspeed, metric: samples_per_s_per_rank, op: ">=", value: 2000, source: "70%",
     when: {model: resnet50, batch_size_per_rank: 256}}
"""


def _training(model: str, batch: int, sps: float) -> object:
    from mlenv.acceptance.core.result import CheckResult, Status

    return CheckResult(
        name="training.deepspeed",
        status=Status.PASS,
        scope="world",
        metrics={"samples_per_s_per_rank": sps},
        details={"model": model, "batch_size_per_rank": batch},
    )


def test_when_limits_rules_and_expected_values_to_the_setup_they_were_measured_in(
    tmp_path: Path,
) -> None:
    from mlenv.acceptance.core.result import CheckResult, Status, Verdict
    from mlenv.acceptance.judging.verdict import judge

    b = baselines.load(_write(tmp_path, WHEN))
    assert b.rules[0].when == (("model", "resnet50"), ("batch_size_per_rank", 256.0))
    # A ResNet-18 quick run at 900 samples/s is neither judged nor compared with 2800 …
    quick = judge([_training("resnet18", 8, 900.0)], b)  # type: ignore[list-item]
    assert quick.verdict == Verdict.PASS
    assert quick.expected[0]["measured"] is None and quick.expected[0]["when"] == {
        "model": "resnet50",
        "batch_size_per_rank": 256.0,
    }
    # … while the published setup below the bar fails, by how much named.
    slow = judge([_training("resnet50", 256, 1500.0)], b)  # type: ignore[list-item]
    assert slow.verdict == Verdict.FAIL
    assert (
        "samples_per_s_per_rank = 1500, expected >= 2000 (25% below the bar; 70%)"
        in slow.reasons[0]
    )
    assert slow.expected[0]["measured"] == 1500.0
    # Inside one node vs across nodes: only the single-node group meets the NVLink figure.
    groups = [
        CheckResult(
            name="collectives.all_reduce",
            status=Status.PASS,
            scope=scope,
            metrics={"busbw_gbps_large": bw},
            details={"nodes": nodes},
        )
        for scope, nodes, bw in (("world", 2, 40.0), ("intra", 1, 380.0), ("inter", 2, 45.0))
    ]
    assert judge(groups, b).expected[1]["measured"] == 380.0
