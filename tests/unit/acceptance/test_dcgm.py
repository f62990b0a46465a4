"""gpu.dcgm: dcgmi diag -j read as DCGM writes it (entity groups, DCGM's own severities,
runtime_error), run with -i on the pod's GPUs, each GPU named by index and UUID.

Fixtures: tests/data/dcgm/ (hand-written to NVIDIA's published schema; README there)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlenv.acceptance.checks.gpu import DcgmCheck, DcgmOptions, diagnose
from mlenv.acceptance.core.result import Status
from mlenv.acceptance.evidence import dcgm
from mlenv.acceptance.judging import nodeverdicts
from mlenv.errors import InputError

DATA = Path(__file__).resolve().parents[2] / "data" / "dcgm"
POD_GPUS = (DATA / "pod-gpus-4-5.csv").read_text()
DISCOVERY = (DATA / "discovery-8gpu.txt").read_text()
UUID4, UUID5 = (line.split(", ")[1] for line in POD_GPUS.splitlines())
TWO_GPUS = (
    "0, GPU-aaaaaaaa-0000-0000-0000-000000000000\n1, GPU-bbbbbbbb-0000-0000-0000-000000000000\n"
)
TWO_DISCOVERED = (
    "| 0      | Name: X |\n|        | Device UUID: GPU-aaaaaaaa-0000-0000-0000-000000000000 |\n"
    "| 1      | Name: X |\n|        | Device UUID: GPU-bbbbbbbb-0000-0000-0000-000000000000 |\n"
)


def _fake(name: str, rc: int = 0, gpus: str = POD_GPUS, discovery: str = DISCOVERY):
    """A runner answering nvidia-smi, dcgmi discovery and dcgmi diag as a node would."""
    text = (DATA / name).read_text()
    calls: list[list[str]] = []

    def run(words: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        calls.append(words)
        if words == dcgm.GPUS_ARGV:
            return subprocess.CompletedProcess(words, 0, stdout=gpus, stderr="")
        if words == dcgm.DISCOVERY_ARGV:
            return subprocess.CompletedProcess(words, 0, stdout=discovery, stderr="")
        assert words[:3] == ["dcgmi", "diag", "-r"] and words[-1] == "-j"
        return subprocess.CompletedProcess(words, rc, stdout=text, stderr="")

    run.calls = calls  # type: ignore[attr-defined]
    return run


def _diagnose(name: str, **kw: Any):
    runner = _fake(name, **kw)
    rs = diagnose("node-a", 2, 60.0, runner=runner, which=lambda _: "/usr/bin/dcgmi")
    return rs, runner.calls


def _verdict(rs) -> dict:
    (n,) = nodeverdicts.build(rs, [], {"device": "cuda", "hosts": ["node-a", "node-a"]})["nodes"]
    return n


# The schema's required keys and types (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json).
def _schema_problems(doc: dict) -> list[str]:
    out: list[str] = []
    body = doc.get("DCGM Diagnostic")
    if not isinstance(body, dict):
        return ["no 'DCGM Diagnostic' object"]
    for c in body.get("test_categories", []):
        if not isinstance(c.get("category"), str) or not isinstance(c.get("tests"), list):
            out.append(f"category {c}")
        for t in c.get("tests", []):
            if not (
                isinstance(t.get("name"), str)
                and isinstance(t.get("results"), list)
                and isinstance((t.get("test_summary") or {}).get("status"), str)
            ):
                out.append(f"test {t.get('name')}")
            for r in t.get("results", []):
                for k, ty in (
                    ("entity_group", str),
                    ("entity_group_id", int),
                    ("entity_id", int),
                    ("status", str),
                ):
                    if not isinstance(r.get(k), ty):
                        out.append(f"result {k} in {t.get('name')}")
                for w in r.get("warnings", []):
                    for k, ty in (
                        ("warning", str),
                        ("error_id", int),
                        ("error_category", int),
                        ("error_severity", int),
                    ):
                        if not isinstance(w.get(k), ty):
                            out.append(f"warning {k} in {t.get('name')}")
    if "runtime_error" in body and not isinstance(body["runtime_error"], str):
        out.append("runtime_error")
    for g in doc.get("entity_groups", []):
        if not all(k in g for k in ("entities", "entity_group", "entity_group_id")):
            out.append(f"entity group {g}")
    if not isinstance((doc.get("metadata") or {}).get("version"), str):
        out.append("metadata.version")
    return out


@pytest.mark.parametrize("path", sorted(DATA.glob("v4-*.json")), ids=lambda p: p.name)
def test_every_4x_fixture_has_the_schemas_required_keys(path: Path) -> None:
    assert _schema_problems(json.loads(path.read_text())) == []


# file, the entity blamed (group, pod GPU index or entity id), verdict status, action
TABLE = [
    ("v4-gpu-isolate.json", ("GPU", 1), "FAIL", "drain"),
    ("v4-gpu-reset.json", ("GPU", 0), "FAIL", "reset-gpu"),
    ("v4-gpu-triage.json", ("GPU", 1), "FAIL", "reset-gpu"),
    ("v4-gpu-monitor.json", ("GPU", 0), "WARN", "watch"),
    ("v4-config-persistence.json", ("GPU", 0), "WARN", "configure-gpu"),
    ("v4-nvswitch-fail.json", ("NvSwitch", 2), "FAIL", "check-nvswitch"),
    ("v4-cpu-fail.json", ("CPU", 0), "FAIL", "check-cpu"),
    ("v4-system-fail.json", ("system", None), "FAIL", "drain"),
]


@pytest.mark.parametrize(("name", "who", "status", "action"), TABLE, ids=[t[0] for t in TABLE])
def test_each_group_and_severity_gives_its_verdict_and_action(
    name: str, who: tuple[str, int | None], status: str, action: str
) -> None:
    rs, _ = _diagnose(name)
    bad = [r for r in rs if r.status in (Status.FAIL, Status.WARN)]
    group, ident = who
    named = [
        r
        for r in bad
        if r.details["entity_group"] == group
        and (r.details.get("gpu") if group == "GPU" else r.details.get("entity_id")) == ident
    ]
    assert named, [(r.details["entity_group"], r.reasons) for r in bad]
    n = _verdict(rs)
    assert n["status"] == status and n["action"]["id"] == action, n
    if group != "GPU":  # a switch, CPU or system failure blames no GPU
        assert not [r for r in bad if r.details["entity_group"] == "GPU"]
        assert all(g["status"] == "PASS" for g in n.get("gpus", []))
        assert f"{group} {ident}" in named[0].reasons[0] if ident is not None else True


def test_persistence_mode_off_is_a_setting_not_a_hardware_ticket_and_not_quarantined() -> None:
    rs, _ = _diagnose("v4-config-persistence.json")
    assert {r.status for r in rs} == {Status.WARN}
    n = _verdict(rs)
    assert n["action"]["quarantine"] is False and "hardware ticket" not in n["action"]["text"]
    assert "persistence mode" in n["action"]["text"]
    assert "severity CONFIG" in rs[0].reasons[0] and "software configuration" in rs[0].reasons[0]


def test_a_system_failure_with_no_entity_fails_the_node() -> None:
    rs, _ = _diagnose("v4-system-fail.json")
    system = [r for r in rs if r.details["entity_group"] == "system"]
    assert len(system) == 1 and system[0].status == Status.FAIL
    assert "fabric manager is not running" in system[0].reasons[0]
    assert "permissions FAIL" in system[0].reasons[0]  # the test that failed as a whole
    assert _verdict(rs)["status"] == "FAIL"


def test_runtime_error_is_shown_as_dcgm_wrote_it() -> None:
    rs, _ = _diagnose("v4-runtime-error.json")
    (r,) = rs
    assert r.status == Status.ERROR
    assert (
        "This request is serviced by a module of DCGM that is not currently loaded" in r.reasons[0]
    )
    assert r.details["runtime_error"].startswith("Error: Unable to complete diagnostic")
    assert _verdict(rs)["status"] == "UNKNOWN"


def test_runs_with_i_on_the_pods_gpus_and_names_them_by_index_and_uuid() -> None:
    rs, calls = _diagnose("v4-gpu-reset.json")
    assert calls[-1] == ["dcgmi", "diag", "-r", "2", "-i", "4,5", "-j"]
    by_gpu = {r.details["gpu"]: r for r in rs}
    assert by_gpu[0].details["uuid"] == UUID4 and by_gpu[0].details["dcgm_id"] == 4
    assert by_gpu[1].details["uuid"] == UUID5 and by_gpu[1].status == Status.PASS
    assert by_gpu[0].reasons[0].startswith(f"GPU 0 ({UUID4}): DCGM level 2 memory FAIL")
    n = _verdict(rs)
    assert UUID4 in n["action"]["text"]  # reset that GPU by UUID: the pod's index is not the host's
    assert [(g["gpu"], g["uuid"], g["status"]) for g in n["gpus"]] == [
        (0, UUID4, "FAIL"),
        (1, UUID5, "PASS"),
    ]


def test_a_pod_gpu_the_host_engine_does_not_list_is_error_not_a_diag_of_other_gpus() -> None:
    rs, calls = _diagnose("v4-gpu-reset.json", discovery=TWO_DISCOVERED)
    (r,) = rs
    assert r.status == Status.ERROR and UUID4 in r.reasons[0] and "does not list" in r.reasons[0]
    assert not any(c[:2] == ["dcgmi", "diag"] for c in calls)


def test_v3_layout_failing_gpu_is_named_with_dcgms_messages() -> None:
    diag = dcgm.parse((DATA / "synthetic-v3-r2-gpu1-fail.json").read_text())
    gpus = diag.gpus
    assert [g.gpu for g in gpus] == [0, 1]
    assert gpus[0].status == "PASS" and gpus[1].status == "FAIL"
    assert [t.test for t in gpus[1].failed()] == ["GPU Memory", "Diagnostic"]
    assert (
        "double bit ECC" in gpus[1].failed()[1].texts[0]
        and "(DCGM error 28)" in gpus[1].failed()[1].texts[0]
    )


def test_v4_layout_and_entity_id() -> None:
    (g,) = dcgm.parse((DATA / "synthetic-v4-r1-warn.json").read_text()).gpus
    assert g.gpu == 0 and g.status == "WARN" and "Persistence mode" in g.failed()[0].texts[0]


def test_check_gives_one_result_per_gpu_and_feeds_node_verdicts() -> None:
    rs, _ = _diagnose(
        "synthetic-v3-r2-gpu1-fail.json", rc=226, gpus=TWO_GPUS, discovery=TWO_DISCOVERED
    )
    assert [(r.details["gpu"], r.status) for r in rs] == [(0, Status.PASS), (1, Status.FAIL)]
    assert rs[1].reasons[0].startswith("GPU 1 (GPU-bbbbbbbb-0000-0000-0000-000000000000): DCGM")
    assert rs[1].metrics["tests_failed"] == 2.0
    n = _verdict(rs)
    assert n["status"] == "FAIL" and n["action"]["id"] == "reset-gpu"
    assert "reset GPU GPU-bbbbbbbb-0000-0000-0000-000000000000 on node-a" in n["action"]["text"]
    assert [(g["gpu"], g["status"]) for g in n["gpus"]] == [(0, "PASS"), (1, "FAIL")]


def test_without_dcgmi_the_node_is_skip_with_the_reason_and_unknown() -> None:
    (r,) = diagnose("node-b", 1, 60.0, which=lambda _: None)
    assert r.status == Status.SKIP and "dcgmi not found on node-b" in r.reasons[0]
    (n,) = nodeverdicts.build([r], [], {"device": "cuda", "hosts": ["node-b"]})["nodes"]
    assert n["status"] == "UNKNOWN"


def test_garbage_output_is_error_not_pass() -> None:
    def run(words: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        if words == dcgm.GPUS_ARGV:
            return subprocess.CompletedProcess(words, 0, stdout=TWO_GPUS, stderr="")
        if words == dcgm.DISCOVERY_ARGV:
            return subprocess.CompletedProcess(words, 0, stdout=TWO_DISCOVERED, stderr="")
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


def test_level_3_under_a_deadline_it_cannot_meet_is_refused_before_the_suite_starts(
    tmp_path: Path,
) -> None:
    from mlenv.acceptance.__main__ import main
    from mlenv.acceptance.core.profiles import check_deadlines

    opts = DcgmOptions(level=3, timeout_s=1200.0)
    assert "at least 1205 s, got 900" in str(DcgmCheck.deadline_problem(opts, 900.0))
    assert DcgmCheck.deadline_problem(opts, 1205.0) is None
    layer = {"gpu.dcgm": {"level": 3, "timeout_s": 1200}}
    with pytest.raises(InputError, match=r"gpu\.dcgm: level 3 with timeout_s 1200"):
        check_deadlines([DcgmCheck], layer, "full", 900.0)
    check_deadlines([DcgmCheck], layer, "full", 1300.0)
    f = tmp_path / "o.yaml"
    f.write_text("gpu.dcgm: {level: 3, timeout_s: 1200}\n")
    rc = main(
        [
            "--checks",
            "gpu.dcgm",
            "--options",
            str(f),
            "--deadline",
            "900",
            "--report-dir",
            str(tmp_path / "r"),
        ]
    )
    assert rc == 2 and not (tmp_path / "r").exists()
