"""Claiming a report folder is atomic: of 8 processes claiming one new folder at once,
exactly one wins, in every one of 200 trials (real processes, so not a unit test).

``MLENV_CLAIM_TRIALS`` runs more trials on demand."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest

from mlenv.acceptance.records import rundir
from mlenv.errors import InputError

pytestmark = pytest.mark.integration

PROCESSES = 8
TRIALS = int(os.environ.get("MLENV_CLAIM_TRIALS", "200"))


def _claimant(folder: str, n: int, go: object, done: object, won: object) -> None:
    go.wait()  # type: ignore[attr-defined]
    try:
        rundir.claim(Path(folder), f"20260101-000000-{n:06x}")
        with won.get_lock():  # type: ignore[attr-defined]
            won.value += 1  # type: ignore[attr-defined]
    except InputError:
        pass
    done.wait()  # type: ignore[attr-defined]  # a winner stays alive: its lock is live


def test_eight_processes_claiming_one_folder_get_one_winner(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    winners: list[int] = []
    for trial in range(TRIALS):
        folder = tmp_path / f"t{trial}"
        go, done = ctx.Barrier(PROCESSES), ctx.Barrier(PROCESSES + 1)
        won = ctx.Value("i", 0)
        procs = [
            ctx.Process(target=_claimant, args=(str(folder), n, go, done, won))
            for n in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        done.wait(timeout=60)
        for p in procs:
            p.join(timeout=60)
        assert all(p.exitcode == 0 for p in procs)
        winners.append(won.value)
    assert winners == [1] * TRIALS
