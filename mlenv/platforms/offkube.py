"""``platform: slurm`` and ``platform: hosts`` behind :class:`~mlenv.platforms.base.Platform`
(the cluster verbs). The machinery is ``slurm.py`` (sbatch/squeue/scontrol/scancel/sinfo/
sacct) and ``hosts.py`` (ssh); this module is what each verb does with it and prints.
Kubernetes-only verbs (build, url, port-forward, gpu-info, secrets, discover, launch)
stay "not supported" from :class:`~mlenv.platforms.base.Platform`, with a hint where there is another way.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlenv.config.model import PLATFORM_TRAITS
from mlenv.errors import InfraError, InputError
from mlenv.platforms.base import Platform, Session

if TYPE_CHECKING:
    from mlenv.config.model import Cluster
    from mlenv.quarantine import Marker, Plan, Run, Target

_HINTS = {
    "launch": "the suite runs as a job: mlenv acceptance --cluster NAME",
    "port-forward": "dev tools are pods of a Kubernetes deployment",
    "build": "the image is built for OpenShift; use a container image the nodes can run",
    "url": "dev tools are pods of a Kubernetes deployment",
    "gpu-info": "mlenv shell NAME -- nvidia-smi",
    "secrets": "Kubernetes Secrets for a GitOps tree; Slurm and hosts jobs use the cluster's own ssh "
    "and filesystem",
    "discover": "write clusters/NAME.yaml by hand (docs/config-reference.md; examples/sites/)",
}


def _render(
    cfg: Cluster, s: Session, nodes: int | None, out: Path | None
) -> list[tuple[Path, Any]]:
    from mlenv.render.platforms import planned

    # the hosts cron line runs this mlenv: the python running now, as a module
    return [planned(s.root, cfg, out, nodes, mlenv=(sys.executable, "-m", "mlenv"))]


def deploy_plan(cfg: Cluster, *, nodes: int | None) -> str:
    """``deploy --dry-run client`` off Kubernetes: the rendered files deploy would use, each
    under a ``# ==> name <==`` line; pure (no scontrol, no ssh)."""
    from mlenv.render.platforms import render_platform

    files = render_platform(cfg, nodes)
    return "".join(
        f"# ==> {name} <==\n{text}" + ("" if text.endswith("\n") else "\n")
        for name, text in files.items()
    )


def _no_output(cfg: Cluster, s: Session, verb: str) -> None:
    """-o json|yaml is the Kubernetes platforms' (a list of objects); here there is none."""
    if s.output:
        raise InputError(f"-o/--output: {verb} on platform {cfg.platform} prints text only")


def _dry_run(cfg: Cluster, s: Session, nodes: int | None, dry_run: str | None) -> bool:
    """``--dry-run client`` prints the plan and sends nothing to Slurm or the
    hosts; ``--dry-run server`` has no API server to ask. True when the verb is done."""
    if dry_run == "client":
        if s.output:
            raise InputError(
                f"-o/--output: platform {cfg.platform}'s plan is a script, printed as is"
            )
        s.raw(deploy_plan(cfg, nodes=nodes))
        s.warn(
            f"plan: what mlenv deploy {cfg.name} would submit on platform {cfg.platform}; nothing was "
            "sent (--dry-run client)"
        )
        return True
    if dry_run == "server":
        raise InputError(
            f"--dry-run server does not apply on platform {cfg.platform} (there is no API "
            "server); --dry-run client prints the plan"
        )
    return False


def _exec(words: list[str]) -> int:
    """Hand the terminal to ``words`` (srun --pty / ssh -t); its exit status."""
    try:
        return subprocess.call(words)
    except FileNotFoundError:
        raise InfraError(f"{words[0]}: not found") from None


def _teardown_flags(name: str, dry_run: bool, legacy: bool) -> None:
    if legacy:
        raise InputError(
            f"--legacy removes upstream ml-dev-env's OpenShift objects; platform {name} has none"
        )
    if dry_run:
        raise InputError(f"--dry-run: not for platform {name} (nothing to list)")


