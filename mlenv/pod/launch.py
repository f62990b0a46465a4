"""Command lines for the job: DeepSpeed over pdsh/ssh from pod-0, or torchrun in every pod.

Everything is built as an argument list (never a shell string); the launchers are run
as ``python -m …`` of this interpreter so PATH on the pod does not matter.

One shell is not ours to avoid: DeepSpeed's pdsh runner pastes the job into one command
line that every node's login shell runs (``cd CWD; python -u -m
deepspeed.launcher.launch … SCRIPT ARGS``), quoting only arguments that contain a space
(in double quotes, where ``$`` `` ` `` ``\\`` stay live) and nothing else; pdsh
itself replaces ``%h``/``%n``/``%u``. Quoting on our side would reach the script
verbatim whenever DeepSpeed launches locally instead, so words that the remote shell
would change are rejected (exit 2) before anything starts.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from mlenv import contract
from mlenv.contract import RESULTS_JSON, read_results
from mlenv.errors import EXIT_ERROR, EXIT_FAIL, EXIT_INPUT, EXIT_OK, InfraError, InputError
from mlenv.pod.ssh import NSS_VARS

ACCEPTANCE_MODULE = "mlenv.acceptance"


@dataclass(frozen=True)
class Job:
    """What every rank runs: a script path or a module, plus its arguments."""

    target: str
    args: list[str] = field(default_factory=list)
    module: bool = False
    # The acceptance suite reads LOCAL_RANK from the environment (it also runs under
    # torchrun, which passes no --local_rank); user scripts usually expect the flag.
    local_rank_flag: bool = True


_RUN_ID = re.compile(r"^[A-Za-z0-9._-]+$")
# What a word may hold to reach the remote command unchanged without quotes (the set
# DeepSpeed itself leaves unquoted in its exports).
_BARE = re.compile(r"^[\w@%+=:,./-]+$")
_PDSH_ESCAPES = re.compile(r"%[hnu%]")


def new_run_id() -> str:
    """A new run id in the one format of every platform (``mlenv.contract.new_run_id``)."""
    return contract.new_run_id()


def check_run_id(run_id: str) -> str:
    """``run_id`` when it is a plain name (``[A-Za-z0-9._-]+``), else InputError."""
    if not _RUN_ID.match(run_id) or run_id in (".", ".."):
        raise InputError(
            f"--run-id {run_id!r}: use letters, digits, '.', '_' and '-' only (it names a "
            "directory and travels through the remote shell)"
        )
    return run_id


def remote_word_problem(word: str, quoted_if_spaced: bool = True) -> str | None:
    """Why ``word`` would not reach the remote command intact under DeepSpeed's pdsh runner.

    ``quoted_if_spaced``: DeepSpeed double-quotes this word when it holds a space (true
    for the script's arguments, not for the script path or the working directory).
    Returns None when the word is safe.
    """
    if word == "":
        return "is empty, and the remote shell would drop it"
    if any(ord(c) < 32 or ord(c) == 127 for c in word):
        return "contains a control character (tab, newline, …)"
    if _PDSH_ESCAPES.search(word):
        return "contains %h, %n, %u or %%, which pdsh replaces on every node"
    if quoted_if_spaced and " " in word:
        live = sorted(set(word) & set("$`\\"))
        if live:
            return (
                f"contains {' '.join(live)} beside a space: DeepSpeed wraps such an argument in "
                "double quotes, where these still expand"
            )
        return None
    if not _BARE.match(word):
        odd = "".join(sorted({c for c in word if not _BARE.match(c)}))
        return f"contains {odd!r}, which the remote shell would interpret (DeepSpeed does not quote it)"
    return None


def check_remote_job(job: Job, cwd: str, python: str = sys.executable) -> None:
    """Raise InputError naming every word of ``job`` that the remote shell would change."""
    words: list[tuple[str, str, bool]] = [
        ("the working directory", cwd, False),
        ("the Python interpreter path", python, False),
        ("the module" if job.module else "the script path", job.target, False),
    ]
    for i, a in enumerate(job.args):
        prev = job.args[i - 1] if i else ""
        label = (
            f"the value of {prev}"
            if prev.startswith("-") and not a.startswith("-")
            else f"argument {i + 1}"
        )
        words.append((label, a, True))
    problems = [
        f"{what} {word!r} {why}"
        for what, word, quoted in words
        if (why := remote_word_problem(word, quoted)) is not None
    ]
    if problems:
        raise InputError(
            "the DeepSpeed launcher runs the job through a shell on every node and would change it:\n  "
            + "\n  ".join(problems)
            + "\n(rename or move the file, or pass such values in a file, e.g. the suite's --options FILE)"
        )


def require_tools(env: Mapping[str, str], tools: Sequence[str] = ("pdsh", "ssh")) -> None:
    """InfraError unless every launcher tool is on the job's PATH.

    The DeepSpeed runner only says ``launcher 'pdsh' not installed`` and exits 1, which
    the contract would read as an acceptance FAIL.
    """
    path = env.get("PATH", os.defpath)
    missing = [t for t in tools if shutil.which(t, path=path) is None]
    if missing:
        raise InfraError(
            f"{' and '.join(missing)} not found on PATH ({path}): the DeepSpeed multi-node launcher "
            "needs pdsh and the ssh client in the image (openssh-client, pdsh); on clusters without "
            "them use the ssh-less path, 'launch --torchrun'"
        )


def acceptance_job(
    report_dir: str,
    profile: str | None,
    extra: list[str],
    run_id: str | None = None,
    history_dir: str | None = None,
) -> Job:
    """The default job: the acceptance suite writing its reports to ``report_dir``; with
    ``run_id`` the suite's results.json carries the folder's run id, with ``history_dir``
    rank 0 keeps the cluster's history there."""
    args = [
        "--report-dir",
        report_dir,
        *(["--run-id", run_id] if run_id else []),
        *(["--history-dir", history_dir] if history_dir else []),
    ]
    if profile:
        args += ["--profile", profile]
    return Job(ACCEPTANCE_MODULE, args + extra, module=True, local_rank_flag=False)


def deepspeed_argv(
    job: Job,
    hostfile: str,
    master_addr: str,
    master_port: int,
    ssh_port: int,
    python: str = sys.executable,
    user: str | None = None,
) -> list[str]:
    """The DeepSpeed launcher command for ``job`` over every host of ``hostfile``.

    ``--no_ssh_check``: our preflight already proved every sshd answers, and the
    launcher's own check ignores our ssh client config. ``user``: the login name pdsh
    uses on every node (``-l``), the same one each pod's sshd admits.
    """
    argv = [
        python,
        "-u",
        "-m",
        "deepspeed.launcher.runner",
        "--hostfile",
        hostfile,
        "--launcher",
        "pdsh",
        "--master_addr",
        master_addr,
        "--master_port",
        str(master_port),
        "--ssh_port",
        str(ssh_port),
        "--no_ssh_check",
    ]
    if user:
        argv += ["--launcher_args", f"-l {user}"]
    if job.module:
        argv.append("--module")
    if not job.local_rank_flag:
        argv.append("--no_local_rank")
    return argv + [job.target, *job.args]


def deepspeed_env(
    base: Mapping[str, str],
    ssh_client_config: str,
    ds_env_file: str | None = None,
    node_vars: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The launcher's environment.

    - pdsh's ssh gets our client config via ``-F`` (ssh reads ``~/.ssh`` from the passwd
      home, which a random UID may not have); pdsh splits PDSH_SSH_ARGS_APPEND on blanks
      with no quoting, so a path with whitespace is InputError. The launcher appends
      ``-p <port>`` itself.
    - ``DS_ENV_FILE``: the absolute path of the ``.deepspeed_env`` written for this
      launch. DeepSpeed otherwise reads only ``~/.deepspeed_env`` and
      ``./.deepspeed_env``, and ``pod init`` writes under ``$TMPDIR`` when HOME is not
      writable.
    - this pod's nss_wrapper variables from ``node_vars`` (pdsh and ssh refuse a UID
      they cannot look up), and no NCCL_IB_HCA when it is per pod: the launcher would
      export pod-0's value (CUDA accelerator: every ``NCCL*``) over each pod's own.
    """
    if re.search(r"\s", ssh_client_config):
        raise InputError(
            f"{ssh_client_config}: pdsh passes '-F <path>' to ssh split on blanks, so the state "
            "directory (MLENV_STATE_DIR, else $HOME/.mlenv) must not contain whitespace"
        )
    node = dict(node_vars or {})
    env = dict(base)
    env.update({k: v for k, v in node.items() if k in NSS_VARS})
    for k in node:
        if k.startswith("NCCL_"):  # per pod (HCA discovery.7's interface filter)
            env.pop(k, None)
    extra = f"-F {ssh_client_config}"
    env["PDSH_SSH_ARGS_APPEND"] = f"{env.get('PDSH_SSH_ARGS_APPEND', '')} {extra}".strip()
    env["PDSH_RCMD_TYPE"] = "ssh"
    if ds_env_file:
        env["DS_ENV_FILE"] = os.path.abspath(ds_env_file)
    return env


def torchrun_argv(
    job: Job,
    nnodes: int,
    node_rank: int,
    nproc_per_node: int,
    master_addr: str,
    master_port: int,
    python: str = sys.executable,
) -> list[str]:
    """The torchrun command one pod runs (static rendezvous at MASTER_ADDR:MASTER_PORT)."""
    argv = [
        python,
        "-u",
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nnodes),
        "--node-rank",
        str(node_rank),
        "--nproc-per-node",
        str(nproc_per_node),
        "--master-addr",
        master_addr,
        "--master-port",
        str(master_port),
    ]
    if job.module:
        argv.append("-m")
    return argv + [job.target, *job.args]


def map_exit(rc: int, acceptance: bool, verdict: str | None = None) -> tuple[int, str]:
    """The job's exit status mapped to the contract, with a note for anything unusual.

    A signal or an unknown status is ERROR (3), never FAIL. DeepSpeed's runner (and
    torchrun, for any failed rank) exits 1 on its own errors too (pdsh missing, a bad
    hostfile, a crashed rank), so 1 means FAIL only for the acceptance suite and only
    when this run's ``results.json`` says FAIL (``verdict``). A user script's 0 and 2
    (bad input, as ``workspace/train_multi_node.py`` reports it) pass through; any
    other status is ERROR: only the acceptance suite can judge the cluster.
    """
    if rc == EXIT_OK:
        return EXIT_OK, ""
    if rc < 0:
        return EXIT_ERROR, f"the job was killed by signal {-rc}"
    if acceptance:
        if verdict == "FAIL":
            return EXIT_FAIL, ""
        if rc == EXIT_INPUT and verdict is None:
            return EXIT_INPUT, ""
        if rc == EXIT_ERROR or verdict == "ERROR":
            return EXIT_ERROR, ""
        what = f"verdict {verdict}" if verdict else "no results.json from this run"
        return (
            EXIT_ERROR,
            f"the job exited with status {rc} and {what}: ERROR (crash or launcher failure)",
        )
    if rc == EXIT_INPUT:
        return EXIT_INPUT, ""
    return (
        EXIT_ERROR,
        f"the job exited with status {rc}: ERROR (a user script's failure is never a FAIL verdict)",
    )


# pdsh's line when ssh to a host fails or the connection drops (ssh's own exit 255; a
# rank's non-zero exit shows its own code and is the job's business, not a lost peer).
_PDSH_LOST = re.compile(r"pdsh@[^:\s]+: ([^:\s]+): ssh exited with exit code 255")


class PeerLost(InfraError):
    """A peer's ssh connection failed mid-launch and the job did not end (exit 3)."""


