"""``platform: hosts``: plain machines over ssh (``nodes.gpu_nodes``; host 0 is the head).

Preflight asks every host over ssh, in parallel, for its Python, torch and DeepSpeed
versions and its GPU count, and names each host that does not answer (before anything
is launched) or differs. The launch is the same shape as on Slurm: one torchrun per host
(``--nnodes H --node_rank I``), static rendezvous on host 0; the environment (NCCL_*,
MLENV_*) is passed as ``env K=V …`` words, each one quoted by :func:`mlenv.argv.ssh`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mlenv import argv, contract
from mlenv.config.model import Cluster
from mlenv.errors import EXIT_SIGINT, EXIT_SIGTERM, InfraError, InputError, Interrupted
from mlenv.platforms import nodeprobe

Say = Callable[[str], None]
SSH_OPTIONS = ("-oBatchMode=yes", "-oConnectTimeout=5", "-oStrictHostKeyChecking=accept-new",
               "-oServerAliveInterval=5", "-oServerAliveCountMax=3")
# A dead host is told by ssh's ConnectTimeout (5 s); this bounds a live host's python
# importing torch and DeepSpeed, which took over 20 s on a loaded 2-core test machine
# (status then said "no answer over ssh" of a host that had answered).
PROBE_TIMEOUT_S = 60.0
PROBE = nodeprobe.PROBE  # versions, GPUs, and what the suite cannot import (issue 24 §2)
UNREACHABLE = "ssh unreachable: "  # how a probe says ssh itself failed (exit 255)


def ssh_words(cluster: Cluster, host: str, remote: list[str]) -> list[str]:
    """The ssh argv reaching ``host`` as the config says (user, port, key)."""
    h = cluster.hosts
    key = str(Path(h.ssh_key).expanduser()) if h.ssh_key else ""
    # MLENV_SSH_CONFIG: an ssh_config file for these hosts (jump hosts, known_hosts file, ...)
    return argv.ssh(host, remote, user=h.ssh_user, port=h.ssh_port, key=key, options=SSH_OPTIONS,
                    config=os.environ.get("MLENV_SSH_CONFIG", ""))


def hosts_of(cluster: Cluster, nodes: int | None) -> list[str]:
    n = nodes if nodes is not None else len(cluster.gpu_nodes)
    if not 1 <= n <= len(cluster.gpu_nodes):
        raise InputError(f"--nodes {n}: nodes.gpu_nodes lists {len(cluster.gpu_nodes)} host(s)")
    return [argv.slurm_node(h) for h in cluster.gpu_nodes[:n]]


def _probe(cluster: Cluster, host: str, timeout: float) -> dict[str, Any] | str:
    return probe_with(cluster, host, nodeprobe.node_python(cluster), timeout)


def probe_with(cluster: Cluster, host: str, python: str, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any] | str:
    """:data:`PROBE` run by ``python`` on ``host`` over ssh: what it found, or why not (a line)."""
    words = ssh_words(cluster, host, [python, "-c", PROBE])
    try:
        r = subprocess.run(words, capture_output=True, text=True, timeout=timeout, check=False,
                           stdin=subprocess.DEVNULL)
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


def preflight(cluster: Cluster, *, say: Say, nodes: int | None = None,
              timeout: float = PROBE_TIMEOUT_S) -> list[str]:
    """Every host answers over ssh with the same Python/torch/DeepSpeed and enough GPUs;
    InfraError (exit 3) naming each host that does not, before anything is launched."""
    hosts = hosts_of(cluster, nodes)
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        found = dict(zip(hosts, pool.map(lambda h: _probe(cluster, h, timeout), hosts), strict=True))
    problems = [f"host {h}: {v}" for h, v in found.items() if isinstance(v, str)]
    ok = {h: v for h, v in found.items() if isinstance(v, dict)}
    for h, v in ok.items():  # the first host lacking a module: one line, the fix in it
        line = nodeprobe.missing_line(cluster, f"host {h}", v, stopped="nothing was launched")
        if line:
            raise InfraError(line)
    for key in ("python", "torch", "deepspeed"):
        seen = {str(v.get(key)) for v in ok.values()}
        if len(seen) > 1:
            problems.append(f"{key} differs: " + ", ".join(f"{h} {v.get(key)}" for h, v in ok.items()))
    if cluster.gpus.type.lower() != "cpu":
        for h, v in ok.items():
            if int(v.get("gpus") or 0) < cluster.gpus.per_node:
                problems.append(f"host {h}: {v.get('gpus')} GPU(s), gpus.per_node is {cluster.gpus.per_node}")
    if problems:
        raise InfraError("preflight: " + "; ".join(problems) + ": nothing was launched")
    for h, v in ok.items():
        say(f"preflight: host {h}: python {v['python']}, torch {v['torch']}, deepspeed {v.get('deepspeed')}, "
            f"{v.get('gpus', 0)} GPU(s)")
    return hosts


def acceptance(cluster: Cluster, root: Path, say: Say, *, nodes: int | None = None, profile: str = "quick",
               suite_args: list[str] | None = None, timeout_s: float = 3600.0) -> int:
    """Preflight, one torchrun per host over ssh, wait, judge, copy back; the exit code."""
    from mlenv.acceptance.records.rundir import mark_interrupted
    from mlenv.acceptance.reports import console
    from mlenv.acceptance.run.local import signals_as_interrupts
    from mlenv.platforms.slurm import judge_report, new_run_id, record_here
    from mlenv.render.platforms import launch_plan

    hosts = preflight(cluster, say=say, nodes=nodes)
    plan = launch_plan(cluster, len(hosts))  # what `mlenv render` writes to hosts/<cluster>/launch-plan.json
    plan["python"] = nodeprobe.node_python(cluster)  # the staged venv's once `mlenv stage` made one
    rid = new_run_id()
    argv.slurm_name(profile, "profile")
    if not cluster.hosts.shared_dir:
        raise InputError(f"{cluster.source}: hosts.shared_dir is empty: copying reports back over ssh is "
                         "not implemented yet; set a filesystem every host sees")
    report = Path(cluster.hosts.shared_dir) / "results" / rid
    env = {**plan["env"], "MLENV_PLATFORM": "hosts", "MLENV_CLUSTER": cluster.name, "MLENV_RUN_ID": rid,
           "MLENV_NNODES": str(len(hosts)), "MLENV_GPUS_PER_NODE": str(plan["ranks_per_host"]),
           "PYTHONUNBUFFERED": "1"}
    if plan["device"] == "cpu":
        env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    for k in ("TORCH_EXTENSIONS_DIR",):  # DeepSpeed op cache, when the caller set one
        if os.environ.get(k):
            env[k] = os.environ[k]
    record_run(root, cluster, rid, report, hosts, say)
    procs: list[subprocess.Popen[bytes]] = []
    t0 = time.monotonic()
    stopped: Interrupted | None = None
    # The ssh sessions run in their own sessions (a Ctrl-C at this terminal must not cut
    # them before the ranks are told), so no signal given to mlenv reaches them or the
    # remote ranks: Ctrl-C, SIGTERM and SIGHUP are turned into Interrupted here and the
    # run is stopped on every host (issue 24 §3: SIGTERM left 6 remote ranks running).
    with signals_as_interrupts():
        try:
            for i, h in enumerate(plan["hosts"]):
                remote = ["env", *(f"{k}={v}" for k, v in env.items()), plan["python"], "-m",
                          "torch.distributed.run", f"--nnodes={len(plan['hosts'])}", f"--node_rank={i}",
                          f"--nproc_per_node={plan['ranks_per_host']}", f"--master_addr={plan['master_addr']}",
                          f"--master_port={plan['master_port']}", "--max_restarts=0",
                          "-m", "mlenv.acceptance", "--profile", profile, "--report-dir", str(report),
                          *(suite_args or [])]
                procs.append(subprocess.Popen(ssh_words(cluster, h, remote), stdin=subprocess.DEVNULL,
                                              start_new_session=True))
            say(f"launched run {rid} on {', '.join(hosts)} ({len(hosts)} x {cluster.gpus.per_node} rank(s)); "
                f"reports: {report}")
            lost = _wait_all(hosts, procs, timeout_s - (time.monotonic() - t0), say)
        except KeyboardInterrupt as e:
            stopped = e if isinstance(e, Interrupted) else Interrupted("SIGINT")
            say(f"{stopped.signal_name}: stopping run {rid} on {', '.join(hosts)}")
            # before the SIGTERM: rank 0 reads it, and says INTERRUPTED, not "the launcher stopped it"
            mark_interrupted(report, stopped.signal_name)
            stop_run(cluster, hosts[:len(procs)], rid, procs)
            lost = []
    forced = f"host {', '.join(lost)} during the run" if lost else None
    # stopped before rank 0 wrote its report (a CI run's SIGTERM came while the ranks still
    # started): INTERRUPTED, the way it was stopped, not ERROR
    doc = judge_report(report, rid, forced_error=forced,
                       fallback_why=f"the run on {', '.join(hosts)} ended before rank 0 wrote results.json",
                       interrupted=stopped.signal_name if stopped is not None else None)
    dest = root / "reports" / cluster.name / rid
    if report.is_dir():
        shutil.copytree(report, dest, dirs_exist_ok=True, symlinks=True)
    # rank 0 recorded the run in host 0's working folder (the ssh user's home), which
    # `mlenv history` here never reads: the control host's history gets it, as on Slurm
    # (i26.3: a scheduled run from the cron line is in the trends like any other)
    record_here(root, cluster, dest, doc, say)
    say(console.verdict_block(doc, str(dest)))
    code = contract.exit_for_doc(doc)
    if stopped is not None and code not in (EXIT_SIGINT, EXIT_SIGTERM):
        return stopped.exit_code  # stopped before rank 0 could finalise: still the signal's code
    return code


STOP_GRACE_S = 40.0  # rank 0 finalises the report on SIGTERM; torchrun waits 30 s for its ranks


def stop_run(cluster: Cluster, hosts: list[str], rid: str, procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to the run's processes on every host (torchrun and its ranks: each has the run's
    report folder ``…/results/<rid>`` on its command line), then its ssh sessions end.

    Ending the local ssh alone would leave the ranks running: without a terminal, sshd
    sends them no SIGHUP. The pattern's ``[/]`` keeps pkill from matching the remote shell
    that runs it (its command line holds ``[/]``, not ``/``). A session still open after
    :data:`STOP_GRACE_S` is killed.
    """
    pattern = f"[/]results/{argv.slurm_name(rid, 'run id')}"

    def one(h: str) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run(ssh_words(cluster, h, ["pkill", "-TERM", "-f", pattern]), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=30, check=False, start_new_session=True)

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


