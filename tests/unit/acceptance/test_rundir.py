"""one folder per run, never reused; one run-id format; records kept exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlenv import contract
from mlenv.acceptance.records import history, rundir
from mlenv.errors import InputError


def test_one_run_id_format_everywhere() -> None:
    from mlenv.platforms.kube import new_run_id as kube_id
    from mlenv.platforms.slurm import new_run_id as slurm_id
    from mlenv.pod.launch import check_run_id
    from mlenv.pod.launch import new_run_id as pod_id

    ids = [contract.new_run_id(), pod_id(), kube_id(), slurm_id()]
    assert all(contract.is_run_id(i) for i in ids), ids
    assert len(set(ids)) == len(ids)  # same second, still distinct
    assert contract.new_run_id(0.0).startswith("19700101-000000-")  # UTC, sortable
    assert all(
        check_run_id(i) == i for i in ids
    )  # a plain name: it names folders and crosses shells
    assert not contract.is_run_id("20260101-000000") and not contract.is_run_id(
        "../20260101-000000-abcdef"
    )


def test_claim_locks_and_refuses_a_second_run_until_released(tmp_path: Path) -> None:
    d = tmp_path / "r"
    c = rundir.claim(d, "20260101-000000-aaaaaa")
    assert rundir.lock_holder(d) == os.getpid()
    with pytest.raises(
        InputError, match=rf"in use by a live run \(pid {os.getpid()}\); choose a new folder"
    ):
        rundir.claim(d, "20260101-000001-bbbbbb")
    c.release()
    assert not (d / rundir.LOCK_FILE).exists()
    rundir.claim(d, "20260101-000002-cccccc").release()  # empty again: usable


@pytest.mark.parametrize(
    "left", ["results.json", "results.jsonl", "run.json", "record.json", "launcher.log"]
)
def test_claim_refuses_a_folder_holding_another_runs_results(tmp_path: Path, left: str) -> None:
    (tmp_path / left).write_text("{}")
    with pytest.raises(
        InputError, match=rf"already holds another run's results \({left}\); choose a new folder"
    ):
        rundir.claim(tmp_path, "20260101-000000-aaaaaa")
    assert (tmp_path / left).read_text() == "{}"  # never touched
    assert not (tmp_path / rundir.LOCK_FILE).exists()


def test_a_stale_lock_of_a_dead_run_is_taken_over(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (tmp_path / rundir.LOCK_FILE).write_text(f"{p.stdout.strip()} old\n")
    c = rundir.claim(tmp_path, "20260101-000000-aaaaaa")
    assert rundir.lock_holder(tmp_path) == os.getpid()
    c.release()


def test_latest_points_at_the_newest_run_and_leaves_a_real_folder_alone(tmp_path: Path) -> None:
    for rid in ("20260101-000000-aaaaaa", "20260101-000001-bbbbbb"):
        (tmp_path / rid).mkdir()
        assert rundir.point_latest(tmp_path, rid) is None
    assert os.readlink(tmp_path / "latest") == "20260101-000001-bbbbbb"
    other = tmp_path / "o"
    (other / "latest").mkdir(parents=True)
    assert "is not a link" in str(rundir.point_latest(other, "x"))
    assert (other / "latest").is_dir()


def test_check_folder_refuses_a_folder_holding_another_run(tmp_path: Path) -> None:
    d = tmp_path / "20260101-000000-aaaaaa"
    d.mkdir()
    doc = {"run_id": "20260101-000009-ffffff"}
    with pytest.raises(
        InputError,
        match="named for run 20260101-000000-aaaaaa but holds run 20260101-000009-ffffff",
    ):
        rundir.check_folder(d, doc)
    with pytest.raises(InputError, match="holds run 20260101-000009-ffffff, not run A1"):
        rundir.check_folder(tmp_path, doc, asked="A1")
    (tmp_path / "record.json").write_text(json.dumps({"run_id": "other"}))
    with pytest.raises(InputError, match="record.json names run other"):
        rundir.check_folder(tmp_path, doc)
    rundir.check_folder(tmp_path, {"run_id": "other"}, asked="other")


def _rec(rid: str, verdict: str) -> dict[str, object]:
    return {
        "run_id": rid,
        "cluster": "local",
        "verdict": verdict,
        "started": "s",
        "finished": "f",
        "report_dir": "/r",
    }


def test_the_same_record_twice_is_one_and_two_different_ones_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "local" / history.HISTORY_FILE
    for rec in (_rec("a", "PASS"), _rec("a", "PASS"), _rec("b", "FAIL")):
        history.append(path, rec)
    assert [r["run_id"] for r in history.distinct(history.read(path)[0])] == ["a", "b"]
    assert history.find_run(tmp_path, "a") == _rec("a", "PASS")
    history.append(path, _rec("b", "PASS"))
    with pytest.raises(InputError) as e:
        history.find_run(tmp_path, "b")
    assert "run b is recorded twice with different content" in str(e.value)
    assert "local: FAIL" in str(e.value) and "local: PASS" in str(e.value)


def test_claim_never_runs_into_a_folder_holding_links(tmp_path: Path) -> None:
    """A pre-made --report-dir with a dangling link where the run would write (results.jsonl
    pointing at /tmp/elsewhere): the run must not write through it."""
    (tmp_path / "results.jsonl").symlink_to(tmp_path / "nowhere")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank-0.log").symlink_to("/etc/passwd")
    with pytest.raises(InputError, match=r"already holds another run's results \(results.jsonl\)"):
        rundir.claim(tmp_path, "20260101-000000-aaaaaa")
    (tmp_path / "results.jsonl").unlink()
    with pytest.raises(InputError, match=r"holds a link \(logs/rank-0.log\)"):
        rundir.claim(tmp_path, "20260101-000000-aaaaaa")
    assert not (tmp_path / "nowhere").exists()
    assert not (tmp_path / rundir.LOCK_FILE).exists()


def test_claim_refuses_another_runs_logs(tmp_path: Path) -> None:
    (tmp_path / "nccl").mkdir()
    (tmp_path / "nccl" / "rank0.otherhost.77.log").write_text("NCCL INFO\n")
    with pytest.raises(
        InputError, match=r"holds another run's logs \(nccl/rank0.otherhost.77.log\)"
    ):
        rundir.claim(tmp_path, "20260101-000000-aaaaaa")


def test_a_stale_lock_is_replaced_and_the_new_one_is_never_empty(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / rundir.LOCK_FILE).write_text(f"{dead.pid} 20260101-000000-aaaaaa\n")
    c = rundir.claim(tmp_path, "20260101-000001-bbbbbb")
    assert (tmp_path / rundir.LOCK_FILE).read_text() == f"{os.getpid()} 20260101-000001-bbbbbb\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [rundir.LOCK_FILE]  # no temp left
    c.release()
