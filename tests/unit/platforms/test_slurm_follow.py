"""how ``mlenv acceptance --cluster`` follows a Slurm job, against a scripted
Slurm (a fake :class:`~mlenv.platforms.slurm.SlurmReader` with a fake clock): the limit
counts from the job's start, a pending reason is said, a drain is noted and the job goes
on, mlenv's own cancel waits for Slurm's final state, and scontrol is asked less often.
The real-Slurm side of each is in tests/integration/test_slurm.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mlenv.config import load
from mlenv.platforms.slurm import Outcome, SlurmReader, Submission, follow, judge, port_clash

REPO = Path(__file__).resolve().parents[3]
CPU = REPO / "tests" / "data" / "platforms" / "cpu-slurm.yaml"
NODES = ["n1", "n2"]


@dataclass
class Phase:
    """The job's record from ``since`` (fake seconds) on, and the nodes' states."""

    since: float
    state: str
    reason: str = "None"
    nodes: dict[str, str] = field(default_factory=lambda: dict.fromkeys(NODES, "ALLOCATED"))


class FakeSlurm(SlurmReader):
    """Answers from a script of phases; scancel switches to ``after_cancel`` (offsets from
    the cancel); counts the client calls follow makes."""

    def __init__(self, phases: list[Phase], after_cancel: list[Phase] | None = None) -> None:
        self.phases, self.after_cancel = phases, after_cancel or [Phase(0, "CANCELLED")]
        self.t = 0.0
        self.calls: list[tuple[float, str]] = []
        self.cancelled_at: float | None = None

    def _phase(self) -> Phase:
        if self.cancelled_at is not None:
            script = [
                Phase(p.since + self.cancelled_at, p.state, p.reason, p.nodes)
                for p in self.after_cancel
            ]
        else:
            script = self.phases
        return [p for p in script if p.since <= self.t][-1]

    def job(self, job: str) -> dict[str, str] | None:
        self.calls.append((self.t, "job"))
        p = self._phase()
        nodelist = "(null)" if p.state == "PENDING" else "n[1-2]"
        return {
            "JobId": job,
            "JobState": p.state,
            "Reason": p.reason,
            "NodeList": nodelist,
            "ExitCode": "0:0",
        }

    def nodes(self, names: list[str]) -> dict[str, dict[str, str]]:
        self.calls.append((self.t, "nodes"))
        st = self._phase().nodes
        return {
            n: {
                "NodeName": n,
                "State": st[n],
                "Reason": "bad DIMM [root@2026-11-27T10:00:00]"
                if "DRAIN" in st[n] or "DOWN" in st[n]
                else "",
            }
            for n in names
        }

    def hostnames(self, nodelist: str) -> list[str]:
        return list(NODES)

    def cancel(self, job: str) -> None:
        self.cancelled_at = self.t

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _sub(tmp: Path) -> Submission:
    return Submission(
        "cpu-slurm", "41", "run-1", str(tmp / "results" / "run-1"), str(tmp / "a.sbatch"), 0.0
    )


def _follow(tmp: Path, fake: FakeSlurm, limit: float) -> tuple[Outcome, list[str]]:
    said: list[str] = []
    return follow(_sub(tmp), said.append, timeout_s=limit, slurm=fake), said


def test_time_in_the_queue_does_not_count_against_the_limit(tmp_path: Path) -> None:
    limit = 60.0
    fake = FakeSlurm(
        [
            Phase(0, "PENDING", "Priority"),
            Phase(3 * limit, "RUNNING"),
            Phase(3 * limit + limit / 2, "COMPLETED"),
        ]
    )
    out, said = _follow(tmp_path, fake, limit)
    assert out.state == "COMPLETED" and not out.cancelled, said
    assert fake.cancelled_at is None


def test_a_job_running_past_the_limit_from_its_start_is_cancelled(tmp_path: Path) -> None:
    limit = 60.0
    fake = FakeSlurm(
        [Phase(0, "PENDING", "Resources"), Phase(10, "RUNNING"), Phase(10 + 3 * limit, "COMPLETED")]
    )
    out, said = _follow(tmp_path, fake, limit)
    assert fake.cancelled_at is not None and limit < fake.cancelled_at - 10 < limit + 10
    assert out.cancelled == f"not finished within {limit:.0f} s of its start"
    assert out.state == "CANCELLED"  # Slurm's word, not mlenv's


def test_each_pending_reason_is_said_as_it_changes(tmp_path: Path) -> None:
    fake = FakeSlurm(
        [
            Phase(0, "PENDING"),
            Phase(6, "PENDING", "Priority"),
            Phase(20, "PENDING", "JobHeldAdmin"),
            Phase(40, "PENDING", "Resources"),
            Phase(50, "RUNNING"),
            Phase(60, "COMPLETED"),
        ]
    )
    out, said = _follow(tmp_path, fake, 600)
    assert said[:5] == [
        "job 41: PENDING",
        "job 41: PENDING (Priority)",
        "job 41: PENDING (JobHeldAdmin)",
        "job 41: PENDING (Resources)",
        "job 41: RUNNING on n1, n2",
    ], said
    assert out.state == "COMPLETED"


def test_a_drained_node_is_noted_once_and_the_job_goes_on(tmp_path: Path) -> None:
    drained = {"n1": "ALLOCATED", "n2": "MIXED+DRAIN"}
    fake = FakeSlurm(
        [
            Phase(0, "RUNNING"),
            Phase(10, "RUNNING", nodes=drained),
            Phase(40, "COMPLETING", nodes=drained),
            Phase(45, "COMPLETED", nodes=drained),
        ]
    )
    out, said = _follow(tmp_path, fake, 600)
    assert fake.cancelled_at is None and out.state == "COMPLETED" and not out.cancelled
    notes = [s for s in said if "n2 (draining: bad DIMM)" in s]
    assert len(notes) == 1 and "lets the running job finish" in notes[0], said


def test_a_node_gone_cancels_and_the_outcome_waits_for_slurms_final_state(tmp_path: Path) -> None:
    """The report is judged (and copied) only once Slurm has ended the job: rank 0 may
    still be writing while it is COMPLETING."""
    down = {"n1": "ALLOCATED", "n2": "DOWN*"}
    fake = FakeSlurm(
        [Phase(0, "RUNNING"), Phase(10, "RUNNING", nodes=down)],
        after_cancel=[
            Phase(0, "RUNNING", nodes=down),
            Phase(4, "COMPLETING", nodes=down),
            Phase(15, "CANCELLED", nodes=down),
        ],
    )
    out, said = _follow(tmp_path, fake, 600)
    assert fake.cancelled_at is not None
    assert out.state == "CANCELLED" and out.failed_nodes == [
        "n2 (down and not responding: bad DIMM)"
    ]
    assert out.cancelled.startswith("node n2 (down")
    assert fake.t >= fake.cancelled_at + 15  # followed until Slurm ended it


def test_scontrol_is_asked_at_most_once_a_second_while_running_and_less_while_pending(
    tmp_path: Path,
) -> None:
    fake = FakeSlurm(
        [Phase(0, "PENDING", "Priority"), Phase(300, "RUNNING"), Phase(600, "COMPLETED")]
    )
    _follow(tmp_path, fake, 3600)
    pending = [c for c in fake.calls if c[0] < 300]
    running = [c for c in fake.calls if 300 <= c[0] < 600]
    assert len(running) / 300 <= 1.0, len(running)  # main: a job and a node query each second
    assert len(pending) / 300 <= 0.25, len(pending)


def test_mlenvs_own_cancel_is_error_with_slurms_final_state_not_interrupted(tmp_path: Path) -> None:
    sub = _sub(tmp_path)
    for why, nodes in (
        ("node n2 (down) while the job ran", ["n2 (down)"]),
        ("not finished within 780 s of its start", []),
    ):
        doc = judge(
            load(CPU), sub, Outcome("CANCELLED", {"NodeList": "n[1-2]"}, nodes, 1.0, cancelled=why)
        )
        assert doc["verdict"] == "ERROR", doc
        assert doc["reasons"][0].startswith(
            f"mlenv cancelled job 41: {why}; Slurm's final state CANCELLED"
        )


TORCH_EADDRINUSE = (
    "mlenv: job 41 on 2 node(s) (n[1-2]), rendezvous n1:29500, report dir /s/results/r\n"
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
    "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: "
    "address already in use\n"
)


def test_a_rendezvous_port_in_use_is_named_as_such(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    out.write_text(TORCH_EADDRINUSE)
    doc = judge(
        load(CPU),
        _sub(tmp_path),
        Outcome("FAILED", {"ExitCode": "1:0", "StdOut": str(out)}, [], 1.0),
    )
    assert doc["verdict"] == "ERROR"
    assert "the rendezvous port 29500 on n1 was already in use (EADDRINUSE)" in doc["reasons"][0], (
        doc["reasons"]
    )
    assert port_clash("RuntimeError: Address already in use\n")
    assert port_clash("ran fine\n") == ""
    assert (
        json.loads((Path(_sub(tmp_path).report_dir) / "results.json").read_text())["verdict"]
        == "ERROR"
    )


def test_a_nodes_features_against_the_constraint_as_slurm_reads_it() -> None:
    from mlenv.platforms.slurm import satisfies

    node = {"a100_80g", "ib_hdr", "rack2"}
    assert satisfies("a100_80g&ib_hdr", node) and satisfies("a100_80g,ib_hdr", node)
    assert satisfies("a100_80g&[rack1|rack2]", node) and satisfies("(h100|a100_80g)&ib_hdr", node)
    assert satisfies("a100_80g&rack1", node) is False and satisfies("[rack1|rack3]", node) is False
    assert satisfies("h100|a100_80g&rack1", node) is False  # left to right: (h100|a100_80g)&rack1
    assert satisfies("a100_80g*2", node) is None  # a count is about the whole job, not one node


def test_a_run_the_trap_stopped_before_the_time_limit_is_error_naming_the_limit(
    tmp_path: Path,
) -> None:
    """Rank 0 judged its SIGTERM as an interrupt; the job's output says the USR1 trap sent
    it before slurm.time_limit: ERROR naming the limit, not INTERRUPTED (nobody stopped it)."""
    sub = _sub(tmp_path)
    report = Path(sub.report_dir)
    report.mkdir(parents=True)
    (report / "results.json").write_text(
        json.dumps(
            {
                "verdict": "INTERRUPTED",
                "reasons": [],
                "checks": [],
                "interrupted": {"signal": "SIGTERM"},
            }
        )
    )
    out = tmp_path / "job.out"
    out.write_text(
        "mlenv: job 41 is near its time limit: stopping the ranks so they write their reports\n"
    )
    doc = judge(
        load(CPU), sub, Outcome("FAILED", {"ExitCode": "143:0", "StdOut": str(out)}, [], 1.0)
    )
    assert doc["verdict"] == "ERROR" and "interrupted" not in doc
    assert doc["reasons"][0].startswith("job 41 reached slurm.time_limit 00:10:00: Slurm warned it")