def run_record(root: Path, cluster: Cluster) -> Path:
    """Where the control host keeps the cluster's last run (as Slurm keeps its last job)."""
    return root / ".mlenv" / "hosts" / f"{cluster.name}.json"


def record_run(root: Path, cluster: Cluster, rid: str, report: Path, hosts: list[str], say: Say) -> None:
    """Note the run being launched, so that ``logs`` can find its report folder."""
    f = run_record(root, cluster)
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"run_id": rid, "report_dir": str(report), "hosts": hosts}) + "\n",
                     encoding="utf-8")
    except OSError as e:  # the run itself does not need it: only `logs` is left without it
        say(f"cannot record run {rid} in {f} ({e.strerror or e}): mlenv logs will not find it")


def log_text(cluster: Cluster, root: Path, tail: int | None = None) -> str:
    """The head host's run log: rank 0's ``logs/rank0.<host>.log`` in the last run's report
    folder (the shared folder while it runs, the copy under ``reports/`` once it ended)."""
    f = run_record(root, cluster)
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
        rid, report, head = str(d["run_id"]), Path(d["report_dir"]), str(d["hosts"][0])
    except FileNotFoundError:
        raise InputError(f"no hosts run recorded for {cluster.name} (run: mlenv acceptance --cluster "
                         f"{cluster.name})") from None
    except (OSError, ValueError, TypeError, KeyError, IndexError) as e:
        raise InputError(f"{f}: unreadable run record ({e}); run mlenv acceptance --cluster {cluster.name} "
                         "again") from None
    folders = [report, root / "reports" / cluster.name / rid]
    found = sorted(p for d_ in folders for p in (d_ / "logs").glob("rank0.*.log"))
    if not found:
        raise InfraError(f"run {rid}: no rank 0 log in {report}/logs yet (host {head}, the head, "
                         "writes it once the suite starts)")
    try:
        text = found[0].read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise InfraError(f"run {rid}: cannot read {found[0]}: {e.strerror or e}") from None
    if tail is not None:
        text = "".join(text.splitlines(keepends=True)[-tail:]) if tail else ""
    return text


