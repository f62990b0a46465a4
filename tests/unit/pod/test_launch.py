"""Command lines (as argument lists), exit-code mapping and the pod-0-only rule."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlenv.errors import InfraError, InputError
from mlenv.pod import launch, runtime

ENV = {
    "MLENV_NAMESPACE": "ns",
    "MLENV_NNODES": "2",
    "MLENV_SSH_PORT": "2022",
    "MASTER_PORT": "29511",
}


def test_deepspeed_argv_for_the_acceptance_suite_is_parsed_by_deepspeed() -> None:
    from deepspeed.launcher.runner import parse_args

    job = launch.acceptance_job("/workspace/results/r1", "quick", [])
    argv = launch.deepspeed_argv(job, "/h/hostfile", "m0.svc", 29511, 2022, python="/py")
    assert argv[:4] == ["/py", "-u", "-m", "deepspeed.launcher.runner"]
    args = parse_args(argv[4:])  # the launcher's own parser accepts every flag we pass
    assert (args.hostfile, args.master_addr, args.master_port, args.ssh_port) == (
        "/h/hostfile",
        "m0.svc",
        29511,
        2022,
    )
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
    assert args.training_script == "mlenv.acceptance" and args.training_script_args == [
        "--report-dir",
        "/r",
    ]


def test_pdsh_gets_our_ssh_config() -> None:
    env = launch.deepspeed_env({"PDSH_SSH_ARGS_APPEND": "-v"}, "/s/ssh_config")
    assert env["PDSH_SSH_ARGS_APPEND"] == "-v -F /s/ssh_config" and env["PDSH_RCMD_TYPE"] == "ssh"


def test_launcher_env_names_the_env_file_and_carries_this_pods_identity() -> None:
    node = {
        "NCCL_IB_HCA": "mlx5_3",
        "LD_PRELOAD": "/l/libnss_wrapper.so",
        "NSS_WRAPPER_PASSWD": "/s/passwd",
        "NSS_WRAPPER_GROUP": "/s/group",
    }
    env = launch.deepspeed_env(
        {"NCCL_IB_HCA": "mlx5_0", "PATH": "/bin"}, "/s/ssh_config", "rel/.deepspeed_env", node
    )
    # DeepSpeed reads only ~/.deepspeed_env and ./.deepspeed_env unless DS_ENV_FILE names the file.
    assert env["DS_ENV_FILE"] == os.path.abspath("rel/.deepspeed_env")
    # pdsh and ssh must find our UID (nss_wrapper); pod-0's per-pod HCA must not be exported.
    assert env["LD_PRELOAD"] == "/l/libnss_wrapper.so" and env["NSS_WRAPPER_PASSWD"] == "/s/passwd"
    assert "NCCL_IB_HCA" not in env


def test_deepspeed_reads_the_env_file_ds_env_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pins the DeepSpeed behaviour launch relies on: an absolute DS_ENV_FILE is the file read.
    # DeepSpeed reads DS_ENV_FILE when its runner module is imported: reloaded here under the
    # variable, as a fresh launcher process would import it, then reloaded back without it.
    from deepspeed.launcher import runner as r

    f = str(tmp_path / "x.env")
    monkeypatch.setenv("DS_ENV_FILE", f)
    try:
        importlib.reload(r)
        read = {
            os.path.join(p, r.DEEPSPEED_ENVIRONMENT_NAME) for p in r.DEEPSPEED_ENVIRONMENT_PATHS
        }
    finally:
        monkeypatch.delenv("DS_ENV_FILE")
        importlib.reload(r)
    assert read == {f}
    assert r.DEEPSPEED_ENVIRONMENT_NAME == ".deepspeed_env"


def test_a_state_dir_with_whitespace_is_refused_for_pdsh() -> None:
    with pytest.raises(InputError, match="whitespace"):
        launch.deepspeed_env({}, "/home/a b/.mlenv/ssh/ssh_config")


def test_pdsh_logs_in_as_the_name_sshd_admits() -> None:
    from deepspeed.launcher.runner import parse_args

    argv = launch.deepspeed_argv(launch.Job("t.py"), "hf", "m", 1, 2, user="mlenv-1000680000")
    assert parse_args(argv[4:]).launcher_args == "-l mlenv-1000680000"


@pytest.mark.parametrize(
    "rc,acceptance,verdict,code,note",
    [
        (0, True, "PASS", 0, ""),
        (1, True, "FAIL", 1, ""),
        (2, True, None, 2, ""),
        (3, True, "ERROR", 3, ""),
        # DeepSpeed's runner exits 1 itself (pdsh missing, bad hostfile, a crashed rank):
        # without this run's results.json saying FAIL, that is an ERROR.
        (1, True, None, 3, "no results.json"),
        (1, True, "ERROR", 3, ""),
        (1, True, "PASS", 3, "verdict PASS"),
        (-9, True, None, 3, "signal 9"),
        (137, True, None, 3, "status 137"),
        # A user script: 0 and 2 (bad input) pass through, anything else is ERROR, never FAIL.
        (0, False, None, 0, ""),
        (2, False, None, 2, ""),
        (1, False, None, 3, "status 1"),
        (3, False, None, 3, ""),
        (-15, False, None, 3, "signal 15"),
    ],
)
def test_exit_mapping(rc: int, acceptance: bool, verdict: str | None, code: int, note: str) -> None:
    got, msg = launch.map_exit(rc, acceptance, verdict)
    assert got == code and note in msg


def test_fresh_verdict_ignores_a_report_older_than_the_run(tmp_path: Path) -> None:
    import json
    import time

    (tmp_path / "results.json").write_text(json.dumps({"verdict": "FAIL"}))
    assert launch.fresh_verdict(str(tmp_path), time.time()) == "FAIL"
    os.utime(tmp_path / "results.json", (time.time() - 3600, time.time() - 3600))
    assert launch.fresh_verdict(str(tmp_path), time.time()) is None
    assert launch.fresh_verdict(str(tmp_path / "none"), 0) is None


@pytest.mark.parametrize("run_id", ["a;b", "x y", "../up", "..", "$(id)", ""])
def test_bad_run_ids_are_refused(run_id: str) -> None:
    with pytest.raises(InputError, match="--run-id"):
        launch.check_run_id(run_id)


def test_run_id_is_checked_on_every_verb(tmp_path: Path) -> None:
    env = {**os.environ, **ENV, "MLENV_POD_INDEX": "0", "HOME": str(tmp_path)}
    for verb in (["launch", "--torchrun"], ["run-torchrun"]):
        r = subprocess.run(
            [sys.executable, "-m", "mlenv.pod", *verb, "--run-id", "x;rm -rf ~"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 2 and "--run-id" in r.stderr and "Traceback" not in r.stderr, (
            r.stderr
        )


@pytest.mark.parametrize(
    "word,quoted,bad",
    [
        ("--lr=1e-3", True, None),
        ("/workspace/results/r1", True, None),
        ("a b", True, None),
        ('say "hi" there', True, None),
        ("résumé.txt", True, None),
        ("a;b", True, "';'"),
        ("$HOME", True, "'$'"),
        ("a $HOME", True, "$"),
        ("~/x", True, "'~'"),
        ("*.py", True, "'*'"),
        ("a	b", True, "control"),
        ("", True, "empty"),
        ("50%n", True, "pdsh"),
        ("a b", False, "' '"),
        ("it's", True, '"\'"'),
    ],
)
def test_remote_word_problem(word: str, quoted: bool, bad: str | None) -> None:
    got = launch.remote_word_problem(word, quoted)
    if bad is None:
        assert got is None
    else:
        assert got is not None and bad in got


def test_launch_refuses_words_the_remote_shell_would_change_before_preflight(
    tmp_path: Path,
) -> None:
    home = _initialised_home(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("")
    env = {**ENV, "MLENV_POD_INDEX": "0", "HOME": str(home), "PATH": os.environ["PATH"]}
    with pytest.raises(InputError) as e:
        runtime.verb_launch(
            env,
            script=[str(script), "--tag", "a;b", "--note", "x `id`"],
            module=None,
            torchrun=False,
            deadline_s=0.5,
            profile=None,
            report_dir=None,
            run_id=None,
        )
    assert "the value of --tag 'a;b'" in str(e.value) and "the value of --note 'x `id`'" in str(
        e.value
    )
    with pytest.raises(InputError, match="the value of --report-dir .*rep;x"):
        runtime.verb_launch(
            env,
            script=[],
            module=None,
            torchrun=False,
            deadline_s=0.5,
            profile=None,
            report_dir=str(tmp_path / "rep;x"),
            run_id=None,
        )


def _initialised_home(tmp_path: Path) -> Path:
    """What 'pod init' leaves behind as far as 'launch' reads it before running anything."""
    home = tmp_path / "home"
    (home / ".mlenv" / "ssh").mkdir(parents=True)
    (home / ".mlenv" / "hostfile").write_text("a slots=1\nb slots=1\n")
    (home / ".mlenv" / "ssh" / "ssh_config").write_text("")
    return home


def test_launch_without_pdsh_is_an_infra_error_not_a_fail(tmp_path: Path) -> None:
    home = _initialised_home(tmp_path)
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**ENV, "MLENV_POD_INDEX": "0", "HOME": str(home), "PATH": str(empty)}
    with pytest.raises(InfraError) as e:
        runtime.verb_launch(
            env,
            script=[],
            module=None,
            torchrun=False,
            deadline_s=0.5,
            profile=None,
            report_dir=None,
            run_id=None,
        )
    assert (
        e.value.exit_code == 3
        and "pdsh and ssh not found" in str(e.value)
        and "--torchrun" in str(e.value)
    )


def test_launch_refuses_off_pod_zero() -> None:
    with pytest.raises(InputError, match="pod 0 only .*node rank 1"):
        runtime.verb_launch(
            {**ENV, "MLENV_POD_INDEX": "1"},
            script=[],
            module=None,
            torchrun=False,
            deadline_s=1,
            profile=None,
            report_dir=None,
            run_id=None,
        )


def test_cli_refusal_exit_code_and_message(tmp_path: Path) -> None:
    env = {**os.environ, **ENV, "MLENV_POD_INDEX": "1", "HOME": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "mlenv.pod", "launch"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2
    assert "pod 0 only" in r.stderr and "Traceback" not in r.stderr


def test_cli_launch_before_init_is_exit_3_saying_the_pod_is_not_initialised(
    tmp_path: Path,
) -> None:
    """Right after a deploy the pods' entry point may not have run pod init yet: that is
    the cluster's state, not bad input (it was exit 2)."""
    env = {**os.environ, **ENV, "MLENV_POD_INDEX": "0", "HOME": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "mlenv.pod", "launch"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 3, r.stderr
    assert "the pod is not initialised yet" in r.stderr and "hostfile" in r.stderr


def test_printed_torchrun_command_is_shell_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    rdir = str(tmp_path / "my results")
    code = runtime.verb_launch(
        {**ENV, "MLENV_POD_INDEX": "0", "HOME": str(tmp_path)},
        script=[],
        module=None,
        torchrun=True,
        deadline_s=1,
        profile=None,
        report_dir=rdir,
        run_id="r9",
    )
    out = capsys.readouterr()
    assert code == 0
    words = shlex.split(out.out.strip())
    assert words[words.index("--report-dir") + 1] == rdir
    node0 = shlex.split(out.err.split("equivalent torchrun for node 0: ")[1].splitlines()[0])
    assert node0[node0.index("--report-dir") + 1] == rdir


def test_torchrun_commands_are_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = runtime.verb_launch(
        {**ENV, "MLENV_POD_INDEX": "0", "HOME": str(tmp_path)},
        script=[],
        module=None,
        torchrun=True,
        deadline_s=1,
        profile="quick",
        report_dir=None,
        run_id="r7",
    )
    out = capsys.readouterr()
    assert code == 0
    assert "run-torchrun --run-id r7 --report-dir /workspace/results/r7 --profile quick" in out.out
    assert "--node-rank 0" in out.err


def test_options_after_double_dash_go_to_the_acceptance_suite() -> None:
    from mlenv.pod.__main__ import _parser

    script = (
        _parser()
        .parse_args(
            ["launch", "--profile", "quick", "--", "--checks", "compute", "--options", "o.json"]
        )
        .script
    )
    env = {"MLENV_HISTORY_DIR": "/h"}  # set: the ranks read it themselves, no flag
    job = runtime._job(env, script[1:], None, "/r", "quick")
    assert job.module and job.target == launch.ACCEPTANCE_MODULE and not job.local_rank_flag
    assert job.args == [
        "--report-dir",
        "/r",
        "--profile",
        "quick",
        "--checks",
        "compute",
        "--options",
        "o.json",
    ]
    user = runtime._job(env, ["train.py", "--steps", "2"], None, "/r", "quick")
    assert (user.target, user.args, user.module) == ("train.py", ["--steps", "2"], False)


def test_printed_torchrun_command_keeps_suite_options_after_double_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlenv.pod.__main__ import _parser

    code = runtime.verb_launch(
        {**ENV, "MLENV_POD_INDEX": "0", "HOME": str(tmp_path)},
        script=["--checks", "compute"],
        module=None,
        torchrun=True,
        deadline_s=1,
        profile=None,
        report_dir=None,
        run_id="r8",
    )
    printed = capsys.readouterr().out.split()
    assert code == 0 and printed[-3:] == ["--", "--checks", "compute"]
    # The printed command parses, and the options reach the suite in that pod.
    args = _parser().parse_args(printed[3:])
    assert args.verb == "run-torchrun" and args.script == ["--", "--checks", "compute"]


def test_a_pods_history_is_kept_beside_its_runs_where_sync_delete_leaves_it(tmp_path: Path) -> None:
    """Before, rank 0 wrote the history to reports/ in the exec's working directory:
    /workspace/reports in our image (sync --delete removed it: only results/ is kept) or
    /reports where the image's working directory is / (lost with the container; the kube
    tier's pods had it there). Now <workspace>/results/history, which sync neither copies
    nor deletes; a history kept at the old place is copied over once."""
    from mlenv.cluster import treehash

    ws = tmp_path / "workspace"
    old = ws / "reports" / "team-a" / "history.jsonl"
    old.parent.mkdir(parents=True)
    old.write_text('{"run_id": "20261128-000000-abcdef"}\n')
    env = {"MLENV_WORKSPACE": str(ws), "MLENV_CLUSTER": "team-a"}
    job = runtime._job(env, [], None, f"{ws}/results/r1", "quick", "20261128-000001-abcdef")
    assert job.args[job.args.index("--history-dir") + 1] == f"{ws}/results/history"
    moved = ws / "results" / "history" / "team-a" / "history.jsonl"
    assert moved.read_text() == old.read_text() and old.is_file()  # copied, the old one left
    moved.write_text(moved.read_text() + '{"run_id": "20261128-000001-abcdef"}\n')
    runtime.history_dir(env)  # once: a later run never copies over its own history
    assert len(moved.read_text().splitlines()) == 2
    assert treehash.protected("results/history/team-a/history.jsonl") and treehash.excluded(
        "results/history"
    )
    assert not treehash.protected("reports/team-a/history.jsonl")  # why the old place lost it
    # a cluster name that is no DNS label copies nothing (it could name a path)
    runtime.history_dir({"MLENV_WORKSPACE": str(ws), "MLENV_CLUSTER": "../team-a"})
    assert sorted(p.name for p in (ws / "results" / "history").iterdir()) == ["team-a"]