class _OffKube(Platform):
    """What Slurm and hosts share: their script folder, and quarantine and release through
    their node marker."""

    def render(
        self,
        cfg: Cluster,
        s: Session,
        *,
        modes: tuple[str, ...],
        nodes: int | None,
        out: Path | None,
    ) -> list[tuple[Path, Any]]:
        return _render(cfg, s, nodes, out)

    def marker(self) -> Marker:
        """How this platform marks a node (a Slurm drain, or the list of hosts to leave out)."""
        raise NotImplementedError

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
        """Print (and with --apply, set) the platform's mark on each FAILED node."""
        from mlenv import quarantine as q

        if condition:
            raise InputError(
                f"--condition: a Node condition is a Kubernetes Node's; run {run.run_id} "
                f"ran on {self.marker().kind} (its mark is the one printed without --condition)"
            )

        q.quarantine_verb(
            run,
            self.marker(),
            cluster,
            targets,
            apply_them=apply,
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
        """Undo exactly the marks this run set, for nodes a later run passed (or --force)."""
        from mlenv import quarantine as q

        q.release_verb(
            run,
            self.marker(),
            cluster,
            after=after,
            force=force,
            only=only,
            dry_run=dry_run,
            history_root=history_root,
            say=s.say,
            warn=s.warn,
        )

    def stage(self, cfg: Cluster, s: Session) -> None:
        """A wheelhouse of mlenv (and DeepSpeed/PyYAML where the node lacks them) in the shared
        folder, and a venv over the node's python that later runs use."""
        from mlenv.platforms import stage

        s.say(stage.stage(cfg, s.say))


class SlurmPlatform(_OffKube):
    """The acceptance job through sbatch; the job's state, log and cancel."""

    name = "slurm"
    traits = PLATFORM_TRAITS["slurm"]
    hints = _HINTS

    def storage_label(self, cfg: Cluster) -> str:
        # pods' storage means nothing off Kubernetes: the shared folder does
        return cfg.slurm.shared_dir

    def history_fetch(
        self, cfg: Cluster, s: Session, *, history_root: Path
    ) -> tuple[list[str], list[str]]:
        """runs Slurm started on its own (the scheduled re-check, a hand-submitted
        job) from ``shared_dir/results/`` into this machine's history, once each."""
        from mlenv.platforms import slurmfetch

        return slurmfetch.fetch_runs(cfg, history_root, s.say), []

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
        """Preflight, then ``sbatch`` the acceptance job and record its id."""
        from mlenv.platforms import slurm

        if _dry_run(cfg, s, nodes, dry_run):
            return
        sub = slurm.submit(cfg, s.root, s.say, nodes=nodes)
        s.say(
            f"follow it with: mlenv status {cfg.name} / mlenv logs {cfg.name}; cancel: mlenv teardown "
            f"{cfg.name} (job {sub.job_id})"
        )

    def status(self, cfg: Cluster, s: Session, *, output: str | None) -> None:
        from mlenv.platforms import slurm

        if output is not None:
            # never silently the plain lines where a script asked for a document
            raise InputError(
                f"status -o {output}: platform slurm prints its job's lines only (omit -o)"
            )
        for line in slurm.status_lines(cfg, s.root):
            s.say(line)

    def logs(self, cfg: Cluster, s: Session, *, pod: str, follow: bool, tail: int | None) -> None:
        from mlenv.platforms import slurm

        if follow:
            raise InputError(
                "logs -f: platform slurm shows the job's output file as it is now; follow it "
                f"with `tail -f {slurm.output_file(cfg, slurm.last_submission(s.root, cfg).job_id)}`, or "
                f"run `mlenv acceptance --cluster {cfg.name}`, which prints progress until the verdict"
            )
        s.say(slurm.log_text(cfg, s.root, tail).rstrip("\n"))

    def shell(self, cfg: Cluster, s: Session, *, index: int, pod: str, command: list[str]) -> int:
        """``srun --pty`` on one node of the partition; the terminal stays attached."""
        from mlenv.platforms import slurm

        return _exec(
            slurm.shell_argv(cfg, command, index, sys.stdin.isatty() and sys.stdout.isatty())
        )

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
        from mlenv.platforms import slurm

        s.say(slurm.sync(cfg, s.root))

    def acceptance(self, cfg: Cluster, s: Session, *, profile: str, suite_args: list[str]) -> int:
        """Submit, wait with progress, print the verdict, copy the reports back."""
        from mlenv.acceptance.reports import console
        from mlenv.platforms import slurm

        doc, code, dest = slurm.acceptance(
            cfg, s.root, s.say, nodes=None, profile=profile, suite_args=suite_args
        )
        s.say(console.verdict_block(doc, str(dest)))
        return code

    def teardown(
        self, cfg: Cluster, s: Session, *, purge: bool, dry_run: bool, legacy: bool, yes: bool
    ) -> None:
        """``scancel`` the recorded job."""
        _no_output(cfg, s, "teardown")
        from mlenv.platforms import slurm

        _teardown_flags(self.name, dry_run, legacy)
        s.say(slurm.teardown(cfg, s.root))

    def marker(self) -> Marker:
        """``scontrol update … State=DRAIN Reason=<note>`` per FAILED node, ``State=RESUME`` to release."""
        from mlenv.platforms.slurmnodes import SlurmMarker

        return SlurmMarker()

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
        """Each drained node traded for a reservation of it, resumed, the suite run there
        (``--reservation --nodelist``), drained again, the reservation deleted
        (``slurmrecheck.py``); a re-check stopped earlier is finished first."""
        from mlenv.acceptance.run.local import interrupts_held, signals_as_interrupts
        from mlenv.platforms import slurmrecheck as sr

        report_dir, reasons = self._drained_by(run, nodes)
        self._permitted()
        suite = sr.run_suite(
            cfg,
            s.root,
            s.say,
            profile=profile,
            suite_args=suite_args,
            history_root=history_root,
            quarantined_by=run_id,
        )
        # Ctrl-C, SIGTERM and SIGHUP become Interrupted: the node is drained again and its
        # reservation deleted before mlenv exits (130/143)
        with signals_as_interrupts():
            return sr.recheck(
                sr.SlurmOps(),
                report_dir,
                run_id,
                reasons,
                suite,
                s.say,
                s.warn,
                held=interrupts_held,
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
        """A re-check of a node that was stopped half-way is finished first (the node drained
        again with the run's reason, its reservation deleted), then the drains are undone."""
        from mlenv import quarantine as q
        from mlenv.platforms import slurmrecheck as sr

        assert run.report_dir is not None
        rec = q.Record.read(run.report_dir)
        left = [
            n
            for n in sorted(rec.nodes if rec else {})
            if (only is None or n == only) and sr.state_path(run.report_dir, n).is_file()
        ]
        if left and dry_run:
            for n in left:
                s.say(
                    f"# would first finish the stopped re-check of node {n} (drain it, delete its reservation)"
                )
        elif left:
            self._permitted()
            sr.finish_all(sr.SlurmOps(), run.report_dir, left, s.say)
        super().release(
            cluster,
            s,
            run=run,
            after=after,
            force=force,
            only=only,
            dry_run=dry_run,
            history_root=history_root,
        )

    @staticmethod
    def _permitted() -> None:
        from mlenv.platforms.slurmnodes import may_update_nodes

        ok, why = may_update_nodes()
        if not ok:
            raise InfraError(f"not permitted: {why}; nothing was changed")

    @staticmethod
    def _drained_by(run: Run | None, nodes: list[str]) -> tuple[Path, dict[str, str]]:
        """The run's report folder and, for each node, the drain reason its quarantine set."""
        from mlenv import quarantine as q

        if run is None or run.report_dir is None:
            raise InputError("mlenv recheck on Slurm needs the quarantined run's report folder")
        rec = q.Record.read(run.report_dir)
        if rec is None or rec.platform != "slurm":
            raise InputError(
                f"run {run.run_id}: its quarantine was not a Slurm drain "
                f"({rec.platform if rec else 'no record'}); nothing to re-check here"
            )
        return run.report_dir, {n: str(rec.nodes[n].get("note") or "") for n in nodes}


class HostsPlatform(_OffKube):
    """Plain hosts over ssh: preflight, copy, run in the foreground."""

    name = "hosts"
    traits = PLATFORM_TRAITS["hosts"]
    hints = {**_HINTS, "gpu-info": "mlenv shell NAME -- nvidia-smi"}

    def storage_label(self, cfg: Cluster) -> str:
        return cfg.hosts.shared_dir or "copied over ssh"

    def history_fetch(
        self, cfg: Cluster, s: Session, *, history_root: Path
    ) -> tuple[list[str], list[str]]:
        """a hosts run, the cron line's too, is recorded here when it ends (it runs from
        this machine): nothing is out there to bring."""
        s.say(
            f"fetch: nothing to fetch: hosts runs are recorded in {history_root / cfg.name} when they end"
        )
        return [], []

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
        from mlenv.platforms import hosts

        if _dry_run(cfg, s, nodes, dry_run):
            return
        hosts.preflight(cfg, say=s.say, nodes=nodes)

    def status(self, cfg: Cluster, s: Session, *, output: str | None) -> None:
        from mlenv.platforms import hosts

        lines, down = hosts.status_report(cfg)
        for line in lines:
            s.say(line)
        if down:  # the others answered: a report (exit 0), with the ones that did not named last
            s.warn(f"unreachable over ssh: {', '.join(down)} ({len(down)} of {len(lines)} hosts)")

    def logs(self, cfg: Cluster, s: Session, *, pod: str, follow: bool, tail: int | None) -> None:
        """The head host's run log (rank 0's) of the last run started from here."""
        from mlenv.platforms import hosts

        if follow:
            raise InputError(
                "--follow: not on platform hosts (the run streams to the terminal that "
                "started it); mlenv logs NAME prints the head host's log so far"
            )
        s.say(hosts.log_text(cfg, s.root, tail).rstrip("\n"))

    def shell(self, cfg: Cluster, s: Session, *, index: int, pod: str, command: list[str]) -> int:
        """ssh to host ``index``; the terminal stays attached."""
        from mlenv.platforms import hosts

        return hosts.shell(cfg, command, index, sys.stdin.isatty() and sys.stdout.isatty())

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
        from mlenv.platforms import hosts

        s.say(hosts.sync(cfg, s.root))

    def acceptance(self, cfg: Cluster, s: Session, *, profile: str, suite_args: list[str]) -> int:
        from mlenv.platforms import hosts

        return hosts.acceptance(
            cfg, s.root, s.say, nodes=None, profile=profile, suite_args=suite_args
        )

    def teardown(
        self, cfg: Cluster, s: Session, *, purge: bool, dry_run: bool, legacy: bool, yes: bool
    ) -> None:
        _no_output(cfg, s, "teardown")
        _teardown_flags(self.name, dry_run, legacy)
        s.say(
            f"{cfg.name}: platform hosts leaves nothing running: acceptance runs in the foreground "
            "(Ctrl-C ends it and its ssh sessions)"
        )

    def marker(self) -> Marker:
        """No scheduler to tell: the list of nodes to leave out (recorded with --apply)."""
        from mlenv.quarantine import ListMarker

        return ListMarker()
