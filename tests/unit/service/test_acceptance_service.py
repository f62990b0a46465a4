"""Acceptance's service without the CLI and without processes: the launcher is a stand-in,
so what is checked is the service's own part: the plan, the lines it says and where, the
exit code, the record of a run stopped before it launched, the bundle and the platform
hand-off."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from mlenv.acceptance.run import local, world
from mlenv.acceptance.run.local import LocalRun
from mlenv.errors import InputError, Interrupted
from mlenv.service import Notifier
from mlenv.service import acceptance as service


class Said:
    """A Notifier that keeps each stream's lines."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.note: list[str] = []
        self.err: list[str] = []
        self.debug: list[str] = []

    def notifier(self) -> Notifier:
        return Notifier(
            out=self.out.append, note=self.note.append, err=self.err.append, debug=self.debug.append
        )


def _plan(**kw: Any) -> service.LocalPlan:
    fields: dict[str, Any] = dict(
        n=2,
        gpus=0,
        deadline=30.0,
        n_checks=2,
        profile="quick",
        checks="",
        baseline=None,
        options=None,
        localize=False,
        bundle=False,
    )
    return service.LocalPlan(**(fields | kw))


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The launcher replaced: ``seen`` gets its command's suite arguments; ``then`` is what
    the run comes to (a LocalRun, or an exception raised where the launch would be)."""
    monkeypatch.delenv("MLENV_HISTORY_DIR", raising=False)
    box: dict[str, Any] = {}

    def build(n: int, gpus: int, port: int, report_dir: Path, suite: list[str]) -> list[str]:
        box["suite"] = suite
        return ["deepspeed", "--num_gpus", str(n), *suite]

    def run(cmd: list[str], env: dict[str, str], report_dir: Path, budget: float, **kw: Any):
        box["budget"], box["level"] = budget, kw["level"]
        then = box["then"]
        if isinstance(then, BaseException):
            raise then
        return then

    monkeypatch.setattr(local, "build_command", build)
    monkeypatch.setattr(local, "launch_env", lambda n, gpus: {})
    monkeypatch.setattr(local, "compiler_problem", lambda gpus, env: None)
    monkeypatch.setattr(local, "ops_installed", lambda: True)
    monkeypatch.setattr(local, "run_local", run)
    monkeypatch.setattr(world, "free_port", lambda: 29500)
    return box


def test_plan_local_runs_a_rank_per_gpu_and_refuses_more_ranks_than_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlenv.acceptance.core import profiles

    monkeypatch.setattr(local, "validate", lambda *a: 3)
    monkeypatch.setattr(local, "gpu_count", lambda: 4)
    flags: dict[str, Any] = dict(
        profile="quick", checks="", baseline=None, options=None, deadline=0.0, bundle=False
    )
    plan = service.plan_local(nproc=0, localize=True, **flags)
    assert (plan.n, plan.gpus, plan.n_checks) == (4, 4, 4)
    assert plan.deadline == profiles.DEADLINES["quick"]
    with pytest.raises(InputError, match=r"--nproc 5: this machine has 4 GPU\(s\)"):
        service.plan_local(nproc=5, localize=False, **flags)
    monkeypatch.setattr(local, "gpu_count", lambda: 0)
    assert service.plan_local(nproc=0, localize=False, **flags).n == 2  # 2 CPU ranks


def test_a_local_run_says_its_progress_and_returns_the_verdicts_code(
    tmp_path: Path, launcher: dict[str, Any]
) -> None:
    launcher["then"] = LocalRun(
        doc={"verdict": "FAIL"}, recovered=False, wall_s=1.5, timed_out=False
    )
    said = Said()
    report_dir = tmp_path / "run"
    code = service.run_local(_plan(level="quiet"), report_dir, root=tmp_path, say=said.notifier())
    assert code == 1
    run_id = launcher["suite"][launcher["suite"].index("--run-id") + 1]
    # a line that would run past 100 columns continues on the next (a path is never cut)
    assert " ".join(x.strip() for x in said.note).split(" launching ") == [
        f"run {run_id}: reports in {report_dir}",
        f"2 rank(s) (CPU, gloo) through DeepSpeed; details in {report_dir / 'launcher.log'} "
        "wall time: 1.5 s",
    ]
    assert said.debug == [f"launcher: deepspeed --num_gpus 2 {' '.join(launcher['suite'])}"]
    assert said.out == said.err == []  # rank 0 printed the verdict itself
    suite = launcher["suite"]
    assert suite[suite.index("--report-dir") + 1] == str(report_dir.resolve())
    assert suite[suite.index("--history-dir") + 1] == str((tmp_path / "reports").resolve())
    assert launcher["budget"] == 2 * 30.0 + local.STARTUP_SLACK_S
    assert launcher["level"] == "quiet"
    # the folder's claim was released: a second run may take it once the first is cleared
    for p in report_dir.iterdir():
        p.unlink()
    launcher["then"] = LocalRun(doc={"verdict": "PASS"}, recovered=False, wall_s=1, timed_out=False)
    assert service.run_local(_plan(), report_dir, root=tmp_path, say=Said().notifier()) == 0


def test_a_stop_before_the_launch_is_recorded_interrupted_and_the_handlers_restored(
    tmp_path: Path, launcher: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlenv.acceptance.records import trend

    # Finalising the report (local.recover: judging against the baselines) and drawing the
    # trend plots are tested where they live, and cost seconds: stand-ins here.
    recovered: list[tuple[Any, ...]] = []

    def recover(report_dir: Path, rc: int | None, run_id: str, sig: str) -> dict[str, Any]:
        recovered.append((report_dir, rc, run_id, sig))
        return {
            "run_id": run_id,
            "verdict": "INTERRUPTED",
            "interrupted": {"signal": sig},
            "checks": [],
        }

    monkeypatch.setattr(local, "recover", recover)
    monkeypatch.setattr(trend, "plot_trends", lambda *a: [])
    before = signal.getsignal(signal.SIGTERM)
    launcher["then"] = Interrupted("SIGTERM")
    said = Said()
    report_dir = tmp_path / "run"
    code = service.run_local(_plan(), report_dir, root=tmp_path, say=said.notifier())
    assert code == 143
    assert said.err == ["SIGTERM: stopping the run and finalising its report"]
    ((where, rc, run_id, sig),) = recovered
    assert (where, rc, sig) == (report_dir, None, "SIGTERM")
    assert len(said.out) == 1 and "INTERRUPTED" in said.out[0]  # the verdict block
    history = tmp_path / "reports" / "local" / "history.jsonl"
    (record,) = [json.loads(line) for line in history.read_text().splitlines()]
    assert record["run_id"] == run_id and record["verdict"] == "INTERRUPTED"
    assert said.note[-1] == f"history: run {run_id} appended to {history}"
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_bundle_of_a_skipped_run_is_refused_in_one_line(
    tmp_path: Path, launcher: dict[str, Any]
) -> None:
    launcher["then"] = LocalRun(
        doc={"verdict": "SKIPPED"}, recovered=False, wall_s=1, timed_out=False
    )
    said = Said()
    code = service.run_local(
        _plan(bundle=True), tmp_path / "run", root=tmp_path, say=said.notifier()
    )
    assert code == 1  # SKIPPED is no pass
    assert said.err == [
        "bundle: not written: the run is SKIPPED (no check measured anything); "
        "`mlenv bundle RUN --allow-skipped` makes one on purpose"
    ]
    assert said.out == []


class FakePlatform:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def acceptance(self, cfg: Any, s: Any, *, profile: str, suite_args: list[str]) -> int:
        self.calls.append((profile, suite_args))
        return 1


def test_a_platform_run_checks_its_inputs_first_and_hands_the_job_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlenv.platforms.dispatch
    from mlenv.config import load
    from mlenv.platforms.base import Session

    monkeypatch.delenv("MLENV_HISTORY_DIR", raising=False)
    monkeypatch.delenv("MLENV_ACCEPTANCE_PLUGINS", raising=False)
    monkeypatch.delenv("MLENV_OPTIONS", raising=False)
    monkeypatch.delenv("MLENV_BASELINE", raising=False)
    fake = FakePlatform()
    monkeypatch.setattr(mlenv.platforms.dispatch, "platform_for", lambda cfg: fake)
    validated: list[tuple[Any, ...]] = []

    def validate(*args: Any) -> int:
        validated.append(args)
        return 1

    monkeypatch.setattr(local, "validate", validate)
    cfg = load("local", Path(__file__).resolve().parents[3])
    s = Session(say=lambda _: None, warn=lambda _: None, root=tmp_path)
    said = Said()
    flags: dict[str, Any] = dict(
        checks="nccl", baseline=None, options=None, deadline=0.0, localize=True, say=said.notifier()
    )
    with pytest.raises(InputError, match="--profile: expected one of"):
        service.run_on_platform(cfg, s, profile="fast", **flags)
    assert fake.calls == [] and validated == []
    code = service.run_on_platform(cfg, s, profile="quick", bundle=True, **flags)
    assert code == 1
    assert validated == [("quick", "nccl", None, None)]
    assert fake.calls == [("quick", ["--checks", "nccl", "--localize"])]
    assert said.err == ["bundle: no run of local was recorded by this call: nothing to bundle"]
