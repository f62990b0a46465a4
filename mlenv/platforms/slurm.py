"""``platform: slurm``: submit the rendered batch script, follow the job, judge, copy reports.

Only the real Slurm clients are used (``sbatch``, ``squeue``, ``scontrol``, ``scancel``,
``sinfo``; ``sacct`` when accounting exists), each argv from :func:`mlenv.argv.slurm`.
A job that Slurm ends (time limit, node failure, preemption, cancel) is ERROR naming the
node(s), never PASS, whatever rank 0 managed to write; what the ranks measured before is
kept (``results.jsonl`` → the report). A drained node is not a failure (Slurm lets running
jobs finish); a node that goes down is, and mlenv cancels the job then, judging once
Slurm has ended it. mlenv's own limit counts from the job's start, not its submission.

State: ``.mlenv/slurm/<cluster>.json`` under the repository root records the last
submission (job id, run id, report folder) for ``status``/``logs``/``teardown``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlenv import argv, contract
from mlenv.config.model import Cluster
from mlenv.contract import RESULTS_JSONL, read_results
from mlenv.errors import InfraError, InputError
from mlenv.platforms.nodeprobe import ClientTimeout, partition_words, refusal

Say = Callable[[str], None]

ACTIVE = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
    "STOPPED",
}
# Terminal states in which Slurm, not the suite, ended the job.
KILLED = {
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "CANCELLED",
}
BAD_NODE = re.compile(r"DOWN|DRAIN|FAIL|NOT_RESPONDING|UNKNOWN|\*")
# Slurm's field names hold ':' and '/' too (CPUs/Task, ReqB:S:C:T, AllocNode:Sid)
_KV = re.compile(r"([A-Za-z][\w:/]*)=(.*?)(?= [A-Za-z][\w:/]*=|$)")
# In ``scontrol show job`` (not -o) these have a line each and take all of it: free text
# (a --comment of 'Key=value' words) or paths with spaces must not read as further fields.
_WHOLE_LINE = re.compile(
    r"(AdminComment|Comment|SystemComment|Command|WorkDir|StdErr|StdIn|StdOut)=(.*)"
)
# mlenv's own limit past slurm.time_limit, from the job's start: Slurm's KillWait and epilog
# end a job over its limit first, and that is judged as Slurm's TIMEOUT.
STARTUP_SLACK_S = 180.0


def _run(words: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            words,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise InfraError(
            f"{words[0]}: not found; is this a Slurm login node (slurm-client installed, "
            "SLURM_CONF or /etc/slurm/slurm.conf set)?"
        ) from None
    except subprocess.TimeoutExpired:
        raise ClientTimeout(
            f"{words[0]} did not answer within {timeout:g} s (slurmctld unreachable?)"
        ) from None


def _check(r: subprocess.CompletedProcess[str]) -> str:
    if r.returncode != 0:
        raise InfraError(
            f"{r.args[0]} failed (exit {r.returncode}): {refusal(r.stderr or r.stdout)}"
            f"{client_hint(r.stderr or r.stdout)}"
        )
    return r.stdout


def client_hint(text: str) -> str:
    """What to do about a Slurm client that could not reach or configure itself ('' if none)."""
    if re.search(r"configuration source|slurm\.conf|SLURM_CONF", text):
        return " (no Slurm configuration here: run on a login node, or set SLURM_CONF to the cluster's slurm.conf)"
    if re.search(
        r"Unable to contact slurm controller|Unable to establish controller|Connection refused|"
        r"Socket timed out",
        text,
        re.IGNORECASE,
    ):
        return " (slurmctld does not answer from this machine: check `scontrol ping` and the login node's network)"
    if "fatal" in text:
        return " (the Slurm client stopped before asking the controller: check SLURM_CONF and `scontrol ping`)"
    return ""


def parse_record(line: str) -> dict[str, str]:
    """One ``scontrol -o`` record (``Key=value Key=value with spaces …``) as a dict."""
    return {m.group(1): m.group(2) for m in _KV.finditer(line.strip())}


def parse_show(text: str) -> dict[str, str]:
    """The first record of ``scontrol show job`` (several lines, not -o) as a dict: the
    free-text fields (:data:`_WHOLE_LINE`) are their whole line, the others as in -o."""
    rec: dict[str, str] = {}
    for line in text.strip().split("\n\n")[0].splitlines():
        whole = _WHOLE_LINE.fullmatch(line.strip())
        if whole:
            rec[whole.group(1)] = whole.group(2).rstrip()
        else:
            rec.update(parse_record(line))
    return rec


# --- where a config value is written (for located exit-2 errors) -----------------------


def where(cluster: Cluster, *path: str) -> str:
    """``file:line:col: dotted.path`` of a key of ``cluster``'s config (the file if unknown)."""
    from mlenv.config.yamlpos import parse

    dotted = ".".join(path)
    if cluster.source is None:
        return dotted
    try:
        pos = parse(Path(cluster.source).read_bytes(), str(cluster.source)).pos(path)
        return f"{cluster.source}:{pos.line}:{pos.col}: {dotted}"
    except OSError:
        return f"{cluster.source}: {dotted}"