# How long a job may go on after pdsh lost a host before the launch is stopped: the
# acceptance suite's rank 0 notices a dead rank by its heartbeat (15 s) and writes an
# ERROR report naming it, which must not be cut short; a user script that would wait for
# the lost rank forever is stopped after this.
LOST_GRACE_ENV = "MLENV_PEER_LOST_GRACE_S"
LOST_GRACE_S = 60.0


def run(
    argv: list[str],
    env: Mapping[str, str],
    *,
    out: TextIO | None = None,
    lost_grace_s: float | None = None,
    verdict_in: tuple[str, float] | None = None,
    after_verdict_grace_s: float | None = None,
) -> int:
    """Run ``argv`` in its own process group, its output passed through line by line;
    returns its exit status.

    when pdsh reports that ssh to a host exited 255 (host down, sshd frozen — the
    ssh client config's ServerAlive probes notice within ~30 s — or unreachable), the
    ranks elsewhere would wait for it in their first collective for torch's 30-minute
    default. The job gets ``lost_grace_s`` (``MLENV_PEER_LOST_GRACE_S``, default 60) to
    end by itself — the acceptance suite writes its ERROR report naming the dead rank in
    that time — then its whole group is stopped and PeerLost names the host.

    ``verdict_in`` (the report folder and the run's start, for the acceptance suite): once
    rank 0 has written this run's ``results.json``, the job gets ``after_verdict_grace_s``
    (``MLENV_AFTER_VERDICT_GRACE_S``, default 60) to end; a rank that does not (stopped,
    or hung in a collective on another node, which the verdict has just named) would
    otherwise keep the launch waiting for ever: its whole group is then stopped (DeepSpeed's
    runner stops every node's ranks on that signal) and the verdict's exit code returned.
    """
    sink = out or sys.stdout
    grace = (
        lost_grace_s if lost_grace_s is not None else float(env.get(LOST_GRACE_ENV) or LOST_GRACE_S)
    )
    after = (
        after_verdict_grace_s
        if after_verdict_grace_s is not None
        else contract.after_verdict_grace_s(env)
    )
    proc = subprocess.Popen(
        argv,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="mlenv-launch-output", daemon=True).start()
    lost, stop_at = "", math.inf
    watch = _AfterVerdict(verdict_in, after)
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, min(stop_at - time.monotonic(), 1.0)))
            except queue.Empty:
                line = ""
            if line is None:
                return proc.wait()
            if line:
                sink.write(line)
                sink.flush()
                m = _PDSH_LOST.search(line)
                if m and not lost:
                    lost, stop_at = m.group(1), time.monotonic() + grace
                    sink.write(
                        f"mlenv: lost {lost} (ssh exited 255); stopping the launch in "
                        f"{grace:g} s unless the job ends first\n"
                    )
                    sink.flush()
            # Judged after every line too, not only when the job is quiet: a job that
            # keeps printing (a rank's warnings each second) must not hold the stop off.
            now = time.monotonic()
            if watch.due(now):
                sink.write(
                    f"mlenv: rank 0 wrote the verdict ({watch.verdict}) {after:g} s ago and the "
                    "job has not ended (a rank stopped or hung, on this node or another): "
                    "stopping it on every node\n"
                )
                sink.flush()
                _stop_group(proc, signal.SIGTERM)
                return contract.exit_for_verdict(watch.verdict)
            if now >= stop_at:
                _stop_group(proc, signal.SIGTERM)
                raise PeerLost(
                    f"launch stopped: lost {lost} (ssh to it exited 255: the host is "
                    "down, its sshd frozen, or the network to it broke) and the job had "
                    f"not ended {grace:g} s later; the ranks on the other hosts were "
                    "stopped instead of waiting for it"
                ) from None
    except KeyboardInterrupt:
        # The launcher's own SIGINT handler stops the remote ranks; give it time to.
        _stop_group(proc, signal.SIGINT)
        return proc.wait()