def status_lines(cluster: Cluster) -> list[str]:
    """Each host: reachable over ssh with its versions, or why not (nothing is started)."""
    return status_report(cluster)[0]


def status_report(cluster: Cluster) -> tuple[list[str], list[str]]:
    """:func:`status_lines` and the hosts ssh could not reach.

    InfraError (exit 3, one line) when ssh reaches no host at all: a status of nothing but
    "unreachable" lines is the cluster being unreachable, not a report (issue 24 §3)."""
    hosts = hosts_of(cluster, None)
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        found = list(pool.map(lambda h: _probe(cluster, h, PROBE_TIMEOUT_S), hosts))
    down = [(h, v) for h, v in zip(hosts, found, strict=True) if isinstance(v, str) and v.startswith(UNREACHABLE)]
    if len(down) == len(hosts):
        first, why = down[0]
        raise InfraError(f"status: no host is reachable over ssh: {', '.join(hosts)} "
                         f"({first}: {why[len(UNREACHABLE):]})")
    lines = []
    for i, (h, v) in enumerate(zip(hosts, found, strict=True)):
        head = " (head)" if i == 0 else ""
        if isinstance(v, str):
            lines.append(f"host {h}{head}: {v}")
        else:
            lines.append(f"host {h}{head}: up, python {v['python']}, torch {v['torch']}, "
                         f"deepspeed {v.get('deepspeed')}, {v.get('gpus', 0)} GPU(s)")
    return lines, [h for h, _ in down]


