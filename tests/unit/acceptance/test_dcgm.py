"""gpu.dcgm: dcgmi diag -j read per GPU, a failing GPU named, SKIP without dcgmi.

Fixtures: tests/data/dcgm/ (synthetic, in the layouts public reports show; README there)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mlenv.acceptance.checks.gpu import DcgmOptions, diagnose
from mlenv.acceptance.core.result import Status
from mlenv.acceptance.evidence import dcgm
from mlenv.acceptance.judging import nodeverdicts

DATA = Path(__file__).resolve().parents[2] / "data" / "dcgm"


def _fake(name: str, rc: int = 0):
    text = (DATA / name).read_text()

    def run(words: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        assert words[:3] == ["dcgmi", "diag", "-r"] and words[-1] == "-j"
        return subprocess.CompletedProcess(words, rc, stdout=text, stderr="")

    return run


def test_v3_layout_failing_gpu_is_named_with_dcgms_messages() -> None:
    gpus = dcgm.parse((DATA / "synthetic-v3-r2-gpu1-fail.json").read_text())
    assert [g.gpu for g in gpus] == [0, 1]
    assert gpus[0].status == "PASS" and gpus[1].status == "FAIL"
    assert [t.test for t in gpus[1].failed()] == ["GPU Memory", "Diagnostic"]
    assert (
        "double bit ECC" in gpus[1].failed()[1].messages[0]
        and "(DCGM error 28)" in gpus[1].failed()[1].messages[0]
    )


def test_v4_layout_and_entity_id() -> None:
    (g,) = dcgm.parse((DATA / "synthetic-v4-r1-warn.json").read_text())
    assert g.gpu == 0 and g.status == "WARN" and "Persistence mode" in g.failed()[0].messages[0]


def test_check_gives_one_result_per_gpu_and_feeds_node_verdicts() -> None:
    rs = diagnose(
        "node-a",
        2,
        60.0,
        runner=_fake("synthetic-v3-r2-gpu1-fail.json", rc=226),
        which=lambda _: "/usr/bin/dcgmi",
    )
    assert [(r.details["gpu"], r.status) for r in rs] == [(0, Status.PASS), (1, Status.FAIL)]
    assert rs[1].reasons[0].startswith("GPU 1: DCGM level 2 GPU Memory FAIL")
    assert rs[1].metrics["tests_failed"] == 2.0
    sec = nodeverdicts.build(rs, [], {"device": "cuda", "hosts": ["node-a", "node-a"]})
    (n,) = sec["nodes"]
    assert (
        n["status"] == "FAIL"
        and n["action"]["id"] == "reset-gpu"
        and "reset GPU 1 on node-a" in n["action"]["text"]
    )
    assert [(g["gpu"], g["status"]) for g in n["gpus"]] == [(0, "PASS"), (1, "FAIL")]


def test_without_dcgmi_the_node_is_skip_with_the_reason_and_unknown() -> None:
    (r,) = diagnose("node-b", 1, 60.0, which=lambda _: None)
    assert r.status == Status.SKIP and "dcgmi not found on node-b" in r.reasons[0]
    (n,) = nodeverdicts.build([r], [], {"device": "cuda", "hosts": ["node-b"]})["nodes"]
    assert n["status"] == "UNKNOWN"


def test_garbage_output_is_error_not_pass() -> None:
    def run(words: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(
            words, 1, stdout="Error: unable to connect to host engine", stderr=""
        )

    (r,) = diagnose("node-c", 1, 60.0, runner=run, which=lambda _: "/usr/bin/dcgmi")
    assert r.status == Status.ERROR and "no diagnostic JSON" in r.reasons[0]


@pytest.mark.parametrize(
    ("level", "timeout", "ok"),
    [(1, 0.0, True), (2, 0.0, True), (3, 0.0, False), (3, 1200.0, True), (4, 0.0, False)],
)
def test_level_3_only_with_its_own_timeout(level: int, timeout: float, ok: bool) -> None:
    assert (DcgmOptions(level=level, timeout_s=timeout).problems() == []) is ok