class _AfterVerdict:
    """Whether this run's verdict is written (``results.json`` in ``where``, the report folder
    and the run's start; read at most once a second) and the job has outlived ``grace_s`` after it."""

    def __init__(self, where: tuple[str, float] | None, grace_s: float) -> None:
        self.where, self.grace_s = where, grace_s
        self.verdict: str | None = None
        self.stop_at, self._next_look = math.inf, 0.0

    def due(self, now: float) -> bool:
        if self.where is not None and self.verdict is None and now >= self._next_look:
            self._next_look = now + 1.0
            self.verdict = fresh_verdict(*self.where)
            if self.verdict is not None:
                self.stop_at = now + self.grace_s
        return now >= self.stop_at


def _stop_group(proc: subprocess.Popen[str], sig: int, grace_s: float = 15.0) -> None:
    """Signal the launcher's process group, then kill it if it outlives ``grace_s``."""
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def fresh_verdict(report_dir: str, since: float) -> str | None:
    """``verdict`` of ``report_dir/results.json`` when this run wrote it (modified at or after ``since``)."""
    doc = read_results(report_dir, since)
    v = doc.get("verdict") if doc else None
    return v if isinstance(v, str) else None


def results_summary(report_dir: str) -> str | None:
    """``verdict`` and reasons from ``report_dir/results.json`` when the job wrote one."""
    doc = read_results(report_dir)
    if doc is None:
        return None
    path = os.path.join(report_dir, RESULTS_JSON)
    raw = doc.get("reasons")
    reasons = "; ".join(str(r) for r in (raw if isinstance(raw, list) else [])[:5])
    return f"verdict {doc.get('verdict')} ({path})" + (f": {reasons}" if reasons else "")
