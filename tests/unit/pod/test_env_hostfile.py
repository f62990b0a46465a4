"""Rank parsing, pod settings and the hostfile."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlenv.errors import InputError
from mlenv.pod.env import node_rank, pod_env
from mlenv.pod.hostfile import NotInitialised, parse_hostfile, render_hostfile, slots_per_node

BASE = {"MLENV_NAMESPACE": "team-a", "MLENV_NNODES": "3"}


def test_rank_prefers_pod_index_label() -> None:
    assert node_rank({"MLENV_POD_INDEX": "2"}, hostname="ml-dev-env-0") == 2


def test_rank_falls_back_to_hostname_suffix_when_label_empty() -> None:
    assert node_rank({"MLENV_POD_INDEX": ""}, hostname="ml-dev-env-11") == 11


def test_rank_from_pod_name_env() -> None:
    assert node_rank({"MLENV_POD_NAME": "ml-dev-env-4"}, hostname=None) == 4


@pytest.mark.parametrize(
    "env,host,needle",
    [
        ({"MLENV_POD_INDEX": "x1"}, "ml-dev-env-0", "MLENV_POD_INDEX='x1'"),
        ({}, "workstation", "no '-<ordinal>' suffix"),
    ],
)
def test_rank_errors_say_what_is_wrong(env: dict[str, str], host: str, needle: str) -> None:
    with pytest.raises(InputError) as e:
        node_rank(env, hostname=host)
    assert needle in str(e.value)


def test_pod_env_defaults_and_dns_names() -> None:
    pe = pod_env({**BASE, "MLENV_POD_INDEX": "1"})
    assert pe.rank == 1 and pe.ssh_port == 2222 and pe.master_port == 29500
    assert pe.hosts == [f"ml-dev-env-{i}.ml-dev-env-headless.team-a.svc" for i in range(3)]
    assert pe.master_addr == pe.hosts[0]


@pytest.mark.parametrize(
    "extra,needle",
    [
        ({"MLENV_NAMESPACE": ""}, "MLENV_NAMESPACE is not set"),
        ({"MLENV_NNODES": "zero"}, "MLENV_NNODES='zero'"),
        ({"MLENV_POD_INDEX": "3"}, "node rank 3 is not below MLENV_NNODES=3"),
        ({"MLENV_NETWORK_MODE": "ib"}, "expected 'tcp' or 'rdma'"),
        ({"MLENV_SSH_PORT": "70000"}, "MLENV_SSH_PORT=70000"),
    ],
)
def test_pod_env_rejects_bad_values(extra: dict[str, str], needle: str) -> None:
    with pytest.raises(InputError) as e:
        pod_env({**BASE, "MLENV_POD_INDEX": "0", **extra})
    assert needle in str(e.value)


def test_slots_gpu_cpu_and_override() -> None:
    assert slots_per_node(4, 4, {}) == 4
    assert slots_per_node(0, 8, {}) == 8  # not configured: what is there
    assert slots_per_node(4, 0, {}) == 1  # no GPU in this pod: CPU slots
    assert slots_per_node(4, 0, {"MLENV_CPU_SLOTS": "2"}) == 2
    with pytest.raises(InputError, match="MLENV_CPU_SLOTS"):
        slots_per_node(0, 0, {"MLENV_CPU_SLOTS": "0"})


def test_hostfile_round_trip_matches_deepspeed_parser(tmp_path: Path) -> None:
    from deepspeed.launcher.runner import _parse_hostfile

    pe = pod_env({**BASE, "MLENV_POD_INDEX": "0"})
    text = render_hostfile(pe.hosts, 4)
    path = tmp_path / "hostfile"
    path.write_text(text)
    ours = parse_hostfile(str(path))
    theirs = _parse_hostfile(text.splitlines())
    assert ours == list(theirs.items())
    assert ours[2] == ("ml-dev-env-2.ml-dev-env-headless.team-a.svc", 4)


def test_hostfile_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_text("# comment\na slots=1\nb slots=two\n")
    with pytest.raises(InputError) as e:
        parse_hostfile(str(path))
    assert f"{path}:3:" in str(e.value)
    # not there yet: the pod's entry point has not run pod init (exit 3, not bad input)
    with pytest.raises(NotInitialised, match="the pod is not initialised yet") as missing:
        parse_hostfile(str(path) + ".missing")
    assert missing.value.exit_code == 3
