"""``mlenv recheck`` on Slurm, step by step, against a scripted slurmctld
(:class:`FakeSlurm`): the drain is traded for a reservation before the node is resumed
and taken back before the reservation goes, whatever stops the re-check; a re-check
stopped half-way is finished by the next one (or by release); a second one while one
runs is refused. Every test also asserts the invariant the design rests on: the node
was never out of its drain without the reservation in place.

The same loop on a real slurmctld: tests/integration/test_slurm_recheck_node.py."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from mlenv import argv
from mlenv.errors import EXIT_ERROR, EXIT_FAIL, EXIT_OK, InfraError
from mlenv.platforms import slurmrecheck as sr

NODE = "gpu-a02"
RUN = "20261129-010000-aaaaaa"
REASON = f"mlenv {RUN}: compute.quorum rank 2 disagrees"
RES = sr.reservation_name(NODE)


class FakeSlurm:
    """Nodes (state, reason), reservations, the jobs in each; every call logged. It
    refuses what slurmctld refuses (a second reservation of a name, deleting one that
    still has jobs) and notes any moment the node was up without its reservation."""

    def __init__(self, reason: str = REASON) -> None:
        self.nodes = {NODE: ["IDLE+DRAIN", reason]}
        self.reservations: dict[str, dict[str, str]] = {}
        self.jobs: dict[str, list[str]] = {}
        self.calls: list[str] = []
        self.unguarded: list[str] = []  # calls after which the node was open to every job
        self.fail_create = False
        self.clock = 0.0

    def _check(self, call: str) -> None:
        self.calls.append(call)
        up = "DRAIN" not in self.nodes[NODE][0]
        if up and not any(r["Nodes"] == NODE for r in self.reservations.values()):
            self.unguarded.append(call)

    def user(self) -> str:
        return "root"

    def reservation(self, name: str) -> dict[str, str] | None:
        return self.reservations.get(name)

    def create_reservation(self, name: str, node: str, user: str) -> None:
        if self.fail_create or name in self.reservations:
            self.calls.append(f"create {name} refused")
            raise InfraError("scontrol failed (exit 1): Error creating the reservation")
        self.reservations[name] = {"Nodes": node, "Users": user}
        self._check(f"create {name}")

    def delete_reservation(self, name: str) -> None:
        if self.jobs.get(name):
            raise InfraError("scontrol failed (exit 1): Requested reservation is in use")
        del self.reservations[name]
        self._check(f"delete {name}")

    def cancel_jobs_in(self, name: str) -> None:
        self.jobs[name] = []
        self._check(f"scancel --reservation={name}")

    def jobs_in(self, name: str) -> list[str]:
        return list(self.jobs.get(name, []))

    def node(self, node: str) -> tuple[str, str] | None:
        st = self.nodes.get(node)
        return (st[0], st[1]) if st else None

    def drain(self, node: str, reason: str) -> None:
        self.nodes[node] = ["IDLE+DRAIN", reason]
        self._check(f"drain {node} {reason}")

    def resume(self, node: str) -> None:
        self.nodes[node] = ["IDLE+MAINT+RESERVED", ""]
        self._check(f"resume {node}")

    def now(self) -> float:
        return self.clock

    def sleep(self, seconds: float) -> None:
        self.clock += seconds

    def submit(self, name: str, job: str = "41") -> str:
        self.jobs.setdefault(name, []).append(job)
        self._check(f"sbatch --reservation={name} --nodelist={NODE}")
        return job


def _suite(fake: FakeSlurm, status: str | None = "PASS", *, stop: BaseException | None = None):
    """A suite that submits its job into the reservation, then ends with ``status`` (the
    job leaves the reservation) or is stopped by ``stop`` while the job still runs."""

    def suite(node: str, name: str, on_job) -> tuple[str | None, str]:
        assert node == NODE and name == RES
        assert "DRAIN" not in fake.nodes[NODE][0], "the job would pend: the node is drained"
        job = fake.submit(name)
        on_job(job, "20261129-020000-bbbbbb")
        if stop is not None:
            raise stop
        fake.jobs[name] = []
        return status, "20261129-020000-bbbbbb"

    return suite


def _state_files(tmp_path: Path) -> list[str]:
    d = tmp_path / sr.STATE_DIR
    return sorted(p.name for p in d.glob("*.json")) if d.is_dir() else []


def test_a_pass_trades_the_drain_for_a_reservation_and_takes_it_back_in_order(
    tmp_path: Path,
) -> None:
    fake = FakeSlurm()
    said: list[str] = []
    code = sr.recheck(fake, tmp_path, RUN, {NODE: REASON}, _suite(fake), said.append, said.append)
    assert code == EXIT_OK
    assert fake.calls == [
        f"create {RES}",
        f"resume {NODE}",
        f"sbatch --reservation={RES} --nodelist={NODE}",
        f"drain {NODE} {REASON}",
        f"delete {RES}",
    ]
    assert fake.unguarded == [] and fake.reservations == {}
    assert fake.nodes[NODE] == ["IDLE+DRAIN", REASON]  # a PASS is evidence, not a release
    assert (
        f"node {NODE}: PASS in re-check run 20261129-020000-bbbbbb, drained again until released; "
        f"release it with: mlenv release {RUN} --after 20261129-020000-bbbbbb"
    ) in said
    assert _state_files(tmp_path) == []


def test_a_fail_keeps_the_node_drained_and_exits_1(tmp_path: Path) -> None:
    fake = FakeSlurm()
    said: list[str] = []
    code = sr.recheck(
        fake, tmp_path, RUN, {NODE: REASON}, _suite(fake, "FAIL"), said.append, said.append
    )
    assert code == EXIT_FAIL
    assert fake.nodes[NODE] == ["IDLE+DRAIN", REASON] and fake.reservations == {}
    assert any("FAIL in re-check run" in s and "stays quarantined" in s for s in said), said
    # no verdict for the node (the job lost it): not evidence either
    fake = FakeSlurm()
    code = sr.recheck(
        fake, tmp_path, RUN, {NODE: REASON}, _suite(fake, None), said.append, said.append
    )
    assert code == EXIT_FAIL and said[-2].startswith(f"node {NODE}: UNKNOWN")


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), InfraError("sbatch failed (exit 1)")])
def test_a_stopped_recheck_cancels_its_job_drains_again_and_deletes_the_reservation(
    tmp_path: Path, stop: BaseException
) -> None:
    fake = FakeSlurm()
    said: list[str] = []
    with pytest.raises(type(stop)):
        sr.recheck_node(
            fake, tmp_path, NODE, REASON, _suite(fake, stop=stop), said.append, quarantined_by=RUN
        )
    assert said == [
        f"node {NODE}: re-check stopped; drained again ({REASON}), reservation {RES} deleted"
    ]
    assert fake.calls[-3:] == [
        f"scancel --reservation={RES}",
        f"drain {NODE} {REASON}",
        f"delete {RES}",
    ]
    assert fake.unguarded == [] and fake.reservations == {} and _state_files(tmp_path) == []


def _killed_after_resume(tmp_path: Path, fake: FakeSlurm) -> None:
    """What a re-check SIGKILLed while its job ran leaves (no ``finally`` runs): the
    reservation, the node resumed in it, the job there, the state file at its last
    step, no lock held (the tier test kills a real mlenv for this)."""
    fake.reservations[RES] = {"Nodes": NODE, "Users": "root"}
    fake.resume(NODE)
    fake.submit(RES)
    (tmp_path / sr.STATE_DIR).mkdir(exist_ok=True)
    st = sr.State(
        sr.state_path(tmp_path, NODE),
        {"node": NODE, "reservation": RES, "reason": REASON, "quarantined_by": RUN},
    )
    for step in ("reserving", "resuming", "resumed"):
        st.step(step)
    st.step("running", job_id="41", run_id="20261129-020000-bbbbbb")


def test_the_next_recheck_finishes_a_killed_one_first_then_rechecks(tmp_path: Path) -> None:
    fake = FakeSlurm()
    _killed_after_resume(tmp_path, fake)
    # slurmctld kept every other job off the node meanwhile (the fake's invariant held)
    assert fake.unguarded == []
    fake.calls.clear()
    said: list[str] = []
    code = sr.recheck(fake, tmp_path, RUN, {NODE: REASON}, _suite(fake), said.append, said.append)
    assert code == EXIT_OK
    assert fake.calls == [
        f"scancel --reservation={RES}",  # the killed re-check's job
        f"drain {NODE} {REASON}",
        f"delete {RES}",
        f"create {RES}",  # then a re-check of its own
        f"resume {NODE}",
        f"sbatch --reservation={RES} --nodelist={NODE}",
        f"drain {NODE} {REASON}",
        f"delete {RES}",
    ]
    assert any("finishing the re-check stopped at step 'running'" in s for s in said), said
    assert fake.unguarded == [] and _state_files(tmp_path) == []


def test_release_finishes_a_killed_recheck_so_the_drain_is_the_runs_again(tmp_path: Path) -> None:
    fake = FakeSlurm()
    _killed_after_resume(tmp_path, fake)
    fake.calls.clear()
    sr.finish_all(fake, tmp_path, [NODE], print)
    assert fake.calls == [f"scancel --reservation={RES}", f"drain {NODE} {REASON}", f"delete {RES}"]
    assert fake.nodes[NODE] == ["IDLE+DRAIN", REASON] and fake.reservations == {}
    assert _state_files(tmp_path) == []
    fake.calls.clear()
    sr.finish_all(fake, tmp_path, [NODE], print)  # nothing left: nothing done
    assert fake.calls == []


def test_a_recheck_while_one_runs_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    fake = FakeSlurm()
    lock = sr.state_path(tmp_path, NODE).with_suffix(".lock")
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another mlenv's hold on the node
        with pytest.raises(InfraError, match=f"a re-check of node {NODE} is in progress"):
            sr.recheck_node(fake, tmp_path, NODE, REASON, _suite(fake), print, quarantined_by=RUN)
        _killed_after_resume(tmp_path, fake)  # its state file is there, but it is held
        fake.calls.clear()
        with pytest.raises(InfraError, match=f"a re-check of node {NODE} is in progress"):
            sr.finish_all(fake, tmp_path, [NODE], print)
    finally:
        os.close(fd)
    assert fake.calls == [] and RES in fake.reservations
    # a reservation of the node this history did not make (another control host's re-check)
    fake = FakeSlurm()
    sr.state_path(tmp_path, NODE).unlink()
    fake.reservations[RES] = {"Nodes": NODE, "Users": "alice"}
    said: list[str] = []
    code = sr.recheck(fake, tmp_path, RUN, {NODE: REASON}, _suite(fake), said.append, said.append)
    assert code == EXIT_ERROR and fake.calls == []
    assert any(
        f"a re-check of node {NODE} is in progress (reservation {RES} exists" in s for s in said
    )
    assert fake.reservations[RES]["Users"] == "alice"


def test_a_node_whose_drain_is_not_the_runs_is_left_alone(tmp_path: Path) -> None:
    fake = FakeSlurm(reason="bad DIMM [ops@2026-11-29T00:00:00]")
    with pytest.raises(InfraError, match="its drain is no longer run .*Reason=bad DIMM"):
        sr.recheck_node(fake, tmp_path, NODE, REASON, _suite(fake), print, quarantined_by=RUN)
    fake = FakeSlurm()
    fake.nodes[NODE] = ["IDLE", ""]  # someone resumed it by hand: not re-drained by us
    with pytest.raises(InfraError, match="its drain is no longer"):
        sr.recheck_node(fake, tmp_path, NODE, REASON, _suite(fake), print, quarantined_by=RUN)
    assert fake.calls == [] and _state_files(tmp_path) == []


def test_a_refused_reservation_leaves_the_node_drained_and_no_state(tmp_path: Path) -> None:
    fake = FakeSlurm()
    fake.fail_create = True
    with pytest.raises(InfraError, match="creating the reservation"):
        sr.recheck_node(fake, tmp_path, NODE, REASON, _suite(fake), print, quarantined_by=RUN)
    assert fake.calls == [f"create {RES} refused"]
    assert fake.nodes[NODE] == ["IDLE+DRAIN", REASON] and _state_files(tmp_path) == []


def test_someone_elses_drain_during_the_recheck_is_kept(tmp_path: Path) -> None:
    fake = FakeSlurm()

    def suite(node: str, name: str, on_job) -> tuple[str | None, str]:
        fake.nodes[NODE] = ["IDLE+DRAIN", "fan failure [ops@now]"]
        return "PASS", "20261129-020000-bbbbbb"

    said: list[str] = []
    sr.recheck_node(fake, tmp_path, NODE, REASON, suite, said.append, quarantined_by=RUN)
    assert fake.nodes[NODE][1] == "fan failure [ops@now]" and fake.reservations == {}
    assert any("drained meanwhile by someone else" in s for s in said)


def test_a_job_that_outlives_its_scancel_keeps_the_reservation(tmp_path: Path) -> None:
    fake = FakeSlurm()
    fake.cancel_jobs_in = lambda name: fake.calls.append("scancel ignored")  # type: ignore[method-assign]
    with pytest.raises(
        InfraError, match="has not ended 120 s after scancel; the node stays reserved"
    ):
        sr.recheck_node(
            fake, tmp_path, NODE, REASON, _suite(fake, stop=KeyboardInterrupt()), print,
            quarantined_by=RUN,
        )  # fmt: skip
    # the node is up but still reserved (nothing else starts there); the state says so
    assert RES in fake.reservations and fake.unguarded == []
    assert _state_files(tmp_path) == [f"{NODE}.json"]


def test_argv_puts_every_value_after_the_double_dash_and_validates_it() -> None:
    words = sr.create_argv(RES, NODE, "alice")
    assert words[:2] == ["scontrol", "--"] and words[2:4] == ["create", "reservation"]
    assert "Flags=MAINT,IGNORE_JOBS" in words and "Duration=UNLIMITED" in words
    assert "Users=alice" in words and f"Nodes={NODE}" in words
    assert sr.delete_argv(RES) == ["scontrol", "--", "delete", f"ReservationName={RES}"]
    assert sr.cancel_argv(RES) == ["scancel", f"--reservation={RES}"]
    assert sr.sbatch_options(RES, NODE) == [
        f"--reservation={RES}",
        f"--nodelist={NODE}",
        "--nodes=1",
    ]
    assert sr.reservation_name("gpu-a02.example.com") != RES  # one per node, a plain name
    for bad in ("-x", "a b", "n;rm", "n\nx"):
        with pytest.raises(argv.UnsafeArgument):
            sr.reservation_name(bad)
    with pytest.raises(argv.UnsafeArgument):
        sr.create_argv(RES, NODE, "alice Flags=ANY_NODES")


def test_a_run_quarantined_off_slurm_is_not_rechecked_here(tmp_path: Path) -> None:
    from mlenv.errors import InputError
    from mlenv.platforms.offkube import SlurmPlatform
    from mlenv.quarantine import Record, Run

    Record(RUN, "barcelona", "kubernetes", {NODE: {"state": "applied", "note": REASON}}).write(
        tmp_path
    )
    run = Run(RUN, "2026-11-29T01:00:00+00:00", tmp_path, {}, "barcelona")
    with pytest.raises(InputError, match="its quarantine was not a Slurm drain .kubernetes."):
        SlurmPlatform._drained_by(run, [NODE])
    Record(RUN, "barcelona", "slurm", {NODE: {"state": "applied", "note": REASON}}).write(tmp_path)
    assert SlurmPlatform._drained_by(run, [NODE]) == (tmp_path, {NODE: REASON})
