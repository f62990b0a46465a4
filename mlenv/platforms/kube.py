"""OpenShift and plain Kubernetes behind :class:`~mlenv.platforms.base.Platform`.

The machinery stays where it was: ``mlenv/render`` turns the config into manifests and
``mlenv/cluster`` talks to the API server (deploy, status, sync, fan-out, teardown…).
This module is the verbs' side of it: which client call each verb makes, in what order,
and what it prints. Every call gets its client from ``s.client()``, which the CLI built
from the global options and which has already probed the API server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from mlenv import contract
from mlenv.config.model import PLATFORM_TRAITS
from mlenv.config.model import Platform as PlatformName
from mlenv.contract import BUILD_CONFIG
from mlenv.errors import EXIT_ERROR, EXIT_FAIL, EXIT_INPUT, EXIT_OK, InfraError, InputError
from mlenv.platforms.base import Platform, Session

if TYPE_CHECKING:
    from mlenv.cluster.api import ClusterClient
    from mlenv.cluster.discover import Discovered
    from mlenv.cluster.status import StatusReport
    from mlenv.config.model import Cluster
    from mlenv.quarantine import Plan, Run, Target
    from mlenv.workload import Workload

POD = ["python", "-m", "mlenv.pod"]


def map_exit(rc: int) -> tuple[int, str]:
    """The pod command already speaks the contract (0/1/2/3); any other status comes from a
    crash, a signal or exec itself failing, which is ERROR, never FAIL."""
    if rc in (EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_ERROR):
        return rc, ""
    return EXIT_ERROR, f"exited with status {rc} (crash, signal or exec failure): ERROR"


def new_run_id() -> str:
    """One run id shared by every pod (results go to /workspace/results/<id>), in the one
    format of every platform (``mlenv.contract.new_run_id``)."""
    return contract.new_run_id()


def pod_argv(
    verb: str,
    script: list[str],
    *,
    run_id: str | None = None,
    deadline: float | None = None,
    topology: str | None = None,
) -> list[str]:
    """``python -m mlenv.pod VERB [--run-id ID] [--deadline S] [--topology JSON] [--] SCRIPT…``;
    the ``--`` keeps options meant for the acceptance suite (``-- --checks …``) away from
    the pod's own parser. ``topology``: racks read at launch (one argv element: exec runs
    no shell)."""
    argv = [
        *POD,
        verb,
        *(["--run-id", run_id] if run_id else []),
        *(["--deadline", f"{deadline:g}"] if deadline is not None else []),
        *(["--topology", topology] if topology else []),
    ]
    return argv + (["--"] if script and script[0].startswith("-") else []) + script


def _workload(cfg: Cluster) -> Workload:
    from mlenv.render.names import workload

    return workload(cfg)


def _pod0(cfg: Cluster) -> str:
    """Pod 0 of ``cfg``'s workload: where the launcher runs and the results are."""
    return _workload(cfg).pod_name(0)


def require_running(
    client: ClusterClient, namespace: str, pod: str, cluster: str, *, owner: Cluster | None = None
) -> None:
    """InfraError (exit 3, one line) unless ``pod`` exists and is Running (and, with
    ``owner``, is one of that deployment's worker pods: :func:`require_own_worker`).

    for the verbs that hand the terminal to ``kubectl exec``/``rsh``/``port-forward``
    (launch, shell, port-forward), whose own failure is exit 1 plus client chatter: a
    missing pod must not read as the remote command's (or an acceptance run's) exit 1.
    """
    obj = client.get("Pod", pod, namespace)
    phase = str(((obj or {}).get("status") or {}).get("phase", "Pending"))
    if obj is None or phase != "Running":
        raise InfraError(
            f"pod {pod} in {namespace} is "
            + ("not there" if obj is None else phase)
            + f": nothing was started (mlenv status {cluster}; mlenv deploy {cluster})"
        )
    if owner is not None:
        require_own_worker(client, owner, pod)


