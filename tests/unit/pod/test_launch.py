"""Command lines (as argument lists), exit-code mapping and the pod-0-only rule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlenv.errors import InputError
from mlenv.pod import launch, runtime

ENV = {"MLENV_NAMESPACE": "ns", "MLENV_NNODES": "2", "MLENV_SSH_PORT": "2022", "MASTER_PORT": "29511"}


def test_deepspeed_argv_for_the_acceptance_suite_is_parsed_by_deepspeed() -> None:
    from deepspeed.launcher.runner import parse_args

    job = launch.acceptance_job("/workspace/results/r1", "quick", [])
    argv = launch.deepspeed_argv(job, "/h/hostfile", "m0.svc", 29511, 2022, python="/py")
    assert argv[:4] == ["/py", "-u", "-m", "deepspeed.launcher.runner"]
    args = parse_args(argv[4:])  # the launcher's own parser accepts every flag we pass
    assert (args.hostfile, args.master_addr, args.master_port, args.ssh_port) == ("/h/hostfile", "m0.svc", 29511, 2022)
    assert args.module and args.no_local_rank and args.no_ssh_check and args.launcher == "pdsh"
    assert args.user_script == "mlenv.acceptance"
    assert args.user_args == ["--report-dir", "/workspace/results/r1", "--profile", "quick"]


def test_deepspeed_argv_for_a_user_script_keeps_args_verbatim() -> None:
    from deepspeed.launcher.runner import parse_args

    job = launch.Job("train.py", ["--lr", "1e-3", "--name", "a b"])
    args = parse_args(launch.deepspeed_argv(job, "hf", "m", 1, 2)[4:])
    assert not args.module and not args.no_local_rank
    assert (args.user_script, args.user_args) == ("train.py", ["--lr", "1e-3", "--name", "a b"])


def test_torchrun_argv_is_parsed_by_torchrun() -> None:
    from torch.distributed.run import parse_args

    job = launch.acceptance_job("/r", None, [])
    argv = launch.torchrun_argv(job, 4, 3, 8, "m0.svc", 29500, python="/py")
    args = parse_args(argv[4:])
    assert (args.nnodes, args.node_rank, args.nproc_per_node) == ("4", 3, "8")
    assert (args.master_addr, args.master_port, args.module) == ("m0.svc", 29500, True)
    assert args.training_script == "mlenv.acceptance" and args.training_script_args == ["--report-dir", "/r"]


def test_pdsh_gets_our_ssh_config() -> None:
    env = launch.deepspeed_env({"PDSH_SSH_ARGS_APPEND": "-v"}, "/s/ssh_config")
    assert env["PDSH_SSH_ARGS_APPEND"] == "-v -F /s/ssh_config" and env["PDSH_RCMD_TYPE"] == "ssh"


@pytest.mark.parametrize("rc,code,note", [(0, 0, ""), (1, 1, ""), (2, 2, ""), (3, 3, ""),
                                          (-9, 3, "signal 9"), (137, 3, "status 137")])
def test_exit_mapping(rc: int, code: int, note: str) -> None:
    got, msg = launch.map_exit(rc)
    assert got == code and note in msg


def test_launch_refuses_off_pod_zero() -> None:
    with pytest.raises(InputError, match="pod 0 only .*node rank 1"):
        runtime.do_launch({**ENV, "MLENV_POD_INDEX": "1"}, script=[], module=None, torchrun=False,
                          deadline_s=1, profile=None, report_dir=None, run_id=None)


def test_cli_refusal_exit_code_and_message(tmp_path: Path) -> None:
    env = {**os.environ, **ENV, "MLENV_POD_INDEX": "1", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "mlenv.pod", "launch"], env=env, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 2
    assert "pod 0 only" in r.stderr and "Traceback" not in r.stderr


def test_cli_launch_without_init_is_a_clear_input_error(tmp_path: Path) -> None:
    env = {**os.environ, **ENV, "MLENV_POD_INDEX": "0", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "mlenv.pod", "launch"], env=env, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 2 and "hostfile" in r.stderr and "pod init" in r.stderr


def test_torchrun_commands_are_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = runtime.do_launch({**ENV, "MLENV_POD_INDEX": "0", "HOME": str(tmp_path)}, script=[], module=None,
                             torchrun=True, deadline_s=1, profile="quick", report_dir=None, run_id="r7")
    out = capsys.readouterr()
    assert code == 0
    assert "run-torchrun --run-id r7 --report-dir /workspace/results/r7 --profile quick" in out.out
    assert "--node-rank 0" in out.err


def test_options_after_double_dash_go_to_the_acceptance_suite() -> None:
    from mlenv.pod.__main__ import _parser

    script = _parser().parse_args(["launch", "--profile", "quick", "--", "--checks", "compute",
                                   "--options", "o.json"]).script
    job = runtime._job(script[1:], None, "/r", "quick")
    assert job.module and job.target == launch.ACCEPTANCE_MODULE and not job.local_rank_flag
    assert job.args == ["--report-dir", "/r", "--profile", "quick", "--checks", "compute", "--options", "o.json"]
    user = runtime._job(["train.py", "--steps", "2"], None, "/r", "quick")
    assert (user.target, user.args, user.module) == ("train.py", ["--steps", "2"], False)


def test_printed_torchrun_command_keeps_suite_options_after_double_dash(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from mlenv.pod.__main__ import _parser

    code = runtime.do_launch({**ENV, "MLENV_POD_INDEX": "0", "HOME": str(tmp_path)}, script=["--checks", "compute"],
                             module=None, torchrun=True, deadline_s=1, profile=None, report_dir=None, run_id="r8")
    printed = capsys.readouterr().out.split()
    assert code == 0 and printed[-3:] == ["--", "--checks", "compute"]
    # The printed command parses, and the options reach the suite in that pod.
    args = _parser().parse_args(printed[3:])
    assert args.verb == "run-torchrun" and args.script == ["--", "--checks", "compute"]