def sync(cluster: Cluster, root: Path) -> str:
    """``workspace/`` to ``<shared_dir>/workspace`` through host 0, or to ``~/mlenv-workspace``
    on every host without a shared folder: a tar stream over ssh (adds and updates only)."""
    import tarfile

    src = root / "workspace"
    if not src.is_dir():
        raise InputError(f"no workspace/ folder under {root}")
    hosts = hosts_of(cluster, None)
    shared = cluster.hosts.shared_dir
    dest = f"{shared.rstrip('/')}/workspace" if shared else "mlenv-workspace"
    targets = hosts[:1] if shared else hosts
    for h in targets:
        r = subprocess.run(ssh_words(cluster, h, ["mkdir", "-p", "--", dest]), capture_output=True, text=True,
                           timeout=60, check=False, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise InfraError(f"sync: host {h}: mkdir {dest}: {(r.stderr.strip().splitlines() or ['failed'])[-1]}")
        p = subprocess.Popen(ssh_words(cluster, h, ["tar", "-x", "-f", "-", "-C", dest]), stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert p.stdin is not None
        try:
            with tarfile.open(fileobj=p.stdin, mode="w|") as tar:
                for child in sorted(src.iterdir()):
                    tar.add(str(child), arcname=child.name)
        except BrokenPipeError:
            pass  # tar on the host ended early: its message comes below
        _, err = p.communicate(timeout=600)  # closes our end of the stream
        if p.returncode != 0:
            raise InfraError(f"sync: host {h}: tar: {(err.decode(errors='replace').strip().splitlines() or ['failed'])[-1]}")
    return f"synced {src} -> {dest} on {', '.join(targets)}"


def shell_argv(cluster: Cluster, command: list[str], host: int = 0, tty: bool = False,
               log: str = "") -> list[str]:
    """``ssh [-t] [-E LOG] … -- HOST [COMMAND…]``: a login shell (or COMMAND) on host ``host``."""
    hosts = hosts_of(cluster, None)
    if not 0 <= host < len(hosts):
        raise InputError(f"--pod {host}: nodes.gpu_nodes lists {len(hosts)} host(s)")
    h = cluster.hosts
    key = str(Path(h.ssh_key).expanduser()) if h.ssh_key else ""
    opts = [*SSH_OPTIONS, *(["-t"] if tty else [])]
    return argv.ssh(hosts[host], command, user=h.ssh_user, port=h.ssh_port, key=key, options=opts,
                    config=os.environ.get("MLENV_SSH_CONFIG", ""), log=log)


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


def _wait_all(hosts: list[str], procs: list[subprocess.Popen[bytes]], timeout_s: float, say: Say) -> list[str]:
    """Wait for every host's ssh session; the hosts whose connection was lost (ssh exit 255).

    Watched together: a lost host is said at once, and the others then get
    :data:`LOST_GRACE_S` to finish (rank 0 writes the ERROR report naming the dead ranks)
    before their sessions are ended. Past ``timeout_s`` every session is ended.
    """
    end = time.monotonic() + max(1.0, timeout_s)
    lost: list[str] = []
    while any(p.poll() is None for p in procs) and time.monotonic() < end:
        for h, p in zip(hosts, procs, strict=True):
            if p.returncode == 255 and not any(x.startswith(h + " ") for x in lost):
                lost.append(f"{h} (ssh connection lost)")
                say(f"host {h}: ssh connection lost during the run")
                end = min(end, time.monotonic() + LOST_GRACE_S)
        time.sleep(0.5)
    for h, p in zip(hosts, procs, strict=True):
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
        elif p.returncode == 255 and not any(x.startswith(h + " ") for x in lost):
            lost.append(f"{h} (ssh connection lost)")
    return lost
