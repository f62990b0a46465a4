"""``platform: hosts``: plain machines over ssh (``nodes.gpu_nodes``; host 0 is the head).

Preflight asks every host over ssh, in parallel, for its Python, torch and DeepSpeed
versions and its GPU count, and names each host that does not answer (before anything
is launched) or differs. The launch is the same shape as on Slurm: one torchrun per host
(``--nnodes H --node_rank I``), static rendezvous on host 0; the environment (NCCL_*,
MLENV_*) is passed as ``env K=V …`` words, each one quoted by :func:`mlenv.argv.ssh`.

Nothing on this machine is a path on the hosts: the ``--options``/``--baseline`` files
travel as tar over ssh into the run's folder, and, without ``hosts.shared_dir``, the run's
folder (``~/mlenv-results/<run-id>`` on each host) comes back the same way once the run
ended, into ``reports/<cluster>/<run-id>/``, where it is judged and recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Container, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mlenv import argv, contract
from mlenv.config.model import Cluster
from mlenv.errors import EXIT_SIGINT, EXIT_SIGTERM, InfraError, InputError, Interrupted
from mlenv.platforms import nodeprobe

Say = Callable[[str], None]
SSH_OPTIONS = (
    "-oBatchMode=yes",
    "-oConnectTimeout=5",
    "-oStrictHostKeyChecking=accept-new",
    "-oServerAliveInterval=5",
    "-oServerAliveCountMax=3",
)
# A dead host is told by ssh's ConnectTimeout (5 s); this bounds a live host's python
# importing torch and DeepSpeed, which took over 20 s on a loaded 2-core test machine
# (status then said "no answer over ssh" of a host that had answered).
PROBE_TIMEOUT_S = 60.0
PROBE = nodeprobe.PROBE  # versions, GPUs, and what the suite cannot import
UNREACHABLE = "ssh unreachable: "  # how a probe says ssh itself failed (exit 255)


def ssh_words(cluster: Cluster, host: str, remote: list[str]) -> list[str]:
    """The ssh argv reaching ``host`` as the config says (user, port, key)."""
    h = cluster.hosts
    key = str(Path(h.ssh_key).expanduser()) if h.ssh_key else ""
    # MLENV_SSH_CONFIG: an ssh_config file for these hosts (jump hosts, known_hosts file, ...)
    return argv.ssh(
        host,
        remote,
        user=h.ssh_user,
        port=h.ssh_port,
        key=key,
        options=SSH_OPTIONS,
        config=os.environ.get("MLENV_SSH_CONFIG", ""),
    )


def hosts_of(cluster: Cluster, nodes: int | None) -> list[str]:
    n = nodes if nodes is not None else len(cluster.gpu_nodes)
    if not 1 <= n <= len(cluster.gpu_nodes):
        raise InputError(f"--nodes {n}: nodes.gpu_nodes lists {len(cluster.gpu_nodes)} host(s)")
    return [argv.slurm_node(h) for h in cluster.gpu_nodes[:n]]


def _probe(cluster: Cluster, host: str, timeout: float) -> dict[str, Any] | str:
    return probe_with(cluster, host, nodeprobe.node_python(cluster), timeout)


def probe_with(
    cluster: Cluster, host: str, python: str, timeout: float = PROBE_TIMEOUT_S
) -> dict[str, Any] | str:
    """:data:`PROBE` run by ``python`` on ``host`` over ssh: what it found, or why not (a line)."""
    words = ssh_words(cluster, host, [python, "-c", PROBE])
    try:
        r = subprocess.run(
            words,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        # ssh itself gives up on a dead host after ConnectTimeout (exit 255, below): what
        # runs out here is the host's python importing torch and DeepSpeed.
        return f"no answer within {timeout:g} s (ssh connects within 5 s; then {python} imports torch and DeepSpeed)"
    except FileNotFoundError:
        raise InfraError("ssh: not found (install openssh-client)") from None
    if r.returncode == 255:
        last = (r.stderr.strip().splitlines() or ["ssh failed"])[-1]
        return UNREACHABLE + last
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return f"{python} failed: {last}"
    try:
        d: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
        return d
    except (ValueError, IndexError):
        return f"unexpected probe output: {r.stdout.strip()[:200]!r}"


def preflight(
    cluster: Cluster, *, say: Say, nodes: int | None = None, timeout: float = PROBE_TIMEOUT_S
) -> list[str]:
    """Every host answers over ssh with the same Python/torch/DeepSpeed and enough GPUs;
    InfraError (exit 3) naming each host that does not, before anything is launched."""
    hosts = hosts_of(cluster, nodes)
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        found = dict(
            zip(hosts, pool.map(lambda h: _probe(cluster, h, timeout), hosts), strict=True)
        )
    problems = [f"host {h}: {v}" for h, v in found.items() if isinstance(v, str)]
    ok = {h: v for h, v in found.items() if isinstance(v, dict)}
    for h, v in ok.items():  # the first host lacking a module: one line, the fix in it
        line = nodeprobe.missing_line(cluster, f"host {h}", v, stopped="nothing was launched")
        if line:
            raise InfraError(line)
    for key in ("python", "torch", "deepspeed"):
        seen = {str(v.get(key)) for v in ok.values()}
        if len(seen) > 1:
            problems.append(
                f"{key} differs: " + ", ".join(f"{h} {v.get(key)}" for h, v in ok.items())
            )
    if cluster.gpus.type.lower() != "cpu":
        for h, v in ok.items():
            if int(v.get("gpus") or 0) < cluster.gpus.per_node:
                problems.append(
                    f"host {h}: {v.get('gpus')} GPU(s), gpus.per_node is {cluster.gpus.per_node}"
                )
    if problems:
        raise InfraError("preflight: " + "; ".join(problems) + ": nothing was launched")
    for h, v in ok.items():
        say(
            f"preflight: host {h}: python {v['python']}, torch {v['torch']}, deepspeed {v.get('deepspeed')}, "
            f"{v.get('gpus', 0)} GPU(s)"
        )
    return hosts


# The run's folder on the hosts without hosts.shared_dir: <login dir>/mlenv-results/<run id>
# on each host (ssh starts the remote command there), beside sync's mlenv-workspace. Host
# 0's holds the reports (rank 0 writes them); every host's holds its own ranks' logs.
REMOTE_RESULTS = "mlenv-results"
INPUTS = "inputs"  # <report>/inputs/: the --options and --baseline files, shipped from here
# A run's settings the Slurm batch script reads from mlenv's environment (sbatch
# --export=ALL) when the flag is not given; hosts read them here, as files to ship.
ENV_INPUTS = {"--options": "MLENV_OPTIONS", "--baseline": "MLENV_BASELINE"}
COPY_TIMEOUT_S = 600.0  # one host's report folder as tar over ssh (reports are a few MB)


def _results_of(cluster: Cluster) -> str:
    """The folder on the hosts that holds mlenv's run folders: ``<shared_dir>/results``,
    else ``mlenv-results`` in the login directory."""
    shared = cluster.hosts.shared_dir
    return f"{shared.rstrip('/')}/results" if shared else REMOTE_RESULTS


def report_dir_of(cluster: Cluster, rid: str) -> str:
    """The run's report folder as the ranks see it (a path on the hosts, not here)."""
    return f"{_results_of(cluster)}/{rid}"


