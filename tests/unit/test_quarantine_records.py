"""quarantine --apply and release write the run's record a fixed number of times, not
once or twice per node, and a mark failing half-way still leaves a record release can undo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlenv import quarantine
from mlenv.quarantine import Record, Target

RUN = "20261129-000000-abcdef"


class Marks(quarantine.OneByOne):
    """A platform's Marker that marks one node after another and changes nothing: it
    notes each mark, and fails on one."""

    kind = "kubernetes"
    acts = True

    def __init__(self, fail_on: str | None = None) -> None:
        self.marked: list[tuple[str, bool]] = []
        self.fail_on = fail_on

    def commands(self, t: Target, *, remove: bool = False) -> list[str]:
        return [f"kubectl {'unmark' if remove else 'mark'} {t.node}"]

    def unusable(self, t: Target) -> str | None:
        return None

    def permitted(self) -> tuple[bool, str]:
        return True, ""

    def foreign_mark(self, t: Target) -> str | None:
        return None

    def not_ours_now(self, t: Target) -> str | None:
        return None

    def mark(self, t: Target, *, remove: bool = False) -> None:
        if t.node == self.fail_on:
            raise RuntimeError(f"the API refused {t.node}")
        self.marked.append((t.node, remove))


def _run(tmp: Path, nodes: int) -> quarantine.Run:
    d = tmp / "run"
    d.mkdir()
    verdicts = [
        {
            "node": f"node-{i:03d}",
            "hosts": [f"ml-dev-env-{i}"],
            "node_from": "kubernetes",
            "status": "FAIL",
            "findings": [{"status": "FAIL", "check": "compute.matmul", "figure": "tflops = 0.2"}],
        }
        for i in range(nodes)
    ]
    doc = {
        "schema_version": 1,
        "run_id": RUN,
        "started": "2026-11-29T00:00:00+00:00",
        "verdict": "FAIL",
        "node_verdicts": {"nodes": verdicts},
        "checks": [],
    }
    (d / "results.json").write_text(json.dumps(doc))
    (d / "record.json").write_text(json.dumps({"run_id": RUN, "cluster": "c"}))
    return quarantine.load_run(str(d), tmp / "history")


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of nodes in the record at each write."""
    seen: list[int] = []
    real = Record.write

    def counted(self: Record, report_dir: Path) -> Path:
        seen.append(len(self.nodes))
        return real(self, report_dir)

    monkeypatch.setattr(Record, "write", counted)
    return seen


def test_the_record_is_written_twice_for_a_quarantine_and_once_for_a_release(
    tmp_path: Path, writes: list[int]
) -> None:
    """Rewriting the record after every node (twice per node at quarantine, once at
    release) made both grow with the square of their nodes (77 s at 4096). Fails on the
    code before: 40 writes at quarantine, 20 at release."""
    run = _run(tmp_path, 20)
    marker = Marks()
    ts = quarantine.targets(run)
    out = quarantine.apply(run, marker, "c", ts, history_root=tmp_path / "history")
    assert len(out.done) == 20 and len(writes) == 2
    assert run.report_dir is not None
    rec = Record.read(run.report_dir)
    assert rec is not None and {v["state"] for v in rec.nodes.values()} == {"applied"}
    writes.clear()
    back = quarantine.release(
        run, marker, "c", after=None, force=True, only=None, history_root=tmp_path / "history"
    )
    assert len(back.done) == 20 and len(writes) == 1
    rec = Record.read(run.report_dir)
    assert rec is not None and {v["state"] for v in rec.nodes.values()} == {"released"}
    # every node's event is still logged, one line each
    log = (tmp_path / "history" / "c" / quarantine.QUARANTINE_HISTORY).read_text().splitlines()
    assert len(log) == 40


def test_a_mark_failing_half_way_leaves_what_was_done_applied_and_the_rest_applying(
    tmp_path: Path, writes: list[int]
) -> None:
    run = _run(tmp_path, 6)
    marker = Marks(fail_on="node-003")
    with pytest.raises(RuntimeError, match="refused node-003"):
        quarantine.apply(run, marker, "c", quarantine.targets(run), history_root=tmp_path / "h")
    assert run.report_dir is not None
    rec = Record.read(run.report_dir)
    assert rec is not None
    states = {n: v["state"] for n, v in rec.nodes.items()}
    assert [n for n, st in sorted(states.items()) if st == "applied"] == [
        "node-000",
        "node-001",
        "node-002",
    ]
    # the node that failed and those after it: "applying", which release undoes
    assert {states[f"node-00{i}"] for i in (3, 4, 5)} == {"applying"}
    assert len(writes) == 2
