"""``import_records`` adds runs recorded elsewhere (a pod, Slurm's shared_dir) to a
cluster's history, one record per run id, with the run folder copied beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlenv.acceptance.records.history import (
    HISTORY_FILE,
    RECORD_FILE,
    distinct,
    import_records,
    make_record,
    read,
    record_from_folder,
)
from mlenv.errors import InputError


def _run(tmp: Path, rid: str, cluster: str = "lab") -> tuple[dict, Path]:
    folder = tmp / "elsewhere" / rid
    (folder / "logs").mkdir(parents=True)
    doc = {
        "run_id": rid,
        "started": "2026-11-22T03:00:00+00:00",
        "verdict": "PASS",
        "profile": "quick",
        "checks": [],
        "world": {"ranks": 2},
    }
    (folder / "results.json").write_text(json.dumps(doc))
    (folder / "logs" / "rank0.log").write_text("ok\n")
    return make_record(doc, [], cluster, folder, origin="cluster"), folder


def test_each_run_is_added_once_with_its_folder(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    a, b = _run(tmp_path, "20261122-030000-aaaaaa"), _run(tmp_path, "20261129-030000-bbbbbb")
    added, skipped = import_records("lab", [a, b, a], root)
    assert added == ["20261122-030000-aaaaaa", "20261129-030000-bbbbbb"] and skipped == [
        "20261122-030000-aaaaaa"
    ]
    recs, notes = read(root / "lab" / HISTORY_FILE)
    assert not notes and len(distinct(recs)) == len(recs) == 2
    dest = root / "lab" / "20261122-030000-aaaaaa"
    assert (dest / "logs" / "rank0.log").read_text() == "ok\n"
    assert recs[0]["report_dir"] == str(dest.resolve())
    assert json.loads((dest / RECORD_FILE).read_text()) == recs[0]
    # a second import of the same runs adds nothing
    assert import_records("lab", [a, b], root) == (
        [],
        ["20261122-030000-aaaaaa", "20261129-030000-bbbbbb"],
    )
    assert len(read(root / "lab" / HISTORY_FILE)[0]) == 2


def test_a_record_of_another_cluster_or_without_a_run_id_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    good = _run(tmp_path, "20261122-030000-aaaaaa")
    other = _run(tmp_path, "20261129-030000-bbbbbb", cluster="elsewhere")
    with pytest.raises(InputError, match="names cluster 'elsewhere'"):
        import_records("lab", [good, other], root)
    with pytest.raises(InputError, match="is not a run id"):
        import_records("lab", [good, ({**good[0], "run_id": "../../etc"}, None)], root)
    assert not (root / "lab").exists()


def test_a_folder_without_a_record_gets_one_from_its_results(tmp_path: Path) -> None:
    rec, folder = _run(tmp_path, "20261122-030000-aaaaaa")
    made = record_from_folder(folder, "lab")
    assert made is not None and made["run_id"] == rec["run_id"] and made["origin"] == "cluster"
    (folder / "results.json").write_text("{not json")
    assert record_from_folder(folder, "lab") is None