# --- reading the cluster ---------------------------------------------------------------


def hostnames(nodelist: str) -> list[str]:
    """``ml-dev-env-[0-1]`` → the host names (``scontrol show hostnames``)."""
    if not nodelist or nodelist in ("(null)", "None"):
        return []
    if not re.fullmatch(r"[A-Za-z0-9_.,\[\]-]+", nodelist):
        raise InfraError(f"unexpected node list from Slurm: {nodelist!r}")
    out = _check(_run(argv.slurm("scontrol", [], ["show", "hostnames", nodelist])))
    return [h for h in out.split() if h]


def nodes_info(names: list[str]) -> dict[str, dict[str, str]]:
    """``scontrol show node`` records of ``names`` (validated), by name."""
    if not names:
        return {}
    r = _run(
        argv.slurm(
            "scontrol",
            ["--oneliner"],
            ["show", "node", ",".join(argv.slurm_node(n) for n in names)],
        )
    )
    out = {}
    for line in r.stdout.splitlines():
        rec = parse_record(line)
        if "NodeName" in rec:
            out[rec["NodeName"]] = rec
    return out


def partition_nodes(cluster: Cluster) -> dict[str, tuple[str, str]]:
    """Every node of the config's partition(s) (a comma list is the union): name → (state,
    reason). InputError (exit 2, located at ``slurm.partition``) when a partition does not exist."""
    names: list[str] = []
    if not cluster.slurm.partition:
        # no partition: Slurm's default one, or the site's choice from QOS/constraint/account;
        # only the listed nodes (if any) can be checked
        names = list(cluster.gpu_nodes)
    for part in partitions(cluster):
        r = _run(argv.slurm("scontrol", ["--oneliner"], ["show", "partition", part]))
        if r.returncode != 0 or "PartitionName=" not in r.stdout:
            known = _run(argv.slurm("sinfo", ["--noheader", "--format=%R"]))
            parts = sorted(set(known.stdout.split())) if known.returncode == 0 else []
            if known.returncode != 0 and not parts:
                _check(r)  # the controller itself is unreachable: exit 3, not a config error
            raise InputError(
                f"{where(cluster, 'slurm', 'partition')}: partition {part!r} does not exist on "
                "this Slurm cluster" + (f" (partitions: {', '.join(parts)})" if parts else "")
            )
        rec = parse_record(r.stdout.splitlines()[0])
        names += [n for n in hostnames(rec.get("Nodes", "")) if n not in names]
    info = nodes_info(names)
    return {
        n: (info.get(n, {}).get("State", "UNKNOWN"), info.get(n, {}).get("Reason", ""))
        for n in names
    }


def partitions(cluster: Cluster) -> list[str]:
    """The partitions ``slurm.partition`` names ([] when none is set)."""
    p = cluster.slurm.partition
    return argv.slurm_partitions(p).split(",") if p else []


def without_probe(cluster: Cluster) -> Cluster:
    """``cluster`` with the import probe off (``--skip-probe``, as ``slurm.import_probe:
    false``); InputError off Slurm, where there is no such probe to skip."""
    import dataclasses

    if cluster.platform != "slurm":
        raise InputError(
            f"--skip-probe: the one-node import probe is Slurm's; platform {cluster.platform} "
            "has none to skip"
        )
    return dataclasses.replace(
        cluster, slurm=dataclasses.replace(cluster.slurm, import_probe=False)
    )


def preflight(cluster: Cluster, nodes: int, say: Say) -> list[str]:
    """Before submitting: the partition exists, and the nodes the job needs are usable.

    Returns the nodes that will be asked for (``--nodelist``) or the usable ones.
    Raises InputError (unknown partition, exit 2) or InfraError (drained/down nodes, exit 3),
    naming each node and its reason.
    """
    states = partition_nodes(cluster)
    wanted = list(cluster.gpu_nodes[:nodes]) if cluster.gpu_nodes else list(states)
    missing = [n for n in wanted if n not in states]
    if missing:
        raise InputError(
            f"{where(cluster, 'nodes', 'gpu_nodes')}: node(s) {', '.join(missing)} are not in "
            f"{partition_words(cluster)}"
            + (f" ({', '.join(states) or 'no nodes'})" if cluster.slurm.partition else "")
        )
    bad = {n: states[n] for n in wanted if BAD_NODE.search(states[n][0])}
    usable = [n for n in wanted if n not in bad]
    if bad and (cluster.gpu_nodes or len(usable) < nodes):
        lines = [
            f"{n} is {describe(s)}" + (f" ({_reason(why)})" if _reason(why) else "")
            for n, (s, why) in bad.items()
        ]
        raise InfraError(
            f"preflight: {'; '.join(lines)}: the job needs {nodes} node(s) of "
            f"{partition_words(cluster)} and was not submitted (resume with: scontrol update "
            f"NodeName=NODE State=RESUME)"
        )
    if cluster.gpu_nodes and cluster.slurm.constraint:
        _constraint_preflight(cluster, wanted)
    for n in wanted:
        say(f"preflight: node {n}: {states[n][0].lower()}")
    probe_imports(cluster, say)
    return usable


