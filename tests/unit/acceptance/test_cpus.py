"""CPU ranks' threads come from the cores the process may use and the user's
OMP_NUM_THREADS, not from the machine's core count (mlenv/acceptance/core/cpus.py)."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from mlenv.acceptance.core import cpus
from mlenv.acceptance.core.base import RunContext


@pytest.fixture()
def pinned_to_four_of_128(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Slurm step or a pinned pod: 4 cores allowed on a 128-core machine."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {8, 9, 10, 11}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 128)
    monkeypatch.setattr(
        cpus, "cgroup_cpu_limit", lambda *a: None
    )  # whatever limit the test machine has
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


@pytest.mark.usefixtures("pinned_to_four_of_128")
def test_the_cores_split_are_the_allowed_ones_not_the_machines() -> None:
    assert cpus.usable_cpus() == 4
    assert [cpus.threads_per_rank(n) for n in (1, 2, 4, 8)] == [4, 2, 1, 1]


@pytest.mark.usefixtures("pinned_to_four_of_128")
@pytest.mark.parametrize(("given", "want"), [("3", 3), (" 1 ", 1), ("0", 2), ("two", 2), ("", 2)])
def test_an_explicit_omp_num_threads_wins_when_it_is_a_positive_integer(
    given: str, want: int
) -> None:
    assert cpus.threads_per_rank(2, {"OMP_NUM_THREADS": given}) == want


@pytest.mark.usefixtures("pinned_to_four_of_128")
def test_local_launch_gives_each_rank_its_share_of_the_allowed_cores() -> None:
    from mlenv.acceptance.run.local import launch_env

    assert launch_env(2, 0)["OMP_NUM_THREADS"] == "2"  # was 64: 128 // 2


@pytest.mark.usefixtures("pinned_to_four_of_128")
@pytest.mark.parametrize(("omp", "want"), [(None, 4), ("1", 1)])
def test_the_training_check_keeps_to_the_allowed_cores_and_the_users_setting(
    monkeypatch: pytest.MonkeyPatch, omp: str | None, want: int
) -> None:
    """Before: torch.set_num_threads(os.cpu_count() // local ranks), 128 threads for one rank
    on 4 cores, whatever OMP_NUM_THREADS the user or the Slurm script had set."""
    from mlenv.acceptance.checks import dsops, training

    if omp is not None:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    calls: list[int] = []
    fake_torch = types.SimpleNamespace(get_num_threads=lambda: 7, set_num_threads=calls.append)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(dsops, "build_start_ops", lambda: None)
    ctx = RunContext(
        rank=0,
        world_size=2,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        nnodes=2,
        host="h",
        backend="gloo",
        device="cpu",
    )
    check = training.TrainingCheck()
    check.setup(ctx)
    check.teardown(ctx)
    assert calls == [want, 7]  # set for the check, restored after it


@pytest.mark.parametrize(
    ("launcher", "expected"),
    [
        # DeepSpeed's launch.py on a CPU pod running one rank (MLENV_CPU_SLOTS=1): the pod
        # spec's static LOCAL_WORLD_SIZE=2 (GPUs per node, for upstream's scripts) is inherited
        ({"LOCAL_SIZE": "1", "LOCAL_WORLD_SIZE": "2", "CROSS_RANK": "1", "CROSS_SIZE": "2"}, 1),
        ({"LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}, 2),  # torchrun
        ({}, 4),  # neither: the world
    ],
    ids=["deepspeed_in_a_pod", "torchrun", "none"],
)
def test_a_ranks_local_world_is_what_its_launcher_set(
    monkeypatch: pytest.MonkeyPatch, launcher: dict[str, str], expected: int
) -> None:
    from mlenv.acceptance.run import world

    for k in ("LOCAL_SIZE", "LOCAL_WORLD_SIZE", "CROSS_RANK", "CROSS_SIZE", "GROUP_RANK"):
        monkeypatch.delenv(k, raising=False)
    for k, v in {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "0", **launcher}.items():
        monkeypatch.setenv(k, v)
    assert world.read_launch_env().local_world_size == expected


def _cgroups(tmp_path: Path, own: str, files: dict[str, str]) -> tuple[str, str]:
    """A cgroup tree under ``tmp_path/cg`` holding ``files`` and this process's ``/proc/self/cgroup``."""
    root = tmp_path / "cg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    (tmp_path / "self-cgroup").write_text(own)
    return str(root), str(tmp_path / "self-cgroup")


@pytest.mark.parametrize(
    ("own", "files", "limit"),
    [
        # cgroup v2, a container limited to 2 CPUs (resources.limits.cpu: 2)
        (
            "0::/kubepods/pod1/c1\n",
            {"kubepods/pod1/c1/cpu.max": "200000 100000", "cpu.max": "max 100000"},
            2,
        ),
        # the limit on the pod's cgroup, none on the container's: 1.5 CPUs round up to 2
        (
            "0::/kubepods/pod1/c1\n",
            {"kubepods/pod1/c1/cpu.max": "max 100000", "kubepods/pod1/cpu.max": "150000 100000"},
            2,
        ),
        # inside a container's cgroup namespace: its own limits at the root
        ("0::/\n", {"cpu.max": "50000 100000"}, 1),
        # cgroup v1, as Docker and older kubelets set it
        (
            "4:cpu,cpuacct:/kubepods/x\n1:name=systemd:/\n",
            {
                "cpu,cpuacct/kubepods/x/cpu.cfs_quota_us": "300000",
                "cpu,cpuacct/kubepods/x/cpu.cfs_period_us": "100000",
            },
            3,
        ),
        # unlimited: v1's -1, v2's max, or nothing readable
        ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        ("0::/a\n", {"a/cpu.max": "max 100000"}, None),
        ("0::/a\n", {}, None),
    ],
    ids=["v2_container", "v2_pod", "v2_namespaced", "v1", "v1_unlimited", "v2_unlimited", "none"],
)
def test_a_cgroup_cpu_limit_is_read(
    tmp_path: Path, own: str, files: dict[str, str], limit: int | None
) -> None:
    assert cpus.cgroup_cpu_limit(*_cgroups(tmp_path, own, files)) == limit


def test_a_pod_limited_to_two_cpus_on_a_64_core_node_gets_two_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rendered pods set resources.limits.cpu (2 for the `local` example); their
    affinity mask is the whole node's, so a CPU rank took 64 threads and was throttled."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    root, own = _cgroups(tmp_path, "0::/\n", {"cpu.max": "200000 100000"})
    assert cpus.usable_cpus(root, own) == 2
    monkeypatch.setattr(
        cpus, "cgroup_cpu_limit", lambda *a: 2
    )  # the same limit, where threads_per_rank reads it
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [cpus.threads_per_rank(n) for n in (1, 2, 4)] == [2, 1, 1]
