"""Typed check options: declarations, resolution, and located errors for every check."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlenv.acceptance.checks.collectives import CollectiveOptions
from mlenv.acceptance.checks.compute import MatmulOptions, QuorumOptions
from mlenv.acceptance.core import faults, options, profiles
from mlenv.acceptance.core.base import RunContext, option_classes
from mlenv.errors import InputError

ROOT = Path(__file__).resolve().parents[3]


def _registered() -> dict[str, type[options.CheckOptions]]:
    profiles.registered_options()  # imports the shipped checks
    return option_classes()


def _families() -> list[str]:
    return sorted({options.family(n) for n in _registered()})


def _ctx(
    device: str = "cpu", opts: dict[str, Any] | None = None, profile: str = "quick"
) -> RunContext:
    return RunContext(
        rank=1,
        world_size=2,
        local_rank=1,
        local_world_size=2,
        node_rank=0,
        nnodes=1,
        host="h",
        backend="gloo",
        device=device,
        profile=profile,
        options=opts or {},
    )


def _write(tmp_path: Path, text: str, name: str = "opts.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ------------------------------------------------------------------------- declarations


@pytest.mark.parametrize("check", sorted(_registered()))
def test_every_check_declares_typed_options_whose_defaults_pass_its_own_rules(check: str) -> None:
    cls = _registered()[check]
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    for spec in cls.specs():
        assert spec.type in options.OPTION_TYPES and spec.help.strip(), spec
        for default in (spec.cpu, spec.cuda):
            assert type(default) is spec.type, (spec.name, default)
    for cuda in (False, True):
        built = options.build(cls, check, {}, cuda=cuda)
        assert built.problems() == [] and built.to_dict() == cls.defaults(cuda)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(built, "x", 1)  # noqa: B010 - the point is that it refuses


def test_a_declaration_without_help_or_with_an_odd_type_fails_at_once() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoHelp(options.CheckOptions):
        n: int = 3

    @dataclasses.dataclass(frozen=True)
    class TupleOpt(options.CheckOptions):
        xs: tuple[int, ...] = options.option((1,), help="a tuple")

    with pytest.raises(TypeError, match="option\\(cpu, cuda=..., help=...\\)"):
        NoHelp.specs()
    with pytest.raises(TypeError, match="not one of int, float, str, bool"):
        TupleOpt.specs()


# ------------------------------------------------------------------------- resolution


def test_layers_apply_in_order_and_a_check_section_wins_over_its_family() -> None:
    ctx = _ctx("cuda:0", {"compute": {"n": 1024, "iters": 7}, "compute.matmul": {"n": 2048}})
    m = ctx.options_of(MatmulOptions, "compute.matmul")
    assert (m.n, m.iters, m.warmup, m.inner) == (2048, 7, 3, 10)  # GPU defaults where nothing says
    full = _ctx("cpu", {}, profile="full").options_of(MatmulOptions, "compute.matmul")
    assert (full.n, full.iters, full.inner) == (8192, 50, 1)


def test_a_family_section_may_hold_a_siblings_option() -> None:
    ctx = _ctx("cpu", {"compute": {"n": 64, "quorum_n": 32}})
    assert ctx.options_of(MatmulOptions, "compute.matmul").n == 64
    assert ctx.options_of(QuorumOptions, "compute.quorum").quorum_n == 32
    with pytest.raises(InputError, match="compute.quorum.n: unknown option"):
        _ctx("cpu", {"compute.quorum": {"n": 64}}).options_of(QuorumOptions, "compute.quorum")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1024.0, 1024),  # an integral float is an integer (JSON/YAML 1024.0)
    ],
)
def test_integers_accept_integral_floats(value: float, expected: int) -> None:
    got = _ctx(opts={"collectives": {"max_bytes": value}}).options_of(
        CollectiveOptions, "collectives.broadcast"
    )
    assert got.max_bytes == expected and type(got.max_bytes) is int


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("compute", "n", "512", "compute.n: expected an integer, got '512'"),
        ("compute", "n", 1.5, "compute.n: expected an integer, got 1.5"),
        ("compute", "n", True, "compute.n: expected an integer, got True"),
        ("memory.copy", "bytes", None, "memory.copy.bytes: expected an integer, got None"),
        ("training", "lr", "fast", "training.lr: expected a number, got 'fast'"),
        ("training", "lr", False, "training.lr: expected a number, got False"),
        ("training", "model", 50, "training.model: expected a string, got 50"),
        ("compute", "quorum_n", 2**21, "compute.quorum_n: must be in 1..1048576"),
        (
            "collectives",
            "max_bytes",
            512,
            "collectives.max_bytes: must be >= min_bytes (1024), got 512",
        ),
        (
            "collectives.all_reduce",
            "factor",
            1,
            "collectives.all_reduce.factor: must be >= 2, got 1",
        ),
        ("memory", "bytes", 2, "memory.bytes: must be >= 4, got 2"),
        (
            "training",
            "straggler_status",
            "PASS",
            "training.straggler_status: expected WARN or FAIL",
        ),
    ],
)
def test_wrong_values_are_input_errors_naming_section_and_option(
    section: str, key: str, value: object, message: str
) -> None:
    with pytest.raises(InputError) as e:
        profiles.resolve("quick", {section: {key: value}})
    assert str(e.value).startswith(f"options: {message}")


@pytest.mark.parametrize("section", sorted(_registered()) + _families())
def test_an_unknown_option_is_refused_for_every_check_and_family(
    section: str, tmp_path: Path
) -> None:
    p = _write(tmp_path, f"# mine\n{section}:\n  nn: 4\n")
    with pytest.raises(InputError) as e:
        profiles.resolve("quick", profiles.load_options_file(p))
    assert str(e.value).startswith(f"{p}:3:3: {section}.nn: unknown option")
    assert "known: " in str(e.value)


def test_an_unknown_section_is_located_with_a_did_you_mean(tmp_path: Path) -> None:
    p = _write(tmp_path, "compute:\n  n: 64\ncolectives:\n  iters: 2\n")
    with pytest.raises(InputError) as e:
        profiles.resolve("full", profiles.load_options_file(p), device="cuda:0")
    assert str(e.value).startswith(
        f"{p}:3:1: colectives: unknown check or family (did you mean 'collectives'?)"
    )


def test_a_wrong_value_is_located_at_the_value_and_a_rule_at_the_value_that_broke_it(
    tmp_path: Path,
) -> None:
    p = _write(tmp_path, "training:\n  model: resnet18\n  steps: ten\n")
    with pytest.raises(
        InputError, match=f"^{p}:3:10: training.steps: expected an integer, got 'ten'$"
    ):
        profiles.resolve("quick", profiles.load_options_file(p))
    p = _write(tmp_path, '{"training": {"dataset": "cifar10"}}', "opts.json")
    with pytest.raises(
        InputError, match=f"^{p}:1:26: training.dataset: dataset cifar10 needs the option data_dir$"
    ):
        profiles.resolve("quick", profiles.load_options_file(p))


def test_values_are_checked_on_both_devices_before_the_device_is_known() -> None:
    # the CPU default warm-up is fine; an override only a GPU rank would take still is checked
    with pytest.raises(InputError, match="compute.matmul.inner: must be >= 1, got 0"):
        profiles.resolve("quick", {"compute.matmul": {"inner": 0}})


def test_resolving_never_edits_the_profile_table() -> None:
    before = dataclasses.replace(profiles.PROFILES["full"])
    layer = profiles.resolve("full", {"compute": {"n": 1}}, device="cuda:0")
    assert layer["compute"]["n"] == 1 and profiles.PROFILES["full"] == before
    assert profiles.PROFILES["full"].overrides["compute"]["n"] == 8192


# ------------------------------------------------------------------------- files


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        (
            "compute:\n  n: 64\n  n: 128\n",
            "o.yaml",
            ":3:3: compute.n: duplicate key 'n' (first defined at line 2)",
        ),
        (
            "compute:\n  n: 64\ncompute:\n  iters: 2\n",
            "o.yaml",
            ":3:1: compute: duplicate key 'compute'",
        ),
        ('{"compute": {"n": 64, "n": 128}}', "o.json", ":1:23: compute.n: duplicate key 'n'"),
        ("compute: {n: [\n", "o.yaml", ":2:1: invalid YAML"),
        ("- compute\n", "o.yaml", ":1:1: expected a mapping"),
        (
            "compute: 4\n",
            "o.yaml",
            ":1:10: compute: expected a mapping of option name to value, got int",
        ),
        ("compute:\n  n: !!int abc\n", "o.yaml", ":2:6: compute.n: cannot read this value"),
        ("a: 1\n---\nb: 2\n", "o.yaml", "invalid YAML"),
    ],
)
def test_options_files_are_read_strictly(
    tmp_path: Path, text: str, name: str, message: str
) -> None:
    p = _write(tmp_path, text, name)
    with pytest.raises(InputError) as e:
        profiles.load_options_file(p)
    assert str(e.value).startswith(f"{p}:") and message in str(e.value)


def test_blank_null_and_tab_indented_json_files_are_fine(tmp_path: Path) -> None:
    assert profiles.load_options_file(_write(tmp_path, "# nothing yet\n")) == {}
    assert profiles.load_options_file(_write(tmp_path, "compute:\n")) == {"compute": {}}
    layer = profiles.load_options_file(
        _write(tmp_path, '{\n\t"compute": {\n\t\t"n": 64\n\t}\n}\n', "o.json")
    )
    assert layer == {"compute": {"n": 64}} and layer.where[("compute", "n")].endswith(":3:8")


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read options file: No such file"):
        profiles.load_options_file(tmp_path / "nope.yaml")


def test_baseline_files_refuse_a_duplicated_key_with_its_location(tmp_path: Path) -> None:
    from mlenv.acceptance.judging import baselines

    p = _write(
        tmp_path,
        "model: Test\nrules:\n  - {check: compute.matmul, metric: tflops_fp32, op: '>=',\n"
        "     value: 1.5, value: 150, source: s}\n",
        "b.yaml",
    )
    with pytest.raises(InputError) as e:
        baselines.load(p)
    assert str(e.value).startswith(
        f"{p}:4:18: rules[0].value: duplicate key 'value' (first defined at line 4)"
    )
    p = _write(tmp_path, "model: A\nmodel: B\nrules: []\n", "b.yaml")
    with pytest.raises(InputError, match=f"^{p}:2:1: model: duplicate key 'model'"):
        baselines.load(p)


# ------------------------------------------------------------------------- at the edges


def test_the_cli_refuses_a_bad_options_file_before_launching(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mlenv.cli.app import app

    p = _write(tmp_path, "compute:\n  nn: 4\n")
    res = CliRunner().invoke(
        app, ["acceptance", "--local", "--options", str(p), "--report-dir", str(tmp_path / "r")]
    )
    assert res.exit_code == 2, res.output
    assert f"{p}:2:3: compute.nn: unknown option (did you mean 'n'?)" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "r").exists()


def test_the_entry_point_exits_2_on_a_duplicated_key(tmp_path: Path) -> None:
    p = _write(tmp_path, "memory:\n  iters: 3\n  iters: 4\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlenv.acceptance",
            "--options",
            str(p),
            "--report-dir",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"error: {p}:3:3: memory.iters: duplicate key 'iters' (first defined at line 2) "
        "(YAML keeps only the last one; remove one of them)"
    )


# ------------------------------------------------------------------------- faults


def test_faults_are_asked_through_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLENV_FAULT", "slow:rank=1,check=compute,factor=3;corrupt:rank=0")
    ctx = _ctx()  # rank 1, node 0
    assert ctx.fault("slow", "compute.matmul") == {"rank": "1", "check": "compute", "factor": "3"}
    assert ctx.fault("slow", "memory.copy") is None
    assert ctx.fault("corrupt", "compute.quorum") is None  # another rank's
    with pytest.raises(ValueError, match="unknown fault kind 'slo'"):
        ctx.fault("slo", "compute.matmul")
    monkeypatch.delenv("MLENV_FAULT")
    assert ctx.fault("kill", "compute.matmul") is None
    assert faults.KINDS == ("kill", "hang", "slow", "slow_stack", "corrupt")


def test_the_busy_gpu_thresholds_are_options_of_the_environment_check() -> None:
    from mlenv.acceptance.checks import environment as envcheck

    def held_3gib() -> envcheck.GpuUse:  # 3 GiB of 80 held by a process that is not ours
        return envcheck.GpuUse(index=0, uuid="GPU-a", used_mib=3072, total_mib=81920, util_pct=0.0)

    apps = [(4242, 3072.0, "GPU-a")]
    default = _ctx("cuda:0").options_of(envcheck.EnvironmentOptions, "environment")
    assert envcheck.judge_use(held_3gib(), apps, lambda pid: False, default).busy
    roomy = _ctx("cuda:0", {"environment": {"busy_mem_gib": 4}}).options_of(
        envcheck.EnvironmentOptions, "environment"
    )
    assert (
        roomy.busy_mem_gib == 4.0
        and not envcheck.judge_use(held_3gib(), apps, lambda pid: False, roomy).busy
    )
    with pytest.raises(InputError, match="environment.busy_mem_frac: must be at most 1, got 10"):
        profiles.resolve("quick", {"environment": {"busy_mem_frac": 10}})


def test_a_value_keeps_the_position_of_the_layer_it_came_from(tmp_path: Path) -> None:
    first = profiles.load_options_file(
        _write(tmp_path, "compute:\n  n: 64\n  iters: 2\n", "a.yaml")
    )
    merged = options.merge([first, {"compute": {"n": 32}}])
    assert merged == {"compute": {"n": 32, "iters": 2}}
    assert ("compute", "n") not in merged.where and merged.where[("compute", "iters")].endswith(
        "a.yaml:3:10"
    )
    # a rule broken by a value no file gave is reported without a file position
    with pytest.raises(
        InputError, match=r"^options: collectives\.all_gather\.max_bytes: must be >= min_bytes"
    ):
        profiles.resolve("quick", {"collectives": {"min_bytes": 2**30}})


def test_the_checks_run_with_the_typed_options_of_their_context(tmp_path: Path) -> None:
    """A real one-rank gloo world: what a check measures is what its options say."""
    pytest.importorskip("torch")
    import torch.distributed as dist

    from mlenv.acceptance.checks.compute import MatmulCheck, QuorumCheck
    from mlenv.acceptance.checks.memory import CopyCheck

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        ctx = RunContext(
            rank=0,
            world_size=1,
            local_rank=0,
            local_world_size=1,
            node_rank=0,
            nnodes=1,
            host="h",
            backend="gloo",
            device="cpu",
            options={
                "compute": {"n": 48, "iters": 2, "warmup": 0, "quorum_n": 40},
                "memory.copy": {"bytes": 4096, "iters": 2},
            },
        )
        (matmul,) = MatmulCheck().run(ctx)
        assert matmul.details["shape"] == [48, 48, 48] and matmul.details["iterations"] == 2
        assert matmul.details["warmup"] == 0 and matmul.details["inner"] == 1  # the CPU default
        (quorum,) = QuorumCheck().run(ctx)
        assert quorum.details["shape"] == [40, 40, 40] and quorum.status.value == "PASS"
        (copy,) = CopyCheck().run(ctx)
        assert copy.details["bytes"] == 4096 and copy.details["warmup"] == 1
        ctx.options = {"memory": {"byte": 4096}}
        with pytest.raises(
            InputError, match="memory.byte: unknown option \\(did you mean 'bytes'\\?\\)"
        ):
            CopyCheck().run(ctx)
    finally:
        dist.destroy_process_group()


PLUGIN = """
from dataclasses import dataclass