def probe_imports(cluster: Cluster, say: Say) -> None:
    """one node's python imports what the job needs (torch, mlenv, DeepSpeed),
    or preflight stops with the missing module and the fix (``mlenv stage``), exit 3.

    Not while no listed partition is UP: sbatch queues a job there (it pends,
    PartitionDown) and runs it once an admin brings the partition up, but the probe's srun
    would wait out its 60 s and then fail or skip; found when a CI run held the pending
    test's submission past its wait."""
    from mlenv.platforms import nodeprobe

    if not cluster.slurm.import_probe:
        say(
            "preflight: the import probe is off (slurm.import_probe: false); the job finds a "
            "missing module itself"
        )
        return
    states = {}
    for part in partitions(cluster):
        r = _run(argv.slurm("scontrol", ["--oneliner"], ["show", "partition", part]))
        if r.returncode == 0 and "PartitionName=" in r.stdout:
            states[part] = parse_record(r.stdout.splitlines()[0]).get("State", "UNKNOWN")
    if states and all(st != "UP" for st in states.values()):
        say(
            f"preflight: partition {', '.join(f'{p} is {st}' for p, st in states.items())}: the job will "
            "pend until it is up; the import probe is skipped (the job finds out itself)"
        )
        return
    nodeprobe.slurm_check(cluster, say, _run, srun_options(cluster, 0))


def satisfies(expr: str, features: set[str]) -> bool | None:
    """Whether a node with ``features`` meets the ``--constraint`` expression on its own:
    ``&``/``,`` and ``|`` from left to right as Slurm reads them, ``[...]``/``(...)`` as
    groups. None when the expression counts nodes (``a100*2``): one node cannot say."""
    tokens = argv.constraint_tokens(expr)
    if any("*" in t for t in tokens):
        return None
    pos = 0

    def group() -> bool:
        nonlocal pos
        value: bool | None = None
        op = "&"
        while pos < len(tokens):
            t = tokens[pos]
            pos += 1
            if t in "])":
                break
            if t in "&|,":
                op = "|" if t == "|" else "&"
                continue
            term = group() if t in "[(" else t in features
            value = term if value is None else (value or term) if op == "|" else (value and term)
        return bool(value)

    return group()


def _constraint_preflight(cluster: Cluster, wanted: list[str]) -> None:
    """``nodes.gpu_nodes`` against ``slurm.constraint``: a listed node without the features
    is named with what it has (exit 2), where sbatch would only say "Invalid feature
    specification" or "Requested node configuration is not available"."""
    expr = cluster.slurm.constraint
    misses = []
    for n, rec in nodes_info(wanted).items():
        have = {
            f for f in re.split(r"[,\s]+", rec.get("AvailableFeatures", "")) if f and f != "(null)"
        }
        if satisfies(expr, have) is False:
            misses.append(f"{n} (features: {', '.join(sorted(have)) or 'none'})")
    if misses:
        raise InputError(
            f"{where(cluster, 'nodes', 'gpu_nodes')}: node(s) {'; '.join(misses)} do not meet "
            f"slurm.constraint {expr!r}: sbatch would refuse the job (drop them from "
            "nodes.gpu_nodes or change the constraint)"
        )


def describe(state: str) -> str:
    """A node state in words: ``IDLE+DRAIN`` → drained, ``DOWN*`` → down, ``IDLE*`` → not responding."""
    s = state.upper()
    words = []
    if "DOWN" in s:
        words.append("down")
    if "DRAIN" in s:
        words.append("draining" if ("ALLOC" in s or "MIX" in s) else "drained")
    if "FAIL" in s:
        words.append("failing")
    if "NOT_RESPONDING" in s or s.endswith("*"):
        words.append("not responding")
    return " and ".join(words) or state.lower()


def _reason(why: str) -> str:
    """A node's Reason without Slurm's ``[user@time]`` suffix."""
    return (
        re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", why or "").strip()
        if why not in (None, "(null)")
        else ""
    )


# --- submit, follow, judge -------------------------------------------------------------


@dataclass(frozen=True)
class Submission:
    """What ``deploy``/``acceptance`` submitted (recorded in ``.mlenv/slurm/<cluster>.json``)."""

    cluster: str
    job_id: str
    run_id: str
    report_dir: str
    script: str
    submitted: float


def state_file(root: Path, cluster: Cluster) -> Path:
    return root / ".mlenv" / "slurm" / f"{cluster.name}.json"