def require_own_worker(client: ClusterClient, cfg: Cluster, pod: str) -> None:
    """InfraError (exit 3) unless ``pod`` belongs to the deployment's workload (its
    controller ownerReference, a name the workload runs now): a pod a namespace
    neighbour made under our labels (and a free name) gets no shell, job or log reading."""
    from mlenv.cluster.pods import worker_pods

    if pod in {p.name for p in worker_pods(cfg, client)}:
        return
    if client.get("Pod", pod, cfg.namespace) is None:
        raise InfraError(
            f"pod {pod} in {cfg.namespace} is not there (mlenv status "
            f"{cfg.name}; mlenv deploy {cfg.name})"
        )
    raise InfraError(
        f"pod {pod} in {cfg.namespace} is not a pod of {cfg.name}'s "
        f"{_workload(cfg).kind} (someone else made it): nothing was started "
        f"(mlenv status {cfg.name})"
    )


def label_topology(cfg: Cluster, client: ClusterClient, s: Session) -> str | None:
    """with ``nodes.topology_label`` (and no ``nodes.topology``, which the pods
    already carry), the racks of the pods' Nodes as ``MLENV_TOPOLOGY`` for pod-0's
    launcher; None without. What the cluster refuses is a warning, never the run's end."""
    if not cfg.topology_label or cfg.topology:
        return None
    from mlenv.cluster import topology

    got = topology.read(cfg, client)
    for w in got.warnings:
        s.warn(w)
    if got.info:
        s.say(got.info)
    return got.env_value()


def status_doc(name: str, namespace: str, rep: StatusReport) -> dict[str, Any]:
    """The status report as plain data (``-o json|yaml``)."""
    return {
        "cluster": name,
        "namespace": namespace,
        # the key stays "statefulset" whatever the kind: scripts read -o json by it
        "statefulset": {"name": rep.name, "desired": rep.desired, "ready": rep.ready},
        "pods": [
            {
                "name": p.name,
                "phase": p.phase,
                "waiting_reason": p.waiting_reason,
                "ready": p.ready,
                "restarts": p.restarts,
                "node": p.node,
                "rdma_interfaces": rep.interfaces.get(p.name),
            }
            for p in rep.pods
        ],
        "pvcs": [{"name": n, "phase": ph, "size": size} for n, ph, size in rep.pvcs],
        "neighbours": rep.neighbours,
    }


