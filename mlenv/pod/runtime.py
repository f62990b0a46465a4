"""The pod runtime: the verbs of ``python -m mlenv.pod`` and the pod layout they share.

One naming scheme: ``python -m mlenv.pod <verb>`` runs :func:`verb_<verb>` (``init`` →
:func:`verb_init`, ``run-torchrun`` → :func:`verb_run_torchrun`); each returns the exit
code. Everything else here is a helper of those verbs. The module keeps its name because
``mlenv status`` runs ``from mlenv.pod.runtime import paths_from`` inside pods whose image
may be older than the CLI.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mlenv.contract import is_dns_label
from mlenv.errors import EXIT_OK, InfraError, InputError
from mlenv.pod import detach, dsenv, hostfile, interfaces, launch, preflight, rdma, runlock, ssh
from mlenv.pod.env import PodEnv, pod_env, upstream_vars


def say(msg: str) -> None:
    """Progress for the pod log / the user's terminal (stderr, prefixed)."""
    print(f"mlenv.pod: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Paths:
    """Where ``pod init`` writes and the other verbs read."""

    home: str
    state_dir: str

    @property
    def hostfile(self) -> str:
        return os.path.join(self.state_dir, "hostfile")

    @property
    def deepspeed_env(self) -> str:
        """Rewritten by every launch; the launcher reads it through ``DS_ENV_FILE``."""
        return os.path.join(self.home, ".deepspeed_env")

    @property
    def forward_env(self) -> str:
        """What ``init`` selected from the pod's environment: the base every launch merges onto."""
        return os.path.join(self.state_dir, "forward.env")

    @property
    def env_file(self) -> str:
        """Everything forwarded plus this pod's own values, as ``export`` lines."""
        return os.path.join(self.state_dir, "env.sh")

    @property
    def node_env(self) -> str:
        """Only the per-pod values (NCCL_IB_HCA from discovery, nss_wrapper's), ``KEY=value`` lines."""
        return os.path.join(self.state_dir, "node.env")

    @property
    def ssh(self) -> ssh.SshPaths:
        return ssh.SshPaths(self.state_dir)


def paths_from(env: Mapping[str, str]) -> Paths:
    """HOME (else the passwd home, else /tmp) and MLENV_STATE_DIR (else ``$HOME/.mlenv``)."""
    home = env.get("HOME") or os.path.expanduser("~")
    if not home or home == "/" or not os.access(home, os.W_OK):
        home = env.get("TMPDIR", "/tmp")
    return Paths(home=home, state_dir=env.get("MLENV_STATE_DIR") or os.path.join(home, ".mlenv"))


def read_node_env(path: str) -> dict[str, str]:
    """The per-pod values ``init`` discovered ({} when none)."""
    try:
        with open(path, encoding="utf-8") as f:
            return dsenv.parse(f.read())
    except OSError:
        return {}


def host_patterns(pe: PodEnv) -> list[str]:
    """ssh Host patterns that cover every pod's DNS name."""
    base = f"*.{pe.headless}.{pe.namespace}.svc"
    return [base, f"{base}.cluster.local"]


UPSTREAM_HOSTFILE = os.path.join(".deepspeed", "hostfile")


def upstream_hostfile_path(env: Mapping[str, str]) -> str:
    """Upstream ml-dev-env's hostfile, ``/workspace/.deepspeed/hostfile`` (its scripts and
    docs pass it to ``launch_deepspeed.sh`` and ``deepspeed --hostfile``)."""
    return os.path.join(env.get("MLENV_WORKSPACE", "/workspace"), UPSTREAM_HOSTFILE)


def _upstream_hostfile(env: Mapping[str, str], text: str) -> None:
    """the hostfile at upstream's path too. Only inside a workspace that exists (the
    mounted volume; never created here). ``sync --delete`` leaves it: dot paths are
    protected (cluster/treehash.py). A read-only workspace costs a warning, not the pod."""
    path = upstream_hostfile_path(env)
    if not os.path.isdir(os.path.dirname(os.path.dirname(path))):
        return
    try:
        hostfile.write_text(path, text)
    except OSError as e:
        say(
            f"warning: cannot write upstream's hostfile {path} ({e.strerror}); "
            "use $HOME/.mlenv/hostfile"
        )
        return
    say(f"hostfile also at {path} (upstream ml-dev-env's path)")


def verb_init(
    env: Mapping[str, str],
    *,
    start_sshd: bool = True,
    foreground: bool = False,
    sysfs_root: str = "/sys",
    strict_memlock: bool = True,
    memlock_check: Callable[[], str | None] = rdma.check_memlock,
    passwd_path: str = "/etc/passwd",
    group_path: str = "/etc/group",
    start: Callable[[ssh.SshPaths, Mapping[str, str]], None] = ssh.start_daemon,
) -> int:
    """Prepare this pod: hostfile, env files, RDMA checks, ssh; start (or exec) sshd.

    ``memlock_check``, ``passwd_path``/``group_path`` and ``start`` are injectable for
    tests (the real limit, the real /etc files, a real background sshd).
    """
    pe = pod_env(env)
    p = paths_from(env)
    os.makedirs(p.state_dir, mode=0o700, exist_ok=True)
    slots = hostfile.slots_per_node(pe.gpus_per_node, hostfile.count_gpus(env), env)
    hostfile.write_text(p.hostfile, hostfile.render_hostfile(pe.hosts, slots))
    say(f"node rank {pe.rank} of {pe.nnodes}; hostfile {p.hostfile} ({slots} slot(s) per node)")
    _upstream_hostfile(env, hostfile.render_hostfile(pe.hosts, slots))

    # upstream's per-pod names; each pod's sshd sets its own (never pod-0's).
    node_vars: dict[str, str] = upstream_vars(env, pe.rank)
    if env.get("MLENV_NODE_NAME", "").strip():  # the Kubernetes Node, for node verdicts
        node_vars["MLENV_NODE_NAME"] = env["MLENV_NODE_NAME"].strip()
    if "POD_IP" not in node_vars:
        say("warning: POD_IP is not set and the hostname does not resolve; POD_IP stays unset")
    if pe.network_mode == "rdma":
        problem = memlock_check()
        if problem:
            if strict_memlock:
                raise InfraError(problem)
            say(f"warning: {problem}")
        if pe.rdma_devices == "auto":
            hca = rdma.discover_hca(env, sysfs_root)
            node_vars["NCCL_IB_HCA"] = ",".join(hca)
            say(f"RDMA devices (auto): NCCL_IB_HCA={node_vars['NCCL_IB_HCA']}")
        # keep only the configured interfaces (and listed HCAs) this pod has.
        pod_name = env.get("MLENV_POD_NAME", "").strip() or pe.pod_name(pe.rank)
        found = interfaces.check(
            env, pod_name, sysfs_root, hca_names=interfaces.ib_names(sysfs_root)
        )
        node_vars.update(found.env)
        for line in found.lines():
            say(f"interfaces: {line}")
        say(f"interfaces: status in {interfaces.write_status(p.state_dir, found)}")

    secret: dict[str, str] = {}
    ident = ssh.Identity(ssh.current_user())
    if start_sshd:
        secret = ssh.read_secret(pe.ssh_dir)
        ident = ssh.ensure_passwd_entry(
            p.home,
            passwd_path,
            state_dir=p.state_dir,
            group_path=group_path,
            nss_lib=ssh.find_nss_wrapper(env.get("MLENV_NSS_WRAPPER_LIB", "").strip()),
            preload=env.get("LD_PRELOAD", ""),
        )
        if ident.note:
            say(ident.note)
        node_vars.update(ident.env)
    hostfile.write_text(p.node_env, dsenv.render(node_vars))

    per_pod_hca = "NCCL_IB_HCA" in node_vars
    forwarded = dsenv.select(env, per_pod_hca=per_pod_hca, node_keys=node_vars)
    hostfile.write_text(p.forward_env, dsenv.render(forwarded))
    hostfile.write_text(p.deepspeed_env, dsenv.render(forwarded))
    hostfile.write_text(p.env_file, dsenv.render_env_file({**forwarded, **node_vars}))
    say(f"{p.deepspeed_env}: {len(forwarded)} variable(s) for remote ranks")

    if not start_sshd:
        return EXIT_OK
    ssh.install(p.ssh, secret, pe.ssh_port, host_patterns(pe), node_vars, ident.user)
    daemon_env = ssh.sshd_env(env, ident)
    ssh.check_config(p.ssh, daemon_env)
    if foreground:
        argv = ssh.sshd_argv(p.ssh, foreground=True)
        say(f"exec sshd on port {pe.ssh_port} (admits {ident.user})")
        os.execve(argv[0], argv, daemon_env)
    start(p.ssh, daemon_env)
    say(f"sshd listening on port {pe.ssh_port} (admits {ident.user})")
    return EXIT_OK


def _job(
    env: Mapping[str, str],
    script: list[str],
    module: str | None,
    report_dir: str,
    profile: str | None,
    run_id: str | None = None,
) -> launch.Job:
    if module:
        return launch.Job(
            module, script, module=True, local_rank_flag=module != launch.ACCEPTANCE_MODULE
        )
    if script and not script[0].startswith("-"):
        return launch.Job(script[0], script[1:])
    # No script: the acceptance suite; options after '--' (e.g. --checks, --options) are its own.
    return launch.acceptance_job(report_dir, profile, script, run_id, history_dir=history_dir(env))


def history_dir(env: Mapping[str, str]) -> str | None:
    """Where rank 0 keeps the cluster's history in a pod: ``$MLENV_HISTORY_DIR`` when set (the
    ranks read it themselves: None), else ``<workspace>/results/history``, beside the run
    folders. Before, it was ``reports/`` in the exec's working directory: ``/workspace/reports``
    in our image, which ``sync --delete`` removes (only ``results/`` is kept), or ``/reports``
    in an image whose working directory is ``/``, lost with the container (seen on the kube
    tier). A history already kept at ``/workspace/reports`` is copied over once (mlenv wrote
    it; the old file stays)."""
    if env.get("MLENV_HISTORY_DIR", "").strip():
        return None
    ws = env.get("MLENV_WORKSPACE", "/workspace")
    new = os.path.join(ws, "results", "history")
    cluster = env.get("MLENV_CLUSTER", "").strip()
    if is_dns_label(cluster):  # as the history names it (records.history.current_cluster)
        old = os.path.join(ws, "reports", cluster, "history.jsonl")
        moved = os.path.join(new, cluster, "history.jsonl")
        if os.path.isfile(old) and not os.path.islink(old) and not os.path.lexists(moved):
            try:
                os.makedirs(os.path.dirname(moved), exist_ok=True)
                shutil.copyfile(old, moved)
                say(f"history: {old} copied to {moved} (the history's place in a pod now)")
            except OSError as e:  # the run goes on; its history starts afresh there
                say(f"history: could not copy {old} to {moved}: {e}")
    return new


def _report_dir(env: Mapping[str, str], report_dir: str | None, run_id: str) -> str:
    if report_dir:
        return report_dir
    return os.path.join(env.get("MLENV_WORKSPACE", "/workspace"), "results", run_id)


def check_peers(pe: PodEnv, hosts: list[str], deadline_s: float) -> None:
    """Raise InfraError naming each peer whose name or sshd is missing at the deadline."""
    res = preflight.preflight(
        [preflight.Peer(h, pe.ssh_port, b"SSH-") for h in hosts], deadline_s=deadline_s
    )
    missing = [r for r in res if not r.ok]
    if missing:
        raise InfraError(
            f"preflight: {len(missing)} of {len(hosts)} peer(s) missing after {deadline_s:g} s:\n  "
            + "\n  ".join(r.describe() for r in missing)
        )
    say(f"preflight: all {len(hosts)} peer(s) answer on port {pe.ssh_port}")


def verb_launch(
    env: Mapping[str, str],
    *,
    script: list[str],
    module: str | None,
    torchrun: bool,
    deadline_s: float,
    profile: str | None,
    report_dir: str | None,
    run_id: str | None,
    skip_preflight: bool = False,
    hostfile_path: str | None = None,
) -> int:
    """pod-0 only: preflight, then the DeepSpeed launcher (or print the torchrun commands).

    ``hostfile_path``: a hostfile given in upstream's positional form, used instead of
    the one ``init`` wrote.
    """
    pe = pod_env(env)
    if pe.rank != 0:
        raise InputError(
            f"'launch' runs on pod 0 only (this is node rank {pe.rank}); "
            f"open a shell in {pe.pod_name(0)} ('make shell') and launch there"
        )
    p = paths_from(env)
    rid = launch.check_run_id(run_id) if run_id else launch.new_run_id()
    rdir = _report_dir(env, report_dir, rid)
    job = _job(env, script, module, rdir, profile, rid)
    if torchrun:
        slots = hostfile.slots_per_node(pe.gpus_per_node, hostfile.count_gpus(env), env)
        say("ssh-less path: run this in every pod i (node rank i), e.g. through 'oc exec':")
        fixed = ["--run-id", rid, "--report-dir", rdir]
        print(
            shlex.join(
                [
                    "python",
                    "-m",
                    "mlenv.pod",
                    "run-torchrun",
                    *fixed,
                    *(["--profile", profile] if profile else []),
                    *(["--module", module] if module else []),
                    *(["--"] if script and script[0].startswith("-") else []),
                    *script,
                ]
            )
        )
        node0 = launch.torchrun_argv(job, pe.nnodes, 0, slots, pe.master_addr, pe.master_port)
        say(f"equivalent torchrun for node 0: {shlex.join(node0)}")
        return EXIT_OK
    hf = hostfile_path or p.hostfile
    hosts = [h for h, _ in hostfile.parse_hostfile(hf)]
    if len(hosts) != pe.nnodes:
        say(f"warning: {hf} lists {len(hosts)} host(s) but MLENV_NNODES={pe.nnodes}")
    if not os.path.isfile(p.ssh.client_config):
        raise hostfile.NotInitialised(p.ssh.client_config)
    if not job.module and not os.path.exists(job.target):
        raise InputError(f"{job.target}: no such script (relative to {os.getcwd()})")
    launch.check_remote_job(job, os.getcwd())
    node_vars = read_node_env(p.node_env)
    launcher_env = launch.deepspeed_env(env, p.ssh.client_config, p.deepspeed_env, node_vars)
    launch.require_tools(launcher_env)
    hostfile.write_text(p.deepspeed_env, launch_deepspeed_env(env, p, node_vars))
    with runlock.held(p.state_dir, rid):  # one suite at a time in these pods
        if not skip_preflight:
            check_peers(pe, hosts, deadline_s)
        argv = launch.deepspeed_argv(
            job,
            os.path.abspath(hf),
            pe.master_addr,
            pe.master_port,
            pe.ssh_port,
            user=ssh.current_user(),
        )
        say(f"run id {rid}; launching on {len(hosts)} node(s)")
        started = time.time()
        acceptance = job.target == launch.ACCEPTANCE_MODULE
        rc = launch.run(argv, launcher_env, verdict_in=(rdir, started) if acceptance else None)
    return _finish(rc, rdir if acceptance or report_dir else None, acceptance, started)


def launch_deepspeed_env(env: Mapping[str, str], p: Paths, node_vars: Mapping[str, str]) -> str:
    """This launch's ``.deepspeed_env``: init's selection, then the launch shell's, then ``./.deepspeed_env``."""
    base = read_node_env(p.forward_env)
    user_text = ""
    local = os.path.abspath(".deepspeed_env")
    if os.path.isfile(local) and os.path.realpath(local) != os.path.realpath(p.deepspeed_env):
        with open(local, encoding="utf-8") as f:
            user_text = f.read()
    return dsenv.launch_file(
        base,
        env,
        per_pod_hca="NCCL_IB_HCA" in node_vars,
        user_file_text=user_text,
        node_keys=node_vars,
    )


def _finish(rc: int, report_dir: str | None, acceptance: bool, started: float) -> int:
    verdict = launch.fresh_verdict(report_dir, started) if report_dir and acceptance else None
    code, note = launch.map_exit(rc, acceptance, verdict)
    if note:
        say(note)
    if report_dir:
        summary = launch.results_summary(report_dir)
        say(summary or f"no results.json in {report_dir}")
    return code


def verb_run_torchrun(
    env: Mapping[str, str],
    *,
    script: list[str],
    module: str | None,
    profile: str | None,
    report_dir: str | None,
    run_id: str | None,
) -> int:
    """The ssh-less path: torchrun in this pod, joining the static rendezvous on pod-0."""
    pe = pod_env(env)
    p = paths_from(env)
    if not run_id and not report_dir and not script and not module:
        raise InputError("run-torchrun: pass the same --run-id (or --report-dir) in every pod")
    rid = launch.check_run_id(run_id) if run_id else launch.new_run_id()
    rdir = _report_dir(env, report_dir, rid)
    job = _job(env, script, module, rdir, profile, rid)
    slots = hostfile.slots_per_node(pe.gpus_per_node, hostfile.count_gpus(env), env)
    child_env = {**env, **read_node_env(p.node_env)}
    # The ranks' HOME is the one the pod's state lives in, as the ssh path's ranks get it
    # from their passwd entry: a random UID's HOME is often "/" (the runtime's default for
    # a UID the image does not know), where DeepSpeed and matplotlib cannot make ~/.cache.
    child_env["HOME"] = p.home
    argv = launch.torchrun_argv(job, pe.nnodes, pe.rank, slots, pe.master_addr, pe.master_port)
    say(
        f"torchrun node {pe.rank}/{pe.nnodes}, {slots} proc(s), rendezvous {pe.master_addr}:{pe.master_port}"
    )
    started = time.time()
    acceptance = job.target == launch.ACCEPTANCE_MODULE
    # Only pod-0 holds the report (rank 0 writes it); elsewhere the exit status alone.
    mine = rdir if pe.rank == 0 and acceptance else None
    with runlock.held(p.state_dir, rid):  # each pod: one suite at a time
        rc = launch.run(argv, child_env, verdict_in=(mine, started) if mine else None)
    return _finish(rc, mine, acceptance, started)


def detached_dir(env: Mapping[str, str], run_id: str | None) -> str:
    """The folder of the detached run ``run_id`` in this pod (InputError for a bad id)."""
    if not run_id:
        raise InputError("a detached run needs its --run-id")
    return detach.run_dir(paths_from(env).state_dir, launch.check_run_id(run_id))


def verb_start_detached(env: Mapping[str, str], run_id: str, words: list[str]) -> int:
    """``run-torchrun --detach``: start the supervised ``run-torchrun WORDS…`` in this pod
    and return once it has written its pid; a second start of the same run finds it and
    starts nothing. A run of another id holding the pod's lock is refused here, before
    anything starts (exit 3), as the run itself would be."""
    state_dir = paths_from(env).state_dir
    detached_dir(env, run_id)  # the id names a folder: checked first
    if not os.path.isdir(detach.run_dir(state_dir, run_id)):
        other = runlock.busy(state_dir)
        if other is not None:
            raise InfraError(
                f"run {other or '(id unreadable)'} is in progress in this pod: nothing "
                "started (wait for it to end; two suites would measure each other)"
            )
    argv = [sys.executable, "-m", "mlenv.pod", "run-torchrun", "--supervised", *words]
    got = detach.start(state_dir, run_id, argv, env)
    where = detach.run_dir(state_dir, run_id)
    say(
        f"run {run_id} started detached (pid {got.pid}); output in {where}/{detach.OUTPUT}"
        if got.fresh
        else f"run {run_id} was already started here (pid {got.pid}): nothing started again"
    )
    return EXIT_OK


def verb_run_follow(env: Mapping[str, str], run_id: str, offset: int) -> int:
    """``run-follow``: the detached run's output from byte ``offset``, framed, to its end."""
    detached_dir(env, run_id)
    if offset < 0:
        raise InputError(f"--offset must be 0 or more, got {offset}")
    out = sys.stdout.buffer  # UTF-8 whatever the pod's locale: the rank's bytes may be anything

    def write(line: str) -> None:
        out.write(f"{line}\n".encode("utf-8", "replace"))
        out.flush()

    detach.follow(paths_from(env).state_dir, run_id, offset, write)
    return EXIT_OK


def verb_run_state(env: Mapping[str, str], run_id: str) -> int:
    """``run-state``: one line saying how the detached run stands."""
    detached_dir(env, run_id)
    print(detach.state(paths_from(env).state_dir, run_id), flush=True)
    return EXIT_OK


def verb_run_stop(env: Mapping[str, str], run_id: str) -> int:
    """``run-stop``: stop the detached run (nothing to stop is no error: stopping is retried)."""
    detached_dir(env, run_id)
    print(detach.stop(paths_from(env).state_dir, run_id), flush=True)
    return EXIT_OK


def verb_preflight(env: Mapping[str, str], deadline_s: float) -> int:
    """Check every host of the hostfile (any pod may run this)."""
    pe = pod_env(env)
    hosts = [h for h, _ in hostfile.parse_hostfile(paths_from(env).hostfile)]
    check_peers(pe, hosts, deadline_s)
    return EXIT_OK