def last_submission(root: Path, cluster: Cluster) -> Submission:
    """The recorded submission; InputError when there is none."""
    f = state_file(root, cluster)
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
        sub = Submission(**d)
        argv.job_id(sub.job_id)
        return sub
    except FileNotFoundError:
        raise InputError(
            f"no Slurm job recorded for {cluster.name} (run: mlenv deploy {cluster.name})"
        ) from None
    except (OSError, ValueError, TypeError, argv.UnsafeArgument) as e:
        raise InputError(
            f"{f}: unreadable job record ({e}); run mlenv deploy {cluster.name} again"
        ) from None


def new_run_id() -> str:
    """The one run-id format of every platform (``mlenv.contract.new_run_id``)."""
    return contract.new_run_id()


def submit(
    cluster: Cluster,
    root: Path,
    say: Say,
    *,
    nodes: int | None = None,
    profile: str = "quick",
    suite_args: list[str] | None = None,
    run_id: str | None = None,
    sbatch_options: list[str] | None = None,
    check_nodes: bool = True,
) -> Submission:
    """Preflight, render, ``sbatch`` the acceptance script; the job id is recorded.

    ``sbatch_options``: the code's own options after the script's (``mlenv recheck``: its
    reservation and node, which win over the script's ``#SBATCH`` lines). ``check_nodes``
    False: the caller has chosen and checked the node itself (a re-check's node is
    reserved for it), so the partition preflight and its import probe on some node of the
    partition are skipped."""
    from mlenv.render.platforms import node_count, render_slurm

    n = node_count(cluster, nodes)
    rid = run_id or new_run_id()
    argv.slurm_name(rid, "run id")
    argv.slurm_name(profile, "profile")
    if check_nodes:
        preflight(cluster, n, say)
    shared = Path(cluster.slurm.shared_dir)
    jobs = shared / ".mlenv" / "jobs" / rid
    try:
        (shared / "results").mkdir(parents=True, exist_ok=True)
        jobs.mkdir(parents=True, exist_ok=True)
        script = jobs / "acceptance.sbatch"
        script.write_text(render_slurm(cluster, nodes)["acceptance.sbatch"], encoding="utf-8")
    except OSError as e:
        raise InfraError(
            f"slurm.shared_dir {shared}: {e.strerror or e} (it must be a filesystem this "
            "machine and every node see)"
        ) from None
    words = argv.slurm(
        "sbatch",
        [
            "--parsable",
            f"--export=ALL,MLENV_RUN_ID={rid},MLENV_PROFILE={profile}",
            *(sbatch_options or []),
        ],
        [str(script), *(suite_args or [])],
    )
    out = _check(_run(words, timeout=60)).strip()
    job = argv.job_id(out.split(";")[0])
    sub = Submission(
        cluster.name, job, rid, str(shared / "results" / rid), str(script), time.time()
    )
    f = state_file(root, cluster)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(asdict(sub), indent=2) + "\n", encoding="utf-8")
    say(
        f"submitted job {job} to {partition_words(cluster)} ({n} node(s) x {cluster.gpus.per_node} "
        f"rank(s)), run {rid}; reports: {sub.report_dir}"
    )
    return sub


def job_info(job: str) -> dict[str, str] | None:
    """The job's ``scontrol show job`` record; then ``sacct``'s; None when Slurm forgot it."""
    r = _run(argv.slurm("scontrol", [], ["show", "job", argv.job_id(job)]))
    if r.returncode == 0 and "JobState=" in r.stdout:
        return parse_show(r.stdout)
    acct = _run(
        argv.slurm(
            "sacct",
            [
                "--noheader",
                "--parsable2",
                f"--jobs={argv.job_id(job)}",
                "--format=JobID,State,ExitCode,NodeList,Reason",
            ],
        )
    )
    for line in acct.stdout.splitlines() if acct.returncode == 0 else []:
        parts = line.split("|")
        if len(parts) >= 4 and parts[0] == job:
            return {
                "JobId": job,
                "JobState": parts[1].split()[0],
                "ExitCode": parts[2],
                "NodeList": parts[3],
                "Reason": parts[4] if len(parts) > 4 else "",
            }
    return None


def _state(info: dict[str, str] | None) -> str:
    return (info or {}).get("JobState", "UNKNOWN").split()[0]


def _node_words(name: str, rec: dict[str, str]) -> str:
    why = _reason(rec.get("Reason", ""))
    return f"{name} ({describe(rec.get('State', ''))}" + (f": {why}" if why else "") + ")"


# A node that is down, failing or not responding loses the job's ranks there; a drain
# alone lets running jobs finish (Slurm only starts nothing new on the node).
GONE_NODE = re.compile(r"DOWN|FAIL|NOT_RESPONDING|UNKNOWN|\*")
# Polling: `scontrol show job` every POLL_RUNNING_S while the job runs (the nodes every
# other poll), every POLL_PENDING_S while it waits; one run asked twice a second before.
POLL_RUNNING_S = 2.0
POLL_PENDING_S = 5.0
# After mlenv's own scancel: how long to wait for Slurm to end the job (KillWait, epilog)
# before judging; rank 0 may still write until then, and the copy must come after it.
CANCEL_WAIT_S = 180.0