class KubernetesPlatform(Platform):
    """``platform: openshift`` and ``platform: kubernetes``: a StatefulSet of pods."""

    hints = {
        "acceptance": "the suite runs in its pods: mlenv launch NAME; --cluster is for platform "
        "slurm or hosts",
        "stage": "the pods run the image mlenv build makes, which carries mlenv and DeepSpeed",
    }

    def __init__(self, name: PlatformName = "openshift") -> None:
        self.name = name
        self.traits = PLATFORM_TRAITS[name]

    def render(
        self,
        cfg: Cluster,
        s: Session,
        *,
        modes: tuple[str, ...],
        nodes: int | None,
        out: Path | None,
    ) -> list[tuple[Path, Any]]:
        from mlenv.config import loader
        from mlenv.render.tree import out_dir, render_tree

        planned: list[tuple[Path, Any]] = []
        for mode in modes:
            m = cast(Literal["rdma", "tcp"], mode)  # checked by the CLI
            # also under --all: a silent TCP fallback in k8s/<c>/rdma/ would surprise a deploy
            for text in loader.mode_warnings(cfg, m):
                s.warn(f"warning: {text}")
            planned.append(
                (
                    out_dir(out if out is not None else s.root / "k8s", cfg, m),
                    render_tree(cfg, m, nodes),
                )
            )
        return planned

    def deploy(
        self,
        cfg: Cluster,
        s: Session,
        *,
        mode: str,
        nodes: int | None,
        dry_run: str | None,
        timeout: float,
        no_fallback: bool,
        take_over: bool,
        scale_down: bool = False,
    ) -> None:
        from mlenv.cluster.deploy import DeployOptions, DeployTimeout
        from mlenv.cluster.deploy import deploy as run_deploy
        from mlenv.config import mode_warnings
        from mlenv.render.plan import openshift_features_off
        from mlenv.render.serialize import dump_all

        m = cast(Literal["rdma", "tcp"], mode)
        for w in mode_warnings(cfg, m):
            s.warn(f"warning: {w}")
        off = openshift_features_off(cfg)
        if off:  # beside -o json|yaml's one document, on stderr
            note = f"platform {cfg.platform}: OpenShift-only features are off: {'; '.join(off)}"
            (s.warn if s.output else s.say)(note)
        opts = DeployOptions(
            mode=m,
            nodes=nodes,
            timeout=timeout,
            no_fallback=no_fallback,
            take_over=take_over,
            scale_down=scale_down,
            dry_run=cast(Literal["client", "server"] | None, dry_run),
        )
        if dry_run == "client":
            rep = run_deploy(cfg, opts, None)
            if s.output:  # one document, as `kubectl apply --dry-run=client -o json` prints
                s.emit({"apiVersion": "v1", "kind": "List", "items": rep.manifests}, s.output)
            else:
                s.raw(dump_all(rep.manifests, sort_keys=False))
            s.warn(
                f"plan: {len(rep.manifests)} object(s) for {cfg.name} ({rep.mode}, {rep.nodes} "
                "node(s)); nothing was sent to a cluster (--dry-run client)"
            )
            return
        with s.client() as client:
            try:
                rep = run_deploy(cfg, opts, client, say=s.say)
            except DeployTimeout:
                s.remember(cfg)  # applied, just not Ready: status/teardown target it
                raise
        if dry_run == "server":
            s.say(
                f"server dry run ok: {len(rep.applied)} object(s) accepted"
                + (f"; would recreate {', '.join(rep.recreated)}" if rep.recreated else "")
                + "; nothing changed"
            )
            return
        s.remember(cfg)
        if rep.unchanged:
            s.say(
                f"unchanged: {cfg.name} is already deployed as configured "
                f"({rep.ready}/{rep.nodes} pods Ready, {rep.mode})"
            )
        else:
            s.say(
                f"deployed {cfg.name}: {rep.ready}/{rep.nodes} pods Ready ({rep.mode} mode"
                + (", fell back from rdma" if rep.fallback_reasons else "")
                + ")"
            )

    def status(self, cfg: Cluster, s: Session, *, output: str | None) -> None:
        from mlenv.cluster.status import status as read_status

        with s.client() as client:
            rep = read_status(cfg, client)
        if output is not None:
            s.emit(status_doc(cfg.name, cfg.namespace, rep), output)
            return
        s.say(
            f"{cfg.name} in {cfg.namespace}: {_workload(cfg).kind.lower()} {rep.name} "
            f"{rep.ready}/{rep.desired} Ready"
        )
        if not rep.pods:
            s.say("no pods (not deployed? run: mlenv deploy " + cfg.name + ")")
        else:
            # each table one write, not one per row (a line's echo costs 60 µs: 0.1 s at
            # 512 pods and their claims)
            rows = [f"{'POD':<24} {'PHASE':<10} {'READY':<6} {'RESTARTS':<9} NODE"]
            rows += [
                f"{p.name:<24} {(p.waiting_reason or p.phase):<10} "
                f"{'yes' if p.ready else 'no':<6} {p.restarts:<9} {p.node or '-'}"
                for p in rep.pods
            ]
            s.say("\n".join(rows))
        if rep.neighbours:  # ignored everywhere, named here
            s.warn(
                f"warning: pod(s) {', '.join(rep.neighbours)} carry the labels of {cfg.name} "
                f"but are not its {_workload(cfg).kind}'s: ignored (someone else in namespace "
                f"{cfg.namespace} made them; see docs/security.md)"
            )
        for pod, line in sorted(rep.interfaces.items()):
            s.say(f"{pod}: RDMA interfaces: {line}")
        if rep.pvcs:
            rows = [f"{'PVC':<40} {'STATUS':<8} SIZE"]
            rows += [f"{name:<40} {phase:<8} {size}" for name, phase, size in rep.pvcs]
            s.say("\n".join(rows))

    def logs(self, cfg: Cluster, s: Session, *, pod: str, follow: bool, tail: int | None) -> None:
        with s.client() as client:
            require_own_worker(client, cfg, pod)  # not a neighbour's pod
            client.logs(pod, cfg.namespace, follow=follow, out=s.say, tail=tail)

    def shell(self, cfg: Cluster, s: Session, *, index: int, pod: str, command: list[str]) -> int:
        with s.client() as client:
            require_running(
                client, cfg.namespace, pod, cfg.name, owner=cfg
            )  # else kubectl's exit 1
            return client.interactive(pod, cfg.namespace, command or ["bash", "-l"])

    def sync(
        self,
        cfg: Cluster,
        s: Session,
        *,
        src: str,
        watch: bool,
        interval: float,
        max_rounds: int | None,
        timeout: float | None,
        delete: bool,
        dry_run: bool,
    ) -> None:
        from mlenv.cluster import sync as syncmod

        with s.client() as client:
            if watch:
                n = syncmod.watch(
                    cfg,
                    client,
                    src,
                    interval=interval,
                    max_rounds=max_rounds,
                    timeout=timeout,
                    delete=delete,
                    say=s.say,
                )
                s.say(f"watch ended after {n} sync(s)")
            else:
                syncmod.sync(
                    cfg, client, src, timeout=timeout, delete=delete, dry_run=dry_run, say=s.say
                )

    def launch(
        self,
        cfg: Cluster,
        s: Session,
        *,
        script: list[str],
        torchrun: bool,
        timeout: float | None,
        peer_deadline: float | None = None,
    ) -> int:
        from mlenv.acceptance.run.local import signals_as_interrupts
        from mlenv.cluster.fanout import run_everywhere

        with s.client() as client:
            topology = label_topology(cfg, client, s)
            if torchrun:
                rid = new_run_id()
                # each pod's rank runs detached: SIGTERM and SIGHUP stop them all, as Ctrl-C does
                with signals_as_interrupts():
                    rep = run_everywhere(
                        cfg,
                        client,
                        pod_argv("run-torchrun", script, run_id=rid, topology=topology),
                        s.say,
                        run_id=rid,
                        timeout=timeout,
                        warn=s.warn,
                    )
                for o in rep.failed:
                    s.warn(f"warning: {o.pod} exited {o.returncode}: {o.detail}")
                rc = rep.returncode
            else:
                # kubectl's own failure (no such pod, pod not running) exits 1, which
                # would read as an acceptance FAIL: pod-0 must be Running first (else exit 3)
                require_running(client, cfg.namespace, _pod0(cfg), cfg.name, owner=cfg)
                rc = client.exec_stream(
                    _pod0(cfg),
                    cfg.namespace,
                    pod_argv("launch", script, deadline=peer_deadline, topology=topology),
                    s.say,
                    timeout=timeout,
                )
        code, note = map_exit(rc)
        if note:
            s.warn(f"error: pod ml-dev-env-0: {note}")
        return code

    def port_forward(
        self, cfg: Cluster, s: Session, *, pod: str, ports: list[tuple[int, int]]
    ) -> int:
        if ports:
            with s.client() as client:  # the ports are announced once the server answers
                require_running(client, cfg.namespace, pod, cfg.name, owner=cfg)
                for a, b in ports:
                    s.say(f"127.0.0.1:{a} -> {pod}:{b}")
                return client.port_forward(pod, cfg.namespace, ports)
        from mlenv.render.names import DEV_POD
        from mlenv.render.workload import forward_ports

        tools = forward_ports(cfg)  # the tools' own ports, not their oauth-proxies (see there)
        if not tools:
            raise InputError(
                f"cluster {cfg.name} enables no dev_tools (vscode, jupyter, "
                f"tensorboard); for a debugger use: mlenv port-forward {cfg.name} --debug"
            )
        with s.client() as client:
            require_running(client, cfg.namespace, DEV_POD, cfg.name)
            for t, p, scheme in tools:
                s.say(f"{t}: {scheme}://127.0.0.1:{p}")
            return client.port_forward(DEV_POD, cfg.namespace, [(p, p) for _, p, _ in tools])

    def build(self, cfg: Cluster, s: Session) -> int:
        from mlenv.cluster.api import NotFound

        # deploy renders no BuildConfig for these (mlenv/cluster/deploy.py, image_not_built):
        # "deploy first" would send the user round in a circle
        if cfg.image.ref:
            raise InputError(
                f"{cfg.name} runs image.ref ({cfg.image.ref}): there is nothing to build on the "
                "cluster; push a new image there, or clear image.ref to build the Dockerfile"
            )
        if not cfg.traits.openshift:
            raise InputError(
                f"{cfg.name} is platform {cfg.platform}: builds are OpenShift BuildConfigs; build "
                "the Dockerfile elsewhere and set image.ref to the image"
            )
        with s.client() as client:
            # one bounded read first. `start-build --follow` streams the build's log,
            # so it carries no request timeout: against a server that answers the probe
            # and hangs afterwards it would wait forever, not exit 3 within the timeout
            if client.get("BuildConfig", BUILD_CONFIG, cfg.namespace) is None:
                raise NotFound(
                    f'buildconfigs.build.openshift.io "{BUILD_CONFIG}" not found in '
                    f"{cfg.namespace} (mlenv deploy {cfg.name} first)",
                    kind="BuildConfig",
                    name=BUILD_CONFIG,
                )
            rc = client.start_build(BUILD_CONFIG, cfg.namespace, s.say)
        if rc != 0:
            s.warn(f"error: build of ml-dev-env failed (exit {rc})")
            return EXIT_ERROR
        s.say("build finished: image pushed to the ml-dev-env ImageStream")
        return EXIT_OK

    def url(self, cfg: Cluster, s: Session, *, tool: str) -> None:
        from mlenv.cluster.devloop import require_tool, tool_url

        require_tool(cfg, tool)  # before connecting: a config without the tool needs no cluster
        with s.client() as client:
            u = tool_url(cfg, client, tool)
        s.say(f"{u.tool}: {u.url}")
        s.say(f"  {u.auth}")

    def discover(
        self,
        name: str,
        s: Session,
        *,
        namespace: str,
        ask: Callable[[Discovered], None] | None = None,
    ) -> str:
        from mlenv.cluster.discover import discover as read_cluster
        from mlenv.cluster.discover import to_yaml

        with s.client() as client:
            found = read_cluster(client, name, namespace)
        if ask is not None:
            ask(found)  # the questions come after the cluster answered, not while connected
        return to_yaml(found)

    def gpu_info(self, cfg: Cluster, s: Session) -> int:
        from mlenv.cluster.devloop import gpu_report

        with s.client() as client:
            rows, sections = gpu_report(cfg, client)  # with upstream's topo -m and ibstat
        failed = EXIT_ERROR if any(r.error for r in rows) else EXIT_OK
        if s.output:
            s.emit(
                {
                    "gpus": [dataclasses.asdict(r) for r in rows],
                    "sections": [dataclasses.asdict(sec) for sec in sections],
                },
                s.output,
            )
            return failed
        s.say(f"{'POD':<20} {'GPU':<4} {'NAME':<28} {'MEM USED/TOTAL MiB':<20} UTIL")
        for r in rows:
            if r.error:
                s.say(f"{r.pod:<20} {'-':<4} {r.error}")
            else:
                s.say(
                    f"{r.pod:<20} {r.index:<4} {r.name[:28]:<28} "
                    f"{r.mem_used_mib + '/' + r.mem_total_mib:<20} {r.util_pct}%"
                )
        for sec in sections:
            s.say(f"\n== {sec.pod}: {sec.title}" + (f": {sec.note}" if sec.note else ""))
            if sec.text:
                s.say(sec.text)
        return EXIT_ERROR if any(r.error for r in rows) else EXIT_OK

    def teardown(
        self, cfg: Cluster, s: Session, *, purge: bool, dry_run: bool, legacy: bool, yes: bool
    ) -> None:
        from mlenv.cluster.teardown import teardown as run_teardown
        from mlenv.render.names import pool_selector

        if legacy:
            _teardown_legacy(cfg, s, purge=purge, yes=yes)
            return

        with s.client() as client:
            rep = run_teardown(cfg, client, purge=purge, dry_run=dry_run)
        # the image build is kept too (upstream's clean-multi-node kept it)
        kept = (
            ""
            if purge
            else "; PVCs and the image build (BuildConfig, ImageStream) kept (--purge deletes them)"
        )
        if dry_run and s.output:
            s.emit(
                {
                    "cluster": cfg.name,
                    "delete": rep.deleted,
                    "keep": [*rep.left, *rep.kept],
                    "unlabel": rep.unlabelled,
                },
                s.output,
            )
            return
        if dry_run:
            for d in rep.deleted:
                s.say(f"would delete {d}")
            for left in rep.left:
                s.say(f"would keep {left}")
            for k in rep.kept:
                s.say(f"would keep {k}")
            if rep.unlabelled:
                s.say(
                    f"would take the label {pool_selector(cfg)} off {len(rep.unlabelled)} node(s)"
                )
            s.say(
                f"teardown of {cfg.name} (dry run): {len(rep.deleted)} object(s) would be "
                "deleted" + kept + "; nothing was changed"
            )
            return
        for d in rep.deleted:
            s.say(f"deleted {d}")
        for left in rep.left:
            s.warn(f"warning: left behind: {left}")
        for k in rep.kept:
            s.say(f"kept {k}")
        if rep.unlabelled:
            s.say(f"took the label {pool_selector(cfg)} off {len(rep.unlabelled)} node(s)")
        s.say(
            f"teardown of {cfg.name}: {len(rep.deleted)} object(s) deleted"
            + kept
            + (f"; {len(rep.left)} left behind (see above)" if rep.left else "")
        )

    def secrets(self, cfg: Cluster, s: Session, *, mode: str) -> list[dict[str, Any]]:
        from mlenv.cluster.deploy import secrets_for_gitops
        from mlenv.render.plan import render_cluster

        return secrets_for_gitops(cfg, render_cluster(cfg, mode, None, validate=False))  # type: ignore[arg-type]

    @property
    def binary(self) -> str:
        """The client an operator types in the commands printed for them."""
        return "oc" if self.traits.openshift else "kubectl"

    def quarantine(
        self,
        cluster: str,
        s: Session,
        *,
        run: Run,
        targets: list[Target],
        apply: bool,
        only: str | None,
        history_root: Path,
        condition: bool = False,
        plan: Plan | None = None,
    ) -> None:
        from mlenv import quarantine as q
        from mlenv.platforms.kubenodes import KubeMarker

        if not apply or not targets:  # printing the commands reads nothing from the cluster
            q.quarantine_verb(
                run,
                KubeMarker(self.binary, condition=condition),
                cluster,
                targets,
                apply_them=apply,
                only=only,
                history_root=history_root,
                say=s.say,
                warn=s.warn,
                plan=plan,
            )
            return
        with s.client() as client:
            q.quarantine_verb(
                run,
                KubeMarker(self.binary, client, condition=condition),
                cluster,
                targets,
                apply_them=True,
                only=only,
                history_root=history_root,
                say=s.say,
                warn=s.warn,
                plan=plan,
            )

    def release(
        self,
        cluster: str,
        s: Session,
        *,
        run: Run,
        after: Run | None,
        force: bool,
        only: str | None,
        dry_run: bool,
        history_root: Path,
    ) -> None:
        from mlenv import quarantine as q
        from mlenv.platforms.kubenodes import KubeMarker

        with s.client() as client:  # a dry run too: it reads whose mark each node carries
            q.release_verb(
                run,
                KubeMarker.for_release(self.binary, client, run),
                cluster,
                after=after,
                force=force,
                only=only,
                dry_run=dry_run,
                history_root=history_root,
                say=s.say,
                warn=s.warn,
            )

    def history_fetch(
        self, cfg: Cluster, s: Session, *, history_root: Path
    ) -> tuple[list[str], list[str]]:
        with s.client() as client:
            return fetch_runs(cfg, s, client, history_root)

    def recheck(
        self,
        cfg: Cluster,
        s: Session,
        *,
        run_id: str,
        nodes: list[str],
        profile: str,
        suite_args: list[str],
        history_root: Path,
        wait_s: float,
        run: Run | None = None,
    ) -> int:
        from mlenv.platforms import kuberecheck

        with s.client() as client:
            return kuberecheck.recheck(
                cfg,
                s,
                client,
                run_id=run_id,
                nodes=nodes,
                profile=profile,
                suite_args=suite_args,
                history_root=history_root,
                wait_s=wait_s,
            )