def history_dir_of(cluster: Cluster) -> str:
    """Where rank 0 keeps the cluster's history on the hosts (``MLENV_HISTORY_DIR``; its trend
    plots read it): beside the run folders, in the folder mlenv made. Before, it was the
    ssh session's ``./reports``, a folder of that name in the login directory of host 0,
    which mlenv had no business writing (and the test hosts, sharing this machine's root,
    grew one run after run). The control host still records every run in its own history."""
    return f"{_results_of(cluster)}/history"


def inputs_from_env(
    given: Container[str], environ: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """The :data:`ENV_INPUTS` a run takes from the environment: for each flag not in
    ``given``, (value, variable) where that variable is set (stripped, not empty)."""
    return {
        flag: (environ[var].strip(), var)
        for flag, var in ENV_INPUTS.items()
        if flag not in given and environ.get(var, "").strip()
    }


def run_inputs(
    suite_args: list[str], report: str, environ: dict[str, str] | None = None
) -> tuple[list[str], list[tuple[Path, str]]]:
    """``suite_args`` with each ``--options FILE`` / ``--baseline FILE`` (else ``$MLENV_OPTIONS``,
    ``$MLENV_BASELINE``) pointing at its copy in ``<report>/inputs/``, and the files to ship
    there as (path here, name there).

    The files are on the control host: a host sees none of its paths (the
    ranks read a control-host path and failed, or read another file of that name). A
    ``--baseline`` that is no file here is a GPU model name and stays as it is.
    """
    env = os.environ if environ is None else environ
    args = list(suite_args)
    for flag, (value, _) in inputs_from_env(args, env).items():
        args += [flag, value]
    ship: list[tuple[Path, str]] = []
    for i, a in enumerate(args[:-1]):
        if a not in ENV_INPUTS:
            continue
        f = Path(args[i + 1]).expanduser()
        if a == "--baseline" and not f.exists():
            continue
        if not f.is_file():
            raise InputError(
                f"{a} {args[i + 1]}: no such file on this machine (it is copied to every host)"
            )
        suffix = f.suffix.lower() if f.suffix.lower() in (".yaml", ".yml", ".json") else ".yaml"
        name = a[2:] + suffix
        ship.append((f, name))
        args[i + 1] = f"{report}/{INPUTS}/{name}"
    return args, ship


def _ship_inputs(
    cluster: Cluster, hosts: list[str], report: str, ship: list[tuple[Path, str]]
) -> None:
    """The run's input files into ``<report>/inputs/``: through host 0 into the shared
    folder, else onto every host (the ranks of each read them)."""
    if not ship:
        return
    targets = hosts[:1] if cluster.hosts.shared_dir else hosts
    with ThreadPoolExecutor(max_workers=min(32, len(targets))) as pool:
        list(pool.map(lambda h: _push(cluster, h, f"{report}/{INPUTS}", ship, "inputs"), targets))


def _rank_words(
    plan: dict[str, Any], i: int, env: dict[str, str], profile: str, report: str, suite: list[str]
) -> list[str]:
    """Host ``i``'s remote command: its torchrun under ``env K=V …`` (each word quoted by argv.ssh)."""
    return [
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        plan["python"],
        "-m",
        "torch.distributed.run",
        f"--nnodes={len(plan['hosts'])}",
        f"--node_rank={i}",
        f"--nproc_per_node={plan['ranks_per_host']}",
        f"--master_addr={plan['master_addr']}",
        f"--master_port={plan['master_port']}",
        "--max_restarts=0",
        "-m",
        "mlenv.acceptance",
        "--profile",
        profile,
        "--report-dir",
        report,
        *suite,
    ]


def _run_env(cluster: Cluster, plan: dict[str, Any], rid: str) -> dict[str, str]:
    env = {
        **plan["env"],
        "MLENV_PLATFORM": "hosts",
        "MLENV_CLUSTER": cluster.name,
        "MLENV_RUN_ID": rid,
        "MLENV_NNODES": str(len(plan["hosts"])),
        "MLENV_GPUS_PER_NODE": str(plan["ranks_per_host"]),
        "PYTHONUNBUFFERED": "1",
        "MLENV_HISTORY_DIR": history_dir_of(cluster),
    }
    if plan["device"] == "cpu":
        env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    for k in ("TORCH_EXTENSIONS_DIR",):  # DeepSpeed op cache, when the caller set one
        if os.environ.get(k):
            env[k] = os.environ[k]
    return env


def acceptance(
    cluster: Cluster,
    root: Path,
    say: Say,
    *,
    nodes: int | None = None,
    profile: str = "quick",
    suite_args: list[str] | None = None,
    timeout_s: float = 3600.0,
) -> int:
    """Preflight, one torchrun per host over ssh, wait, copy back, judge, record; the exit code."""
    from mlenv.acceptance.reports import console
    from mlenv.acceptance.run.local import ignore_signals, signals_as_interrupts
    from mlenv.platforms.slurm import judge_report, new_run_id, record_here
    from mlenv.render.platforms import launch_plan

    argv.slurm_name(profile, "profile")
    rid = new_run_id()
    report = report_dir_of(cluster, rid)
    suite, ship = run_inputs(
        suite_args or [], report
    )  # bad input first: nothing asked or launched yet
    hosts = preflight(cluster, say=say, nodes=nodes)
    plan = launch_plan(
        cluster, len(hosts)
    )  # what `mlenv render` writes to hosts/<cluster>/launch-plan.json
    plan["python"] = nodeprobe.node_python(cluster)  # the staged venv's once `mlenv stage` made one
    env = _run_env(cluster, plan, rid)
    _ship_inputs(cluster, hosts, report, ship)
    record_run(root, cluster, rid, Path(report), hosts, say, remote=not cluster.hosts.shared_dir)
    procs: list[subprocess.Popen[bytes]] = []
    t0 = time.monotonic()
    stopped: Interrupted | None = None
    # The ssh sessions run in their own sessions (a Ctrl-C at this terminal must not cut
    # them before the ranks are told), so no signal given to mlenv reaches them or the
    # remote ranks: Ctrl-C, SIGTERM and SIGHUP are turned into Interrupted here and the
    # run is stopped on every host (SIGTERM left 6 remote ranks running).
    with signals_as_interrupts():
        try:
            for i, h in enumerate(plan["hosts"]):
                procs.append(
                    subprocess.Popen(
                        ssh_words(cluster, h, _rank_words(plan, i, env, profile, report, suite)),
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
            say(
                f"launched run {rid} on {', '.join(hosts)} ({len(hosts)} x {cluster.gpus.per_node} rank(s)); "
                f"reports: {report}" + ("" if cluster.hosts.shared_dir else f" on host {hosts[0]}")
            )
            lost, left = _wait_all(hosts, procs, timeout_s - (time.monotonic() - t0), say)
            if left:  # past the run's time, or the others' grace: its processes there too
                stop_run(cluster, [hosts[i] for i in left], rid, [procs[i] for i in left])
        except KeyboardInterrupt as e:
            stopped = e if isinstance(e, Interrupted) else Interrupted("SIGINT")
            say(f"{stopped.signal_name}: stopping run {rid} on {', '.join(hosts)}")
            # before the SIGTERM: rank 0 reads it, and says INTERRUPTED, not "the launcher stopped it"
            _mark_interrupted(cluster, hosts[0], report, stopped.signal_name)
            stop_run(cluster, hosts[: len(procs)], rid, procs)
            lost = []
        # the run has ended whichever way: a further signal must not cut the copy back short
        # (the handlers come back when the block ends)
        ignore_signals()
        dest = root / "reports" / cluster.name / rid
        uncopied = gather(cluster, hosts, report, dest, say)
    forced = f"host {', '.join(lost)} during the run" if lost else None
    # stopped before rank 0 wrote its report (a CI run's SIGTERM came while the ranks still
    # started): INTERRUPTED, the way it was stopped, not ERROR
    doc = judge_report(
        dest,
        rid,
        forced_error=forced,
        fallback_why=uncopied
        or f"the run on {', '.join(hosts)} ended before rank 0 wrote results.json",
        interrupted=stopped.signal_name if stopped is not None else None,
    )
    record_here(root, cluster, dest, doc, say)  # the control host's history: one line per run id
    say(console.verdict_block(doc, str(dest)))
    code = contract.exit_for_doc(doc)
    if stopped is not None and code not in (EXIT_SIGINT, EXIT_SIGTERM):
        return stopped.exit_code  # stopped before rank 0 could finalise: still the signal's code
    return code


STOP_GRACE_S = 40.0  # rank 0 finalises the report on SIGTERM; torchrun waits 30 s for its ranks


def stop_run(
    cluster: Cluster, hosts: list[str], rid: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    """SIGTERM to the run's processes on every host (torchrun and its ranks: each has the run's
    report folder ``…/results/<rid>`` or ``mlenv-results/<rid>`` on its command line), then
    its ssh sessions end.

    Ending the local ssh alone would leave the ranks running: without a terminal, sshd
    sends them no SIGHUP. The pattern's ``[-/]`` keeps pkill from matching the remote shell
    that runs it (its command line holds ``[-/]``, not ``/`` or ``-``). A session still open
    after :data:`STOP_GRACE_S` is killed.
    """
    pattern = f"[-/]results/{argv.slurm_name(rid, 'run id')}"

    def one(h: str) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run(
                ssh_words(cluster, h, ["pkill", "-TERM", "-f", pattern]),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
                check=False,
                start_new_session=True,
            )

    if hosts:
        with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
            list(pool.map(one, hosts))
    end = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


# Run by the remote login shell with the values as its arguments ($1 the report folder,
# $2 the signal's name), so that no value is ever part of the script.
MARK_SCRIPT = 'mkdir -p -- "$1" && printf "%s\\n" "$2" > "$1/.interrupted"'


def _mark_interrupted(cluster: Cluster, head: str, report: str, signal_name: str) -> None:
    """:func:`mlenv.acceptance.records.rundir.mark_interrupted` in the report folder rank 0
    reads: here when this machine sees it (the shared folder), else on host 0 over ssh."""
    from mlenv.acceptance.records.rundir import INTERRUPT_FILE, mark_interrupted

    assert INTERRUPT_FILE == ".interrupted"  # the name MARK_SCRIPT writes
    if cluster.hosts.shared_dir and Path(report).is_dir():
        mark_interrupted(Path(report), signal_name)
        return
    with contextlib.suppress(
        subprocess.TimeoutExpired, OSError
    ):  # best effort, as mark_interrupted
        subprocess.run(
            ssh_words(cluster, head, ["sh", "-c", MARK_SCRIPT, "mlenv-mark", report, signal_name]),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            check=False,
            start_new_session=True,
        )


def gather(cluster: Cluster, hosts: list[str], report: str, dest: Path, say: Say) -> str | None:
    """The run's report folder into ``dest`` (``reports/<cluster>/<run-id>/``); why the head's
    copy failed (a line), else None.

    With a shared folder this machine sees, a copy; otherwise tar over ssh: host 0's folder
    whole (rank 0 wrote the reports there), then each other host's own ranks' ``logs/`` and
    ``nccl/``, and its ``.hung`` note (a rank there gave up on a silent rank 0,
    :func:`mlenv.acceptance.records.rundir.mark_hung`: the first one stays, host 0's first).
    A host that cannot be reached is said and skipped.
    """
    shared = cluster.hosts.shared_dir
    if shared and Path(report).is_dir():
        shutil.copytree(report, dest, dirs_exist_ok=True, symlinks=True)
        return None
    dest.mkdir(parents=True, exist_ok=True)
    uncopied = _fetch(cluster, hosts[0], report, dest, lambda name: True)
    if uncopied:
        say(f"host {hosts[0]}: the run's reports were not copied back: {uncopied}")

    def theirs(name: str) -> bool:
        return name.split("/")[0] in ("logs", "nccl") or (
            name == ".hung" and not (dest / name).exists()
        )

    for h in [] if shared else hosts[1:]:
        why = _fetch(cluster, h, report, dest, theirs)
        if why:
            say(f"host {h}: its rank logs were not copied back: {why}")
    return (
        f"the reports of host {hosts[0]} could not be copied back ({uncopied})"
        if uncopied
        else None
    )


def _fetch(
    cluster: Cluster, host: str, remote: str, dest: Path, keep: Callable[[str], bool]
) -> str | None:
    """The members of ``remote`` on ``host`` that ``keep`` admits, extracted under ``dest``
    (tar over ssh; tarfile's ``data`` filter: no absolute path, ``..`` or link out of ``dest``);
    None, or why not (a line)."""
    import tarfile
    import tempfile

    # stderr to a file: a pipe nobody reads while the stream is read could fill and stall tar
    with tempfile.TemporaryFile() as errf:
        p = subprocess.Popen(
            ssh_words(cluster, host, ["tar", "-c", "-f", "-", "-C", remote, "."]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errf,
        )
        assert p.stdout is not None
        broken = ""
        try:
            with tarfile.open(fileobj=p.stdout, mode="r|") as tar:
                for m in tar:
                    name = m.name.removeprefix("./")
                    if name not in ("", ".") and keep(name):
                        tar.extract(m, dest, filter="data")
        except (
            tarfile.TarError,
            OSError,
        ) as e:  # an empty stream (tar failed there) is a ReadError
            broken = f"{type(e).__name__}: {e}"
        try:
            p.communicate(timeout=COPY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return f"no end within {COPY_TIMEOUT_S:g} s"
        errf.seek(0)
        said = errf.read().decode(errors="replace").strip().splitlines()
    last = said[-1] if said else f"exit {p.returncode}"
    if p.returncode == 255:
        return f"ssh unreachable: {last}"
    # GNU tar's 1 is a file that changed while it was read (a straggler's log): what came is kept
    if p.returncode not in (0, 1) or (p.returncode == 1 and broken):
        return f"tar: {last}"
    return broken or None


def run_record(root: Path, cluster: Cluster) -> Path:
    """Where the control host keeps the cluster's last run (as Slurm keeps its last job)."""
    return root / ".mlenv" / "hosts" / f"{cluster.name}.json"


def record_run(
    root: Path,
    cluster: Cluster,
    rid: str,
    report: Path,
    hosts: list[str],
    say: Say,
    remote: bool = False,
) -> None:
    """Note the run being launched, so that ``logs`` can find its report folder (``remote``:
    a folder on the hosts, read over ssh, not a shared one this machine sees)."""
    f = run_record(root, cluster)
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(
            json.dumps({"run_id": rid, "report_dir": str(report), "hosts": hosts, "remote": remote})
            + "\n",
            encoding="utf-8",
        )
    except OSError as e:  # the run itself does not need it: only `logs` is left without it
        say(f"cannot record run {rid} in {f} ({e.strerror or e}): mlenv logs will not find it")


def log_text(cluster: Cluster, root: Path, tail: int | None = None) -> str:
    """The head host's run log: rank 0's ``logs/rank0.<host>.log`` in the last run's report
    folder (the shared folder while it runs, the copy under ``reports/`` once it ended;
    host 0's folder over ssh where this machine sees neither: no shared folder, or one it
    does not mount)."""
    f = run_record(root, cluster)
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
        rid, report, head = str(d["run_id"]), Path(d["report_dir"]), str(d["hosts"][0])
        remote = d.get("remote") is True
    except FileNotFoundError:
        raise InputError(
            f"no hosts run recorded for {cluster.name} (run: mlenv acceptance --cluster "
            f"{cluster.name})"
        ) from None
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise InputError(
            f"{f}: unreadable run record ({e}); run mlenv acceptance --cluster {cluster.name} again"
        ) from None
    # a relative remote folder is not a path here (it would be read from this machine's cwd)
    folders = (
        [root / "reports" / cluster.name / rid]
        if remote
        else [report, root / "reports" / cluster.name / rid]
    )
    found = sorted(p for d_ in folders for p in (d_ / "logs").glob("rank0.*.log"))
    if found:
        try:
            text = found[0].read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise InfraError(f"run {rid}: cannot read {found[0]}: {e.strerror or e}") from None
    elif remote or not report.is_dir():  # also a shared folder this machine does not mount
        text = _remote_log(cluster, head, str(report), rid)
    else:
        raise InfraError(
            f"run {rid}: no rank 0 log in {report}/logs yet (host {head}, the head, "
            "writes it once the suite starts)"
        )
    if tail is not None:
        text = "".join(text.splitlines(keepends=True)[-tail:]) if tail else ""
    return text


# Prints the first rank 0 log in the folder $1 names; exit 3 when there is none yet.
LOG_SCRIPT = (
    'for f in "$1"/logs/rank0.*.log; do if [ -f "$f" ]; then exec cat -- "$f"; fi; done; exit 3'
)


def _remote_log(cluster: Cluster, head: str, report: str, rid: str) -> str:
    """Rank 0's log of run ``rid``, read on host ``head`` over ssh (no shared folder)."""
    try:
        r = subprocess.run(
            ssh_words(cluster, head, ["sh", "-c", LOG_SCRIPT, "mlenv-logs", report]),
            capture_output=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise InfraError(
            f"run {rid}: host {head} did not send its rank 0 log within 60 s"
        ) from None
    except FileNotFoundError:
        raise InfraError("ssh: not found (install openssh-client)") from None
    last = (r.stderr.decode(errors="replace").strip().splitlines() or [f"exit {r.returncode}"])[-1]
    if r.returncode == 3:
        raise InfraError(
            f"run {rid}: no rank 0 log in {report}/logs on host {head} yet (the head writes it "
            "once the suite starts)"
        )
    if r.returncode == 255:
        raise InfraError(f"run {rid}: host {head} (the head): ssh unreachable: {last}")
    if r.returncode != 0:
        raise InfraError(f"run {rid}: host {head}: cannot read its rank 0 log: {last}")
    return r.stdout.decode(errors="replace")


def status_lines(cluster: Cluster) -> list[str]:
    """Each host: reachable over ssh with its versions, or why not (nothing is started)."""
    return status_report(cluster)[0]


def status_report(cluster: Cluster) -> tuple[list[str], list[str]]:
    """:func:`status_lines` and the hosts ssh could not reach.

    InfraError (exit 3, one line) when ssh reaches no host at all: a status of nothing but
    "unreachable" lines is the cluster being unreachable, not a report."""
    hosts = hosts_of(cluster, None)
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        found = list(pool.map(lambda h: _probe(cluster, h, PROBE_TIMEOUT_S), hosts))
    down = [
        (h, v)
        for h, v in zip(hosts, found, strict=True)
        if isinstance(v, str) and v.startswith(UNREACHABLE)
    ]
    if len(down) == len(hosts):
        first, why = down[0]
        raise InfraError(
            f"status: no host is reachable over ssh: {', '.join(hosts)} "
            f"({first}: {why[len(UNREACHABLE) :]})"
        )
    lines = []
    for i, (h, v) in enumerate(zip(hosts, found, strict=True)):
        head = " (head)" if i == 0 else ""
        if isinstance(v, str):
            lines.append(f"host {h}{head}: {v}")
        else:
            lines.append(
                f"host {h}{head}: up, python {v['python']}, torch {v['torch']}, "
                f"deepspeed {v.get('deepspeed')}, {v.get('gpus', 0)} GPU(s)"
            )
    return lines, [h for h, _ in down]


def sync(cluster: Cluster, root: Path) -> str:
    """``workspace/`` to ``<shared_dir>/workspace`` through host 0, or to ``~/mlenv-workspace``
    on every host without a shared folder: a tar stream over ssh (adds and updates only)."""
    src = root / "workspace"
    if not src.is_dir():
        raise InputError(f"no workspace/ folder under {root}")
    hosts = hosts_of(cluster, None)
    shared = cluster.hosts.shared_dir
    dest = f"{shared.rstrip('/')}/workspace" if shared else "mlenv-workspace"
    targets = hosts[:1] if shared else hosts
    for h in targets:
        _push(cluster, h, dest, [(child, child.name) for child in sorted(src.iterdir())], "sync")
    return f"synced {src} -> {dest} on {', '.join(targets)}"


def _push(cluster: Cluster, h: str, dest: str, items: list[tuple[Path, str]], what: str) -> None:
    """``items`` (path here, name there) into ``dest`` on host ``h``: ``mkdir -p``, then a tar
    stream over ssh (adds and updates only); InfraError naming the host and ``what``."""
    import tarfile

    r = subprocess.run(
        ssh_words(cluster, h, ["mkdir", "-p", "--", dest]),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if r.returncode != 0:
        raise InfraError(
            f"{what}: host {h}: mkdir {dest}: {(r.stderr.strip().splitlines() or ['failed'])[-1]}"
        )
    p = subprocess.Popen(
        ssh_words(cluster, h, ["tar", "-x", "-f", "-", "-C", dest]),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert p.stdin is not None
    try:
        with tarfile.open(fileobj=p.stdin, mode="w|") as tar:
            for path, name in items:
                tar.add(str(path), arcname=name)
    except BrokenPipeError:
        pass  # tar on the host ended early: its message comes below
    _, err = p.communicate(timeout=600)  # closes our end of the stream
    if p.returncode != 0:
        raise InfraError(
            f"{what}: host {h}: tar: {(err.decode(errors='replace').strip().splitlines() or ['failed'])[-1]}"
        )


def shell_argv(
    cluster: Cluster, command: list[str], host: int = 0, tty: bool = False, log: str = ""
) -> list[str]:
    """``ssh [-t] [-E LOG] … -- HOST [COMMAND…]``: a login shell (or COMMAND) on host ``host``."""
    hosts = hosts_of(cluster, None)
    if not 0 <= host < len(hosts):
        raise InputError(f"--pod {host}: nodes.gpu_nodes lists {len(hosts)} host(s)")
    h = cluster.hosts
    key = str(Path(h.ssh_key).expanduser()) if h.ssh_key else ""
    opts = [*SSH_OPTIONS, *(["-t"] if tty else [])]
    return argv.ssh(
        hosts[host],
        command,
        user=h.ssh_user,
        port=h.ssh_port,
        key=key,
        options=opts,
        config=os.environ.get("MLENV_SSH_CONFIG", ""),
        log=log,
    )


def shell(cluster: Cluster, command: list[str], host: int = 0, tty: bool = False) -> int:
    """Run :func:`shell_argv` with the terminal attached; the command's exit code.

    ssh's own messages go to a log file (``-E``), not the terminal: when ssh itself fails
    (exit 255 with a message there: refused, unreachable, authentication), that is one
    line naming the host, exit 3, instead of ssh's 255 and its raw text. A remote command
    that exits 255 leaves the log empty and keeps its 255.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mlenv-ssh-") as tmp:
        log = Path(tmp) / "ssh.log"
        words = shell_argv(cluster, command, host, tty, log=str(log))  # checks the index
        try:
            rc = subprocess.call(words)
        except FileNotFoundError:
            raise InfraError("ssh: not found (install openssh-client)") from None
        try:
            said = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            said = []
    if rc == 255 and said:
        raise InfraError(f"shell: host {hosts_of(cluster, None)[host]}: {said[-1]}")
    return rc


LOST_GRACE_S = 60.0  # after a host is lost, how long the others may take to write the report


def _wait_all(
    hosts: list[str], procs: list[subprocess.Popen[bytes]], timeout_s: float, say: Say
) -> tuple[list[str], list[int]]:
    """Wait for every host's ssh session; the hosts whose connection was lost (ssh exit
    255), and the indexes of the sessions still open when the wait gave up.

    Watched together: a lost host is said at once, and the others then get
    :data:`LOST_GRACE_S` to finish (rank 0 writes the ERROR report naming the dead ranks).
    Once the head host's session has ended by itself (rank 0 has left: the report is
    written, or rank 0 crashed), the others get ``MLENV_AFTER_VERDICT_GRACE_S`` (default
    60, :func:`contract.after_verdict_grace_s`): a rank stopped or hung there would
    otherwise keep the run waiting until ``timeout_s``. The caller stops the run on the
    hosts whose sessions are still open (ending the ssh alone would leave their ranks).
    """
    after = contract.after_verdict_grace_s(os.environ)
    end = time.monotonic() + max(1.0, timeout_s)
    lost: list[str] = []
    head_done = False
    while any(p.poll() is None for p in procs) and time.monotonic() < end:
        for h, p in zip(hosts, procs, strict=True):
            if p.returncode == 255 and not any(x.startswith(h + " ") for x in lost):
                lost.append(f"{h} (ssh connection lost)")
                say(f"host {h}: ssh connection lost during the run")
                end = min(end, time.monotonic() + LOST_GRACE_S)
        if not head_done and procs and procs[0].returncode not in (None, 255):
            head_done = True
            end = min(end, time.monotonic() + after)
        time.sleep(0.5)
    left = [i for i, p in enumerate(procs) if p.poll() is None]
    for h, p in zip(hosts, procs, strict=True):
        if p.returncode == 255 and not any(x.startswith(h + " ") for x in lost):
            lost.append(f"{h} (ssh connection lost)")
    if left and head_done:
        say(
            f"host {hosts[0]} (rank 0) ended {after:g} s ago and the run goes on on "
            f"{', '.join(hosts[i] for i in left)} (a rank stopped or hung there): stopping it there"
        )
    return lost, left