class SlurmReader:
    """The Slurm reads and the one write (scancel) :func:`follow` makes, and its clock:
    the real clients here; tests give a scripted fake with a fake clock."""

    def job(self, job: str) -> dict[str, str] | None:
        return job_info(job)

    def nodes(self, names: list[str]) -> dict[str, dict[str, str]]:
        return nodes_info(names)

    def hostnames(self, nodelist: str) -> list[str]:
        return hostnames(nodelist)

    def cancel(self, job: str) -> None:
        cancel(job)

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass
class Outcome:
    """How the job ended, as :func:`follow` saw it: ``state`` is Slurm's own final state;
    ``cancelled`` says why mlenv cancelled it ('' when it did not)."""

    state: str
    info: dict[str, str]
    failed_nodes: list[str]
    waited_s: float
    cancelled: str = ""


@dataclass
class _Watch:
    """What :func:`follow` has seen of the job so far."""

    nodes: list[str]
    said: tuple[str, str] = ("", "")
    results: int = -1
    started: float | None = None
    polls: int = 0
    drains: set[str] = field(default_factory=set)


def follow(
    sub: Submission, say: Say, *, timeout_s: float, slurm: SlurmReader | None = None
) -> Outcome:
    """Wait for the job to end, saying each change of state or pending reason and each new
    result. ``timeout_s`` counts from the job's start, not its submission: a busy queue
    never uses it up. A node of the job that goes down or stops responding ends the wait
    at once (the job is cancelled and the node named); a drained node is only noted (Slurm
    lets running jobs finish). The outcome comes once Slurm has ended the job."""
    sl = slurm or SlurmReader()
    t0 = sl.now()
    w = _Watch(nodes=[])
    while True:
        info = sl.job(sub.job_id) or {}
        state = _state(info)
        if info.get("NodeList") and not w.nodes and state != "PENDING":
            w.nodes = sl.hostnames(info["NodeList"])
        _progress(sub, say, w, state, info)
        if state not in ACTIVE:
            failed = bad_nodes_of(sl, w.nodes) if state in KILLED or state == "FAILED" else []
            return Outcome(state, info, failed, sl.now() - t0)
        if w.started is None and state != "PENDING":
            w.started = sl.now()
        gone = _node_check(sub, say, sl, w) if state == "RUNNING" and w.nodes else []
        if gone:
            why = f"node {', '.join(gone)} while the job ran"
            say(f"job {sub.job_id}: {why}: cancelling it")
            return _cancelled(sub, say, sl, why, gone, t0)
        if w.started is not None and sl.now() - w.started > timeout_s:
            why = f"not finished within {timeout_s:.0f} s of its start"
            say(f"job {sub.job_id}: {why}: cancelling it")
            return _cancelled(sub, say, sl, why, [], t0)
        sl.sleep(POLL_PENDING_S if state == "PENDING" else POLL_RUNNING_S)


def _progress(sub: Submission, say: Say, w: _Watch, state: str, info: dict[str, str]) -> None:
    """Say a new state or pending reason (Slurm's: Priority, Resources, JobHeldAdmin…) and
    a new count of results."""
    reason = info.get("Reason", "")
    reason = "" if reason in ("None", "(null)") else reason
    if (state, reason) != w.said:
        where_ = f" on {', '.join(w.nodes)}" if w.nodes else ""
        say(f"job {sub.job_id}: {state}{where_}" + (f" ({reason})" if reason else ""))
        w.said = (state, reason)
    jsonl = Path(sub.report_dir) / RESULTS_JSONL
    n = _lines(jsonl)
    if n != w.results and n > 0:
        say(f"job {sub.job_id}: {n} result(s) so far in {jsonl}")
    w.results = n


def _node_check(sub: Submission, say: Say, sl: SlurmReader, w: _Watch) -> list[str]:
    """Every other poll: the job's nodes that are gone (down, failing, not responding);
    a newly drained one is said once and the job goes on."""
    w.polls += 1
    if w.polls % 2 == 0:
        return []
    gone = []
    for n, rec in sl.nodes(w.nodes).items():
        st = rec.get("State", "")
        if GONE_NODE.search(st):
            gone.append(_node_words(n, rec))
        elif "DRAIN" in st.upper() and n not in w.drains:
            w.drains.add(n)
            say(
                f"job {sub.job_id}: node {_node_words(n, rec)}: Slurm lets the running job finish there "
                "and starts nothing new; following it on"
            )
    return gone


def bad_nodes_of(sl: SlurmReader, nodes: list[str]) -> list[str]:
    """``node (STATE: reason)`` for each of ``nodes`` that is down, drained or not responding."""
    return [
        _node_words(n, rec)
        for n, rec in sl.nodes(nodes).items()
        if BAD_NODE.search(rec.get("State", ""))
    ]


