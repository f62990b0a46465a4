"""every value that reaches sbatch/scontrol/scancel/ssh goes through mlenv.argv,
validated per kind, positionals after '--'; plus the parsers of Slurm's output."""

from __future__ import annotations

import shlex

import pytest

from mlenv import argv
from mlenv.platforms.slurm import _reason, describe, parse_record

OPTION_SHAPED = [
    "-p",
    "--partition=x",
    "--export=ALL,LD_PRELOAD=/tmp/x.so",
    "-oProxyCommand=id",
    "--",
    "-",
]
METACHAR = [
    "a b",
    "a;id",
    "$(id)",
    "`id`",
    "a\nb",
    "a|b",
    "a&b",
    "a>b",
    "x'y",
    'x"y',
    "",
    "é",
    "a\x00b",
]


def test_slurm_command_shape() -> None:
    assert argv.slurm("scancel", [], ["123"]) == ["scancel", "--", "123"]
    assert argv.slurm("sinfo", ["--noheader"]) == ["sinfo", "--noheader"]
    assert argv.slurm("sbatch", ["--parsable"], ["/s/a.sbatch", "--checks", "x"]) == [
        "sbatch",
        "--parsable",
        "--",
        "/s/a.sbatch",
        "--checks",
        "x",
    ]
    with pytest.raises(ValueError):
        argv.slurm("rm", [], ["-rf"])
    with pytest.raises(ValueError):
        argv.slurm("sbatch", ["job.sh"])  # a positional where options go


@pytest.mark.parametrize("value", OPTION_SHAPED + METACHAR + ["x" * 65])
def test_slurm_names_refuse_option_shapes_and_metacharacters(value: str) -> None:
    with pytest.raises(argv.UnsafeArgument):
        argv.slurm_name(value)


@pytest.mark.parametrize("value", OPTION_SHAPED + METACHAR + ["12a", "1 2", "-1", "99999999999999"])
def test_job_id_is_digits(value: str) -> None:
    with pytest.raises(argv.UnsafeArgument):
        argv.job_id(value)


def test_job_id_and_names_accept_real_values() -> None:
    assert argv.job_id("4711") == "4711" and argv.job_id(12) == "12"
    assert argv.slurm_name("gpu-h100_a.1") == "gpu-h100_a.1"
    assert (
        argv.slurm_node("ml-dev-env-0") == "ml-dev-env-0"
        and argv.slurm_node("10.0.0.12") == "10.0.0.12"
    )


@pytest.mark.parametrize("value", OPTION_SHAPED + METACHAR)
def test_ssh_host_user_key_are_checked(value: str) -> None:
    with pytest.raises(argv.UnsafeArgument):
        argv.ssh(value, ["true"])
    with pytest.raises(argv.UnsafeArgument):
        argv.ssh("host-a", ["true"], user=value or "-")
    if value.startswith("-") or any(ord(c) < 32 for c in value):
        with pytest.raises(argv.UnsafeArgument):
            argv.ssh("host-a", ["true"], key=value or "-")


def test_ssh_remote_words_stay_one_word_each_on_the_remote_shell() -> None:
    words = ["python3", "-c", "print('a b'); import os", "$(id)", "K=v w"]
    cmd = argv.ssh(
        "gpu-a", words, user="ml", port=2200, key="/k/id", options=["-oBatchMode=yes"], config="/c"
    )
    assert cmd[: cmd.index("--")] == [
        "ssh",
        "-oBatchMode=yes",
        "-p",
        "2200",
        "-F",
        "/c",
        "-l",
        "ml",
        "-i",
        "/k/id",
    ]
    host, *remote = cmd[cmd.index("--") + 1 :]
    assert host == "gpu-a"
    # ssh joins the remote words with spaces; the remote shell splits them back exactly
    assert shlex.split(" ".join(remote)) == words
    with pytest.raises(argv.UnsafeArgument):
        argv.ssh("gpu-a", ["true"], port=0)


def test_parse_scontrol_records() -> None:
    rec = parse_record(
        "JobId=7 JobName=mlenv-acceptance-x JobState=NODE_FAIL Reason=NodeDown Dependency=(null) "
        "NodeList=ml-dev-env-[0-1] StdOut=/shared/results/a b.out ExitCode=0:0"
    )
    assert rec["JobState"] == "NODE_FAIL" and rec["NodeList"] == "ml-dev-env-[0-1]"
    assert rec["StdOut"] == "/shared/results/a b.out" and rec["ExitCode"] == "0:0"
    node = parse_record(
        "NodeName=n1 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason=bad DIMM [root@2026-11-23T23:57:12]"
    )
    assert _reason(node["Reason"]) == "bad DIMM"


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ("IDLE+DRAIN", "drained"),
        ("MIXED+DRAIN", "draining"),
        ("DOWN*", "down and not responding"),
        ("IDLE*", "not responding"),
        ("DOWN+NOT_RESPONDING", "down and not responding"),
        ("IDLE", "idle"),
    ],
)
def test_node_states_in_words(state: str, words: str) -> None:
    assert describe(state) == words
