"""``MLENV_TOPOLOGY`` reaching the ranks through ``.deepspeed_env``: the
StatefulSet carries it as JSON, whose double quotes DeepSpeed's double-quoted export
cannot pass, so init and launch write it in the compact form rank 0 reads alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlenv import contract
from mlenv.acceptance.evidence import topology as T
from mlenv.pod import dsenv, runtime

from .test_dsenv import _through_deepspeed
from .test_runtime_init import rdma_env

RACKS = {"rack-a": ["worker-1", "worker-2.example.com"], "r2": ["worker_3"]}


def test_pod_init_with_a_topology_writes_a_deepspeed_env_the_launcher_passes(
    tmp_path: Path,
) -> None:
    """Before: init refused MLENV_TOPOLOGY's '"' (exit 2), so every pod of a deployment with
    nodes.topology failed its entry command."""
    env = {
        **rdma_env(tmp_path, tmp_path / "no-secret"),
        "MLENV_NETWORK_MODE": "tcp",
        "MLENV_CPU_SLOTS": "1",
        contract.TOPOLOGY_ENV: contract.topology_json(RACKS),
    }
    assert runtime.verb_init(env, start_sshd=False) == 0
    p = runtime.paths_from(env)
    for path in (p.deepspeed_env, p.forward_env):
        text = Path(path).read_text()
        assert T.parse(_through_deepspeed(text)[contract.TOPOLOGY_ENV]) == RACKS


def test_a_launch_shells_topology_replaces_inits_and_reaches_the_ranks() -> None:
    launch_env = {
        contract.TOPOLOGY_ENV: json.dumps({"leaf01": ["hgx01"], "leaf02": ["hgx02", "hgx03"]})
    }
    text = dsenv.launch_file(
        {contract.TOPOLOGY_ENV: "rack-a=worker-1"}, launch_env, per_pod_hca=False
    )
    assert T.parse(_through_deepspeed(text)[contract.TOPOLOGY_ENV]) == {
        "leaf01": ["hgx01"],
        "leaf02": ["hgx02", "hgx03"],
    }


@pytest.mark.parametrize(
    "text,needle",
    [
        ('{"rack-a": ["w1"', "not JSON"),
        ("rack-a", "neither JSON nor"),
        ('{"Rack A": ["w1"]}', "not a DNS label"),
        ("rack-a=w1;rack-b=w1", "in two racks"),
    ],
)
def test_an_unreadable_topology_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        T.parse(text)


def test_a_name_that_would_break_the_compact_form_is_refused() -> None:
    with pytest.raises(ValueError, match="quote or a blank"):
        contract.topology_compact(json.dumps({"rack-a": ["w 1"]}))


@pytest.mark.parametrize("verb", ["launch", "run-torchrun"])
def test_the_pod_launchers_topology_option_refuses_what_ranks_cannot_read(
    verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlenv.pod.__main__ import main

    assert main([verb, "--topology", '{"rack-a": ["w 1"]}', "--run-id", "r1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --topology: MLENV_TOPOLOGY: a rack or node name holds '=', ',', ';', a quote or a blank"
    ]