def _cancelled(
    sub: Submission, say: Say, sl: SlurmReader, why: str, gone: list[str], t0: float
) -> Outcome:
    """scancel, then wait until Slurm has ended the job (rank 0 writes until then, and the
    report is copied after): the outcome carries Slurm's final state and mlenv's reason."""
    sl.cancel(sub.job_id)
    end = sl.now() + CANCEL_WAIT_S
    info: dict[str, str] = {}
    while True:
        info = sl.job(sub.job_id) or info
        state = _state(info)
        if state not in ACTIVE:
            break
        if sl.now() > end:
            say(
                f"job {sub.job_id}: still {state} {CANCEL_WAIT_S:.0f} s after scancel; judging it now"
            )
            break
        sl.sleep(POLL_RUNNING_S)
    return Outcome(state, info, gone, sl.now() - t0, cancelled=why)


def _lines(p: Path) -> int:
    try:
        with p.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def cancel(job: str) -> None:
    """``scancel -- JOB``."""
    _check(_run(argv.slurm("scancel", [], [argv.job_id(job)])))


def judge(cluster: Cluster, sub: Submission, out: Outcome) -> dict[str, Any]:
    """The results document of the run: rank 0's when the job ended by itself; otherwise
    ERROR naming what Slurm (or mlenv's cancel) did and where, built from what was measured
    (results.jsonl)."""
    killed = out.state in KILLED or bool(out.failed_nodes) or bool(out.cancelled)
    where_ = (
        f" on node {', '.join(out.failed_nodes)}"
        if out.failed_nodes
        else (f" on {out.info.get('NodeList')}" if out.info.get("NodeList") else "")
    )
    reason = out.info.get("Reason", "")
    output = _job_output(out.info)
    # the job's USR1 trap stopped the ranks before slurm.time_limit: rank 0 wrote
    # INTERRUPTED (SIGTERM), but nobody interrupted the run; the limit ended it
    limit = not killed and NEAR_LIMIT in output
    killed = killed or limit
    if limit:
        why = (
            f"job {sub.job_id} reached slurm.time_limit {cluster.slurm.time_limit}: Slurm warned it "
            "before the limit and the ranks were stopped to write what they measured"
        )
    elif out.cancelled:  # the reason names the node already
        on = f" on {out.info['NodeList']}" if out.info.get("NodeList") else ""
        why = f"mlenv cancelled job {sub.job_id}: {out.cancelled}; Slurm's final state {out.state}{on}"
    elif killed:
        why = f"Slurm ended job {sub.job_id} ({out.state}{'' if reason in ('', 'None') else ': ' + reason}){where_}"
    else:
        why = (
            f"job {sub.job_id} ended {out.state} (exit {out.info.get('ExitCode', '?')}) before rank 0 wrote "
            "results.json" + port_clash(output)
        )
    # A CANCELLED job with healthy nodes that mlenv did not cancel is someone's scancel:
    # INTERRUPTED, not a broken cluster. TIMEOUT, NODE_FAIL, preemption and mlenv's own
    # cancels (a node gone, its limit) stay ERROR.
    scancel = out.state == "CANCELLED" and not out.failed_nodes and not out.cancelled
    return judge_report(
        Path(sub.report_dir),
        sub.run_id,
        forced_error=why if killed else None,
        fallback_why=why,
        interrupted="scancel" if scancel else None,
        job=sub.job_id,
    )


# What acceptance.sbatch's USR1 trap prints (Slurm's warning before the time limit).
NEAR_LIMIT = "is near its time limit: stopping the ranks"
# torch's TCPStore names a taken rendezvous port "EADDRINUSE" (2.x) or "Address already in use".
_IN_USE = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)
_RENDEZVOUS = re.compile(r"rendezvous (\S+):(\d+)")


def port_clash(text: str) -> str:
    """'; …' naming a rendezvous port another process held (EADDRINUSE), from the job's
    output ('' when the output does not say so)."""
    if not _IN_USE.search(text):
        return ""
    m = _RENDEZVOUS.search(text)
    at = f" {m.group(2)} on {m.group(1)}" if m else ""
    return (
        f"; the rendezvous port{at} was already in use (EADDRINUSE): another job on that node holds it. "
        "Leave master_port unset (the port is then derived from the job id) or set a free one"
    )


def _job_output(info: dict[str, str]) -> str:
    """The job's output file (its last 64 KiB), '' when unreadable."""
    path = info.get("StdOut", "")
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def judge_report(
    report: Path,
    run_id: str,
    *,
    forced_error: str | None,
    fallback_why: str,
    interrupted: str | None = None,
    job: str | None = None,
) -> dict[str, Any]:
    """Rank 0's ``results.json`` unless ``forced_error`` says the run was ended from outside;
    then (or when rank 0 wrote nothing readable) ERROR with that reason, from ``results.jsonl``
    (INTERRUPTED with ``interrupted``, the way someone stopped it)."""
    from mlenv.acceptance.reports import RunMeta, finalize
    from mlenv.acceptance.reports.document import control_host_job, now_iso
    from mlenv.acceptance.reports.jsonl import read_partial

    doc = read_results(report) if forced_error is None else None
    if doc is not None:
        return doc
    why = forced_error or fallback_why
    report.mkdir(parents=True, exist_ok=True)
    results, notes = read_partial(report / RESULTS_JSONL)
    meta = RunMeta.read(report) or RunMeta(
        run_id=run_id,
        started=now_iso(),
        profile="",
        checks=[],
        world={"nodes": None, "ranks": None, "hosts": []},
        job=control_host_job(job) if job else None,
    )
    missing = [c for c in meta.checks if c not in {r.name for r in results}]
    why += f"; {len(results)} result(s) kept from results.jsonl"
    if missing:
        why += f"; not measured: {', '.join(missing)}"
    if interrupted:
        return finalize(report, meta, results, notes=[], plots=False, interrupted=interrupted)
    return finalize(report, meta, results, notes=[why, *notes], plots=False)


