"""Helpers shared by the cluster verbs (deploy, status, sync, shell, logs, …)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

from mlenv.cli._common import SETTINGS, debug, err, note_once, repo_root
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.errors import InputError, did_you_mean

if TYPE_CHECKING:
    from mlenv.cluster.api import ClusterClient
    from mlenv.platforms.base import Platform, Session

MODES = ("rdma", "tcp")


def load_config(name_or_path: str) -> ClusterConfig:
    """Load and validate a cluster config (ConfigError/InputError → exit 2 at the boundary).

    ``-n/--namespace`` replaces ``cluster.namespace``, validated as the config's own
    would be (a DNS-1123 label)."""
    import dataclasses

    from mlenv import argv
    from mlenv.config import load

    cfg = load(name_or_path, Path(repo_root()))
    ns = SETTINGS.namespace
    if ns is not None and ns != cfg.namespace:
        try:
            argv.name("Namespace", ns)
        except argv.UnsafeArgument:
            raise InputError(
                f"-n/--namespace {ns!r} is not a namespace name (a DNS-1123 "
                "label: lower-case letters, digits and '-', at most 63 "
                "characters, starting and ending with a letter or digit)"
            ) from None
        cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, namespace=ns))
    return cfg


def check_mode(mode: str) -> None:
    """InputError unless ``mode`` is rdma or tcp."""
    if mode not in MODES:
        raise InputError(
            f"--mode must be one of {', '.join(MODES)}, got {mode!r}{did_you_mean(mode, MODES)}"
        )


def worker_pod(cfg: ClusterConfig, index: int) -> str:
    """The name of ``cfg``'s worker pod ``index`` (docs/contracts.md)."""
    if index < 0:
        raise InputError(f"--pod must be 0 or more, got {index}")
    from mlenv.render.names import workload

    return workload(cfg).pod_name(index)


def workspace_dir() -> str:
    """The local ``workspace/`` tree sync copies."""
    return str(Path(repo_root()) / "workspace")


def api_timeout() -> float:
    """Seconds the API server has to answer each call (the reachability probe and every
    later get/apply/delete/can-i): ``--request-timeout``, else ``MLENV_API_TIMEOUT_S``,
    else 10 (InputError when not a positive number)."""
    if SETTINGS.request_timeout is not None:
        if not 0 < SETTINGS.request_timeout < 86400:
            raise InputError(
                f"--request-timeout must be between 0 and 86400 seconds, got "
                f"{SETTINGS.request_timeout:g}"
            )
        return SETTINGS.request_timeout
    from mlenv.cluster.api import DEFAULT_API_TIMEOUT
    from mlenv.cluster.connect import API_TIMEOUT_ENV, seconds_from_env

    return seconds_from_env(API_TIMEOUT_ENV, DEFAULT_API_TIMEOUT, below=86400)


def _say_progress(msg: str) -> None:
    """The "contacting <server>…" notice (from a timer thread): on a terminal it is erased
    once the server answers or the error replaces it."""
    if not SETTINGS.quiet:
        sys.stderr.write(msg + ("" if sys.stderr.isatty() else "\n"))
        sys.stderr.flush()


def _clear_progress() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


@contextmanager
def cluster_client() -> Iterator[ClusterClient]:
    """The cluster for one command.

    before the verb does anything, the real client probes the API server (one
    request, :func:`api_timeout` seconds): unreachable, hanging or not logged in is one
    line and exit 3 for every verb, never a verb's own failure (``launch`` would report
    kubectl's exit 1 as an acceptance FAIL). the same limit bounds every later call,
    so a server that answers the probe and hangs afterwards is exit 3 within it too.
    ``--kubeconfig``/``--context`` reach every oc/kubectl call; ``--verbose`` prints each
    command line. A client notice (kubectl instead of oc) goes to stderr once, after the
    server answered.
    """
    from mlenv.cluster.connect import connect

    timeout = api_timeout()
    opts = {
        k: v for k, v in (("kubeconfig", SETTINGS.kubeconfig), ("context", SETTINGS.context)) if v
    }
    with connect(notice=None, api_timeout=timeout, **opts) as client:
        probe = getattr(client, "probe", None)
        if probe is not None:  # the real client; the fake has nothing to probe
            if SETTINGS.verbose:
                client.trace = debug  # type: ignore[attr-defined]
            notice = getattr(client, "notice", "")

            def ended(ok: bool) -> None:
                _clear_progress()
                if ok and notice:
                    note_once("client", notice)

            beside = getattr(client, "probe_beside", None)
            if READS_FIRST.get() and beside is not None:
                beside(timeout, _say_progress, ended)
                yield client
                client.probed()  # type: ignore[attr-defined]
                return
            ok = False
            try:
                probe(timeout, _say_progress)
                ok = True
            finally:
                ended(ok)
        yield client