from mlenv.acceptance.core.base import Check, register
from mlenv.acceptance.core.options import CheckOptions, option


@dataclass(frozen=True)
class SiteOptions(CheckOptions):
    rounds: int = option(1, cuda=3, help="rounds")


@register
class SiteCheck(Check):
    name = "site.probe"
    Options = SiteOptions

    def run(self, ctx):
        return []
"""


def test_a_plugin_checks_options_are_resolved_and_refused_like_a_shipped_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlenv.acceptance.core import base, registry

    (tmp_path / "site_plugin_i11.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    # the plugin registers into a copy
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.delitem(sys.modules, "site_plugin_i11", raising=False)
    monkeypatch.setenv("MLENV_ACCEPTANCE_PLUGINS", "site_plugin_i11")
    layer = profiles.resolve("quick", {"site": {"rounds": 5}}, device="cuda:0")
    site = base.registry()["site.probe"]
    assert _ctx("cuda:0", dict(layer)).options_of(site.Options, "site.probe").to_dict() == {
        "rounds": 5
    }
    assert _ctx("cuda:0").options_of(site.Options, "site.probe").to_dict() == {"rounds": 3}
    with pytest.raises(
        InputError,
        match="^options: site.probe.round: unknown option \\(did you mean 'rounds'\\?\\)",
    ):
        profiles.resolve("quick", {"site.probe": {"round": 5}})
    sys.modules.pop("site_plugin_i11", None)


def test_every_problem_of_an_options_file_at_once(tmp_path: Path) -> None:
    """They came one at a time (fix one, run again, meet the next), unlike config errors."""
    p = _write(tmp_path, "compute:\n  nn: 4\ntraining:\n  steps: ten\ncolectives:\n  iters: 2\n")
    with pytest.raises(InputError) as e:
        profiles.resolve("quick", profiles.load_options_file(p))
    lines = str(e.value).splitlines()
    assert lines[0] == "3 problems in the options:"
    assert lines[1].startswith(
        f"  {p}:5:1: colectives: unknown check or family (did you mean 'collectives'?)"
    )
    assert any(x.startswith(f"  {p}:2:3: compute.nn: unknown option") for x in lines[2:])
    assert f"  {p}:4:10: training.steps: expected an integer, got 'ten'" in lines
    assert len(lines) == 4  # each problem once, though several checks and both devices see it


def test_help_says_what_nproc_0_means() -> None:
    """`--help` showed `--nproc [default: 0]` and nothing said what 0 does."""
    from typer.testing import CliRunner

    from mlenv.cli.app import app

    res = CliRunner().invoke(app, ["acceptance", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "0 means one per GPU of this machine, or 2 CPU ranks without a GPU" in text