def copy_back(root: Path, cluster: Cluster, sub: Submission, info: dict[str, str]) -> Path:
    """The report folder (and the job's output) into ``reports/<cluster>/<run-id>/``."""
    dest = root / "reports" / cluster.name / sub.run_id
    src = Path(sub.report_dir)
    if src.is_dir():
        shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)
    dest.mkdir(parents=True, exist_ok=True)
    out = info.get("StdOut", "")
    if out and os.path.isfile(out):
        shutil.copyfile(out, dest / "job.out")
    return dest


def record_here(root: Path, cluster: Cluster, dest: Path, doc: dict[str, Any], say: Say) -> None:
    """The run in this machine's history (what ``mlenv history CLUSTER`` reads here) and the
    copy's ``record.json``, from the judged document: rank 0 recorded it under
    ``slurm.shared_dir``, where the control host does not look, and before mlenv's verdict.
    A history problem never changes the verdict."""
    import hashlib

    from mlenv.acceptance.core.result import CheckResult
    from mlenv.acceptance.records import history

    base = history.default_root(root)
    try:
        path = history.history_path(base, cluster.name)
        if any(r.get("run_id") == doc.get("run_id") for r in history.read(path)[0]):
            # MLENV_HISTORY_DIR exported to the job, or shared_dir is this repository: one line is enough
            say(f"history: run {doc.get('run_id')} is already in {path} (the job wrote it)")
            return
        sha = (
            hashlib.sha256(Path(cluster.source).read_bytes()).hexdigest()
            if cluster.source
            else None
        )
        results = [CheckResult.from_dict(c) for c in doc.get("checks", [])]
        path, rec = history.record_run(
            dest, doc, results, cluster.name, base, config_sha256=sha, origin="cluster"
        )
    except (OSError, ValueError, KeyError, TypeError, InputError) as e:
        say(f"note: run not added to the history here: {e}")
        return
    say(f"history: run {rec['run_id']} appended to {path}")


def time_limit_s(cluster: Cluster) -> float:
    from mlenv.config.rules import slurm_minutes

    m = slurm_minutes(cluster.slurm.time_limit) or 60.0
    return m * 60.0


def acceptance(
    cluster: Cluster,
    root: Path,
    say: Say,
    *,
    nodes: int | None = None,
    profile: str = "quick",
    suite_args: list[str] | None = None,
    timeout_s: float | None = None,
) -> tuple[dict[str, Any], int, Path]:
    """Submit, wait with progress, judge, copy the reports back: (document, exit code, reports)."""
    sub = submit(cluster, root, say, nodes=nodes, profile=profile, suite_args=suite_args)
    # counted from the job's start (follow): time in the queue never uses it up
    limit = (
        timeout_s
        if timeout_s is not None
        else min(time_limit_s(cluster) + STARTUP_SLACK_S, 7 * 86400)
    )
    out = follow(sub, say, timeout_s=limit)
    doc = judge(cluster, sub, out)
    dest = copy_back(root, cluster, sub, out.info)
    record_here(root, cluster, dest, doc, say)
    return doc, contract.exit_for_doc(doc), dest


# --- the other verbs -------------------------------------------------------------------


def status_lines(cluster: Cluster, root: Path) -> list[str]:
    """The recorded job's state and each of its nodes' (``squeue``/``scontrol``/``sacct``)."""
    sub = last_submission(root, cluster)
    info = job_info(sub.job_id)
    if info is None:
        return [
            f"job {sub.job_id} (run {sub.run_id}): no longer known to Slurm; reports: {sub.report_dir}"
        ]
    nodes = hostnames(info.get("NodeList", ""))
    lines = [
        f"job {sub.job_id} (run {sub.run_id}): {_state(info)}"
        + (f" ({info['Reason']})" if info.get("Reason") not in (None, "", "None") else "")
        + f", partition {info.get('Partition', cluster.slurm.partition)}, elapsed {info.get('RunTime', '?')}"
        + f", exit {info.get('ExitCode', '?')}"
    ]
    for n, rec in nodes_info(nodes).items():
        lines.append(
            f"  node {n}: {rec.get('State', '?')}"
            + (f" ({rec['Reason']})" if rec.get("Reason") not in (None, "", "(null)") else "")
        )
    lines.append(f"  reports: {sub.report_dir}")
    return lines