def fetch_runs(
    cfg: Cluster, s: Session, client: ClusterClient, history_root: Path
) -> tuple[list[str], list[str]]:
    """the finished runs in pod-0's results folder that ``cfg``'s history lacks,
    copied to ``<history_root>/<cluster>/<run-id>/`` with their records appended (one per
    run id). A run still going is left for the next fetch; a folder whose record names
    another run or cluster is skipped with a warning (pods are written by code we do not
    control)."""
    import tempfile

    from mlenv.acceptance.records import history
    from mlenv.cluster import fetch

    require_running(client, cfg.namespace, _pod0(cfg), cfg.name, owner=cfg)
    runs = fetch.list_runs(client, cfg.namespace, _pod0(cfg))
    known = history.known_run_ids(history_root, cfg.name)
    new = [r for r in runs if r.run_id not in known]
    with tempfile.TemporaryDirectory(prefix="mlenv-fetch-") as tmp:
        batch: list[tuple[dict[str, Any], Path | None]] = []
        for run in new:
            if run.record is None and not run.finished:
                s.warn(
                    f"note: run {run.run_id} in {_pod0(cfg)} has no results yet (still running, or "
                    "stopped before rank 0 wrote them): not fetched"
                )
                continue
            folder = Path(tmp) / run.run_id
            for rel, data in fetch.read_run(client, cfg.namespace, _pod0(cfg), run.run_id).items():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_bytes(data)
            rec = (
                run.record
                if run.record is not None
                else history.record_from_folder(folder, cfg.name)
            )
            if rec is None or rec.get("run_id") != run.run_id or rec.get("cluster") != cfg.name:
                s.warn(
                    f"warning: run folder {run.run_id} in {_pod0(cfg)}: its record does not name this run "
                    f"of cluster {cfg.name} (run {contract.shown(str((rec or {}).get('run_id')))[:40]}, cluster "
                    f"{contract.shown(str((rec or {}).get('cluster')))[:40]}): not fetched"
                )
                continue
            batch.append((rec, folder))
        added, skipped = history.import_records(cfg.name, batch, history_root)
    recs = {str(r["run_id"]): r for r, _ in batch}
    for rid in added:
        r = recs[rid]
        s.say(
            f"fetched run {rid}: {contract.shown(r.get('verdict'))} ({contract.shown(r.get('profile'))}, "
            f"started {contract.shown(r.get('started'))}) -> {history_root / cfg.name / rid}"
        )
    if cfg.recheck.node_events and added:
        tell_fetched(client, s, [history_root / cfg.name / rid for rid in added])
    there = sorted(known & {r.run_id for r in runs})
    if not added:
        s.say(
            f"nothing new: {len(runs)} run folder(s) in {_pod0(cfg)}:{fetch.RESULTS_DIR}, {len(there)} of them "
            f"already in the history of {cfg.name}"
        )
    return added, [*skipped, *there]


