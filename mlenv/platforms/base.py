"""The one interface every CLI verb calls: :class:`Platform`.

A platform is where a cluster config's environment lives: OpenShift/Kubernetes (the
manifests of ``mlenv/render`` applied through ``mlenv/cluster``), Slurm (sbatch scripts)
or plain hosts over ssh. ``mlenv/cli/cmd_<verb>.py`` parses and checks its flags, loads
the config, asks :func:`mlenv.platforms.dispatch.platform_for` for the config's platform
and calls the verb's method; it never tests a platform string. A verb a platform does
not support raises :class:`Unsupported` (one line, exit 2) from :class:`Platform`'s own
method, which every implementation extends, so a new verb is written here once and is
"not supported" everywhere until a platform overrides it.

The CLI hands each call a :class:`Session`: where lines go (stdout, stderr), the cluster
client factory the global options configured (``--kubeconfig``, ``--context``, timeouts;
only Kubernetes uses it) and the checkout root. Platforms print only through it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlenv.config.model import PlatformTraits
from mlenv.errors import InputError

if TYPE_CHECKING:
    from mlenv.cluster.api import ClusterClient
    from mlenv.cluster.discover import Discovered
    from mlenv.config.model import Cluster
    from mlenv.quarantine import Plan, Run, Target

Say = Callable[[str], None]

# Every verb of the interface, in the order docs/architecture.md's table lists them.
VERBS = (
    "render",
    "deploy",
    "status",
    "logs",
    "shell",
    "sync",
    "launch",
    "acceptance",
    "port-forward",
    "build",
    "url",
    "discover",
    "gpu-info",
    "teardown",
    "secrets",
    "quarantine",
    "release",
    "stage",
    "history-fetch",
    "recheck",
)


class Unsupported(InputError):
    """A verb the config's platform does not have: one line naming what to do instead."""

    def __init__(self, verb: str, platform: str, hint: str = "") -> None:
        super().__init__(
            f"mlenv {verb}: not supported on platform {platform}" + (f" ({hint})" if hint else "")
        )


def _no_client() -> AbstractContextManager[ClusterClient]:
    raise InputError("this verb needs no cluster client")


@dataclass(frozen=True)
class Session:
    """What one CLI call hands the platform: output sinks, the cluster client factory and
    the checkout root."""

    say: Say
    warn: Say
    root: Path
    # text written as it is (a YAML stream that ends in its own newline, or in nothing)
    raw: Say = lambda text: None
    client: Callable[[], AbstractContextManager[ClusterClient]] = _no_client
    # The current-cluster record (.mlenv/current-cluster) is the CLI's: the platform tells
    # it what was deployed.
    remember: Callable[[Cluster], None] = lambda cfg: None
    emit: Callable[[Any, str], None] = lambda doc, fmt: None
    # a yes/no question on the terminal (no terminal: False)
    confirm: Callable[[str], bool] = lambda question: False
    # -o json|yaml of a verb whose data is a plan (deploy --dry-run client); None: as text
    output: str | None = None


class Platform:
    """The verbs, one method each; every one "not supported" here (exit 2, one line), and
    each implementation overrides what it has. Arguments are already checked by the CLI
    (ranges, choices); a method raises the typed errors of ``mlenv/errors.py``, returns an
    exit code where the verb has one, and prints only through ``s``. ``hints`` maps a verb
    to what to use instead on this platform; ``traits`` is what the platform serves, the
    same object the layers below this one read as ``cfg.traits``."""

    name = "?"
    traits = PlatformTraits()
    hints: dict[str, str] = {}

    def storage_label(self, cfg: Cluster) -> str:
        """What ``list-clusters`` shows as the config's storage."""
        return cfg.storage.mode

    def _no(self, verb: str) -> Unsupported:
        return Unsupported(verb, self.name, self.hints.get(verb, ""))

    def render(
        self,
        cfg: Cluster,
        s: Session,
        *,
        modes: tuple[str, ...],
        nodes: int | None,
        out: Path | None,
    ) -> list[tuple[Path, Any]]:
        raise self._no("render")

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
        raise self._no("deploy")

    def status(self, cfg: Cluster, s: Session, *, output: str | None) -> None:
        raise self._no("status")

    def logs(self, cfg: Cluster, s: Session, *, pod: str, follow: bool, tail: int | None) -> None:
        raise self._no("logs")

    def shell(self, cfg: Cluster, s: Session, *, index: int, pod: str, command: list[str]) -> int:
        raise self._no("shell")

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
        raise self._no("sync")

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
        raise self._no("launch")

    def acceptance(self, cfg: Cluster, s: Session, *, profile: str, suite_args: list[str]) -> int:
        raise self._no("acceptance")

    def port_forward(
        self, cfg: Cluster, s: Session, *, pod: str, ports: list[tuple[int, int]]
    ) -> int:
        raise self._no("port-forward")

    def build(self, cfg: Cluster, s: Session) -> int:
        raise self._no("build")

    def url(self, cfg: Cluster, s: Session, *, tool: str) -> None:
        raise self._no("url")

    # ``ask`` (``mlenv wizard``): shown what was found, it may change the answers
    # (pods, RDMA, dev tools) before the config is written out.
    def discover(
        self,
        name: str,
        s: Session,
        *,
        namespace: str,
        ask: Callable[[Discovered], None] | None = None,
    ) -> str:
        raise self._no("discover")

    def gpu_info(self, cfg: Cluster, s: Session) -> int:
        raise self._no("gpu-info")

    # a wheelhouse here and a venv on the nodes with what the job imports
    def stage(self, cfg: Cluster, s: Session) -> None:
        raise self._no("stage")

    def teardown(
        self, cfg: Cluster, s: Session, *, purge: bool, dry_run: bool, legacy: bool, yes: bool
    ) -> None:
        raise self._no("teardown")

    def secrets(self, cfg: Cluster, s: Session, *, mode: str) -> list[dict[str, Any]]:
        raise self._no("secrets")

    # a finished run's FAILED nodes (``targets``) handed to the scheduler, and back.
    # ``cluster`` is the run's cluster name (a run on this machine has no config: hosts).
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
        raise self._no("quarantine")

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
        raise self._no("release")

    # ``mlenv history CLUSTER --fetch``: copy the runs recorded on the cluster (the
    # scheduled re-checks') into the control host's history; (added, skipped) run ids.
    def history_fetch(
        self, cfg: Cluster, s: Session, *, history_root: Path
    ) -> tuple[list[str], list[str]]:
        raise self._no("history-fetch")  # the CLI words it `mlenv history --fetch`

    # ``mlenv recheck RUN``: the suite on each of ``nodes`` (the run's quarantined ones)
    # where it stands, recorded as a later run of the cluster; the exit code. ``run``: the
    # quarantined run (its report folder holds the quarantine record).
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
        raise self._no("recheck")