def output_file(cluster: Cluster, job: str) -> str:
    """Where acceptance.sbatch's ``--output`` puts job ``job``'s output."""
    return str(
        Path(cluster.slurm.shared_dir) / "results" / f"mlenv-acceptance-{cluster.name}-{job}.out"
    )


def log_path(cluster: Cluster, sub: Submission) -> str:
    """The recorded job's output file (Slurm's StdOut, else where the script puts it)."""
    info = job_info(sub.job_id) or {}
    return info.get("StdOut") or output_file(cluster, sub.job_id)


def log_text(cluster: Cluster, root: Path, tail: int | None = None) -> str:
    """The job's output file (on the shared filesystem)."""
    sub = last_submission(root, cluster)
    path = log_path(cluster, sub)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise InfraError(
            f"job {sub.job_id}: cannot read its output {path}: {e.strerror or e}"
        ) from None
    if tail is not None:
        text = "".join(text.splitlines(keepends=True)[-tail:]) if tail else ""
    return text


def teardown(cluster: Cluster, root: Path) -> str:
    """``scancel`` the recorded job if it is still queued or running."""
    sub = last_submission(root, cluster)
    st = _state(job_info(sub.job_id))
    if st in ACTIVE:
        cancel(sub.job_id)
        return f"cancelled job {sub.job_id} ({st.lower()}); reports so far: {sub.report_dir}"
    return f"job {sub.job_id} already ended ({st.lower()}); nothing to cancel"


def sync(cluster: Cluster, root: Path) -> str:
    """``workspace/`` → ``<shared_dir>/workspace`` (adds and updates; never deletes)."""
    src = root / "workspace"
    dest = Path(cluster.slurm.shared_dir) / "workspace"
    if not src.is_dir():
        raise InputError(f"no workspace/ folder under {root}")
    try:
        shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)
    except (OSError, shutil.Error) as e:
        raise InfraError(f"sync to {dest}: {e}") from None
    return f"synced {src} -> {dest}"


# sbatch_args that srun takes alike and that shape what a task gets (its GPUs, the site's
# software environment): the probe, stage and shell carry them as the job does.
SRUN_TOO = frozenset({"gres", "gres-flags", "environment", "uenv", "view"})


def shell_argv(cluster: Cluster, command: list[str], node: int = 0, tty: bool = False) -> list[str]:
    """``srun [--pty] --nodes=1 --ntasks=1 --partition=… [--nodelist=NODE] -- COMMAND…``:
    a shell (or COMMAND) on one node of the partition, under the config's account/QOS,
    with the job's GPUs, constraint and container."""
    from mlenv.platforms import nodeprobe

    return argv.slurm(
        "srun",
        [
            *(["--pty"] if tty else []),
            *srun_options(cluster, node),
            *nodeprobe.container_options(cluster),
        ],
        [*nodeprobe.container_prefix(cluster), *(command or ["bash", "-l"])],
    )


def srun_options(cluster: Cluster, node: int) -> list[str]:
    """``--nodes=1 --ntasks=1 --partition=… [--account/--qos/--reservation] [--nodelist=NODE]``:
    one task on node ``node`` of ``nodes.gpu_nodes`` (any node of the partition without it)."""
    s = cluster.slurm
    opts = ["--nodes=1", "--ntasks=1"]
    if s.partition:
        opts.append(f"--partition={argv.slurm_partitions(s.partition)}")
    # what the batch job asks for, so that a site rule the job meets (a GPU in a GPU
    # partition, a feature, a CSCS environment) admits this one too
    if s.constraint:
        opts.append(f"--constraint={argv.slurm_constraint(s.constraint)}")
    count = f"{s.gpu_type}:{cluster.gpus.per_node}" if s.gpu_type else str(cluster.gpus.per_node)
    if s.gpus_flag == "gpus-per-node":
        opts.append(f"--gpus-per-node={count}")
    elif s.gpus_flag == "gres":
        opts.append(f"--gres=gpu:{count}")
    opts += [argv.sbatch_option(a) for a in s.sbatch_args if a[2:].partition("=")[0] in SRUN_TOO]
    if s.account:
        opts.append(f"--account={argv.slurm_account(s.account)}")
    if s.qos:
        opts.append(f"--qos={argv.slurm_name(s.qos, 'qos')}")
    if s.reservation:
        opts.append(
            f"--reservation={','.join(argv.slurm_name(r, 'reservation') for r in s.reservation.split(','))}"
        )
    if cluster.gpu_nodes:
        if not 0 <= node < len(cluster.gpu_nodes):
            raise InputError(
                f"--pod {node}: nodes.gpu_nodes lists {len(cluster.gpu_nodes)} node(s)"
            )
        opts.append(f"--nodelist={argv.slurm_node(cluster.gpu_nodes[node])}")
    elif node:
        raise InputError(
            "--pod N needs nodes.gpu_nodes (which node is N?); without it the shell runs on "
            "any free node of the partition"
        )
    return opts