# Set by a verb whose first cluster calls only read (status): its client's probe runs
# beside those reads instead of before them (OcCluster.probe_beside), one client
# process's time less, its error still the verb's one line.
READS_FIRST: ContextVar[bool] = ContextVar("mlenv_reads_first", default=False)


STATE_ENV = "MLENV_STATE_DIR"
CURRENT_FILE = "current-cluster"


def state_dir() -> Path:
    """Where per-checkout state lives: ``.mlenv/`` at the repo root (git-ignored), or
    ``MLENV_STATE_DIR``."""
    return Path(os.environ.get(STATE_ENV) or Path(repo_root()) / ".mlenv")


# A Kubernetes object name segment (DNS-1123 label): what `cluster.name` is, and all the
# state file may hold. The Makefile applies the same pattern when it reads the file.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def remember_cluster(cfg: ClusterConfig) -> None:
    """Record the last deployed cluster in ``.mlenv/current-cluster``; the Makefile reads it
    when ``CLUSTER`` is not given, so ``make sync-multi-node`` after ``make deploy-cluster
    CLUSTER=x`` targets x. Failing to write it only warns.

    what is stored is the validated ``cluster.name``, never the raw argument (which
    reaches a shell through make). A name means ``clusters/<name>.yaml``, so a config
    deployed from anywhere else is not recorded: storing its name would point the next
    ``make teardown`` at a different config.
    """
    path = state_dir() / CURRENT_FILE
    own = Path(repo_root()) / "clusters" / f"{cfg.name}.yaml"
    src = Path(cfg.source).resolve() if cfg.source else None
    if not _NAME.fullmatch(cfg.name):  # validated already; never write anything else
        return
    if src is not None and not (own.exists() and own.resolve() == src):
        err(
            f"warning: not recording {str(src)!r} as the current cluster (it is not "
            f"clusters/{cfg.name}.yaml): pass CLUSTER=... to make"
        )
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cfg.name + "\n", encoding="utf-8")
    except OSError as e:
        err(f"warning: could not record the current cluster in {path}: {e.strerror}")


def current_cluster() -> str | None:
    """The cluster name ``.mlenv/current-cluster`` records, or None when there is none.

    The file is read back as untrusted: anything but one DNS-1123 label (a hand edit, a
    file from an older mlenv that stored the raw argument) is ignored with a warning.
    """
    path = state_dir() / CURRENT_FILE
    try:
        raw = path.read_bytes()[:256]
    except OSError:
        return None
    text = raw.decode("utf-8", errors="replace")
    name = text[:-1] if text.endswith("\n") else text
    if _NAME.fullmatch(name):
        return name
    err(f"warning: ignoring {path}: {text[:64]!r} is not a cluster name (a DNS-1123 label)")
    return None


def _confirm(question: str) -> bool:
    import typer

    try:
        return bool(typer.confirm(question, default=False))
    except typer.Abort:  # no terminal to answer from (EOF): the listing is the answer
        return False


def session() -> Session:
    """What every platform verb gets from the CLI: stdout/stderr lines, the
    cluster client of the global options, the checkout root, the current-cluster record."""
    import typer

    from mlenv.cli._output import emit
    from mlenv.platforms.base import Session

    return Session(
        say=typer.echo,
        warn=err,
        root=Path(repo_root()),
        client=cluster_client,
        raw=lambda text: typer.echo(text, nl=False),
        remember=remember_cluster,
        emit=emit,
        confirm=_confirm,
    )


def platform(cfg: ClusterConfig) -> Platform:
    """The config's platform (the CLI never tests ``cfg.platform`` itself)."""
    from mlenv.platforms.dispatch import platform_for

    return platform_for(cfg)