def tell_fetched(client: ClusterClient, s: Session, folders: list[Path]) -> None:
    """``acceptance.node_events``: each fetched run's Event on every Node it judged
    (:func:`mlenv.cluster.nodetell.run_tells`). Telling is not fetching: a user who may
    not create Events gets one warning and the runs stay fetched."""
    from datetime import datetime, timezone

    from mlenv.cluster import nodetell
    from mlenv.cluster.api import ApiError
    from mlenv.contract import read_results

    if not client.can_i("create", "events", nodetell.EVENT_NAMESPACE):
        s.warn(
            f"warning: acceptance.node_events: {client.whoami()} may not create events in "
            f"{nodetell.EVENT_NAMESPACE} (kubectl auth can-i create events "
            f"--namespace={nodetell.EVENT_NAMESPACE}: no); the fetched runs told no Node"
        )
        return
    at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for folder in folders:
        doc = read_results(folder)
        tells = nodetell.run_tells(doc, at) if doc else []
        told = 0
        for t in tells:
            try:
                client.tell_node(t)
                told += 1
            except ApiError as e:
                s.warn(f"warning: run {t.run_id}: no Event on Node {t.node}: {e}")
        if tells:
            s.say(
                f"told {told} Node(s) run {tells[0].run_id}'s verdict (Events, namespace default)"
            )


def _teardown_legacy(cfg: Cluster, s: Session, *, purge: bool, yes: bool) -> None:
    """Upstream ml-dev-env's objects: list, ask (unless ``yes``), delete; PVCs only with
    ``purge``."""
    from mlenv.cluster import legacy

    with s.client() as client:
        objs = legacy.find(client, cfg.namespace)
        if not objs:
            s.say(f"no upstream ml-dev-env objects in namespace {cfg.namespace}")
            return
        s.say(f"upstream ml-dev-env objects in namespace {cfg.namespace}:")
        for o in objs:
            keep = o.kind == "PersistentVolumeClaim" and not purge
            s.say(
                f"  {o.ref} ({o.why}){': kept (--purge deletes it and its data)' if keep else ''}"
            )
        if not yes and not s.confirm("delete the objects listed (not the kept ones)?"):
            s.say("\nnothing deleted (answer y, or pass --yes)")
            return
        deleted, kept = legacy.remove(client, cfg.namespace, objs, purge=purge)
    for d in deleted:
        s.say(f"deleted {d}")
    s.say(
        f"legacy teardown: {len(deleted)} object(s) deleted"
        + (f"; {len(kept)} PVC(s) kept (--purge deletes them)" if kept else "")
    )
