"""CPU ranks' threads come from the cores the process may use and the user's
OMP_NUM_THREADS, not from the machine's core count (mlenv/acceptance/core/cpus.py)."""

from __future__ import annotations

import os
import sys
import types

import pytest

from mlenv.acceptance.core import cpus
from mlenv.acceptance.core.base import RunContext


@pytest.fixture()
def pinned_to_four_of_128(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Slurm step or a pinned pod: 4 cores allowed on a 128-core machine."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {8, 9, 10, 11}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 128)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


@pytest.mark.usefixtures("pinned_to_four_of_128")
def test_the_cores_split_are_the_allowed_ones_not_the_machines() -> None:
    assert cpus.usable_cpus() == 4
    assert [cpus.threads_per_rank(n) for n in (1, 2, 4, 8)] == [4, 2, 1, 1]


@pytest.mark.usefixtures("pinned_to_four_of_128")
@pytest.mark.parametrize(("given", "want"), [("3", 3), (" 1 ", 1), ("0", 2), ("two", 2), ("", 2)])
def test_an_explicit_omp_num_threads_wins_when_it_is_a_positive_integer(given: str, want: int) -> None:
    assert cpus.threads_per_rank(2, {"OMP_NUM_THREADS": given}) == want


@pytest.mark.usefixtures("pinned_to_four_of_128")
def test_local_launch_gives_each_rank_its_share_of_the_allowed_cores() -> None:
    from mlenv.acceptance.run.local import launch_env

    assert launch_env(2, 0)["OMP_NUM_THREADS"] == "2"  # was 64: 128 // 2


@pytest.mark.usefixtures("pinned_to_four_of_128")
@pytest.mark.parametrize(("omp", "want"), [(None, 4), ("1", 1)])
def test_the_training_check_keeps_to_the_allowed_cores_and_the_users_setting(
        monkeypatch: pytest.MonkeyPatch, omp: str | None, want: int) -> None:
    """Before: torch.set_num_threads(os.cpu_count() // local ranks), 128 threads for one rank
    on 4 cores, whatever OMP_NUM_THREADS the user or the Slurm script had set."""
    from mlenv.acceptance.checks import dsops, training

    if omp is not None:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    calls: list[int] = []
    fake_torch = types.SimpleNamespace(get_num_threads=lambda: 7, set_num_threads=calls.append)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(dsops, "build_start_ops", lambda: None)
    ctx = RunContext(rank=0, world_size=2, local_rank=0, local_world_size=1, node_rank=0, nnodes=2, host="h",
                     backend="gloo", device="cpu")
    check = training.TrainingCheck()
    check.setup(ctx)
    check.teardown(ctx)
    assert calls == [want, 7]  # set for the check, restored after it


@pytest.mark.parametrize(("launcher", "expected"), [
    # DeepSpeed's launch.py on a CPU pod running one rank (MLENV_CPU_SLOTS=1): the pod
    # spec's static LOCAL_WORLD_SIZE=2 (GPUs per node, for upstream's scripts) is inherited
    ({"LOCAL_SIZE": "1", "LOCAL_WORLD_SIZE": "2", "CROSS_RANK": "1", "CROSS_SIZE": "2"}, 1),
    ({"LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}, 2),  # torchrun
    ({}, 4),  # neither: the world
], ids=["deepspeed_in_a_pod", "torchrun", "none"])
def test_a_ranks_local_world_is_what_its_launcher_set(monkeypatch: pytest.MonkeyPatch, launcher: dict[str, str],
                                                      expected: int) -> None:
    from mlenv.acceptance.run import world

    for k in ("LOCAL_SIZE", "LOCAL_WORLD_SIZE", "CROSS_RANK", "CROSS_SIZE", "GROUP_RANK"):
        monkeypatch.delenv(k, raising=False)
    for k, v in {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "0", **launcher}.items():
        monkeypatch.setenv(k, v)
    assert world.read_launch_env().local_world_size == expected
