"""``mlenv launch``: run the job from pod 0 through exec, streamed; its exit code is ours.

Default: ``python -m mlenv.pod launch`` in pod 0 (DeepSpeed's launcher reaches the other
pods over ssh). ``--torchrun``: the ssh-less path, ``python -m mlenv.pod run-torchrun``
started in every pod at once through exec with one shared run id; pod 0's output is
streamed and its exit code returned.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import cluster_client, load_config, require_running
from mlenv.cli._common import err, guarded
from mlenv.contract import pod_name
from mlenv.errors import EXIT_ERROR, EXIT_FAIL, EXIT_INPUT, EXIT_OK, InputError

POD = ["python", "-m", "mlenv.pod"]


def map_exit(rc: int) -> tuple[int, str]:
    """The pod command already speaks the contract (0/1/2/3); any other status comes from a
    crash, a signal or exec itself failing, which is ERROR, never FAIL."""
    if rc in (EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_ERROR):
        return rc, ""
    return EXIT_ERROR, f"exited with status {rc} (crash, signal or exec failure): ERROR"


def new_run_id() -> str:
    """One run id shared by every pod (results go to /workspace/results/<id>)."""
    import time

    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def pod_argv(verb: str, script: list[str], *, run_id: str | None = None) -> list[str]:
    """``python -m mlenv.pod VERB [--run-id ID] [--] SCRIPT…``; the ``--`` keeps options
    meant for the acceptance suite (``-- --checks …``) away from the pod's own parser."""
    argv = [*POD, verb, *(["--run-id", run_id] if run_id else [])]
    return argv + (["--"] if script and script[0].startswith("-") else []) + script


@guarded
def launch(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    script: Annotated[list[str] | None, typer.Argument(help="Script and arguments (default: the acceptance job).")] = None,
    torchrun: Annotated[bool, typer.Option("--torchrun", help="ssh-less: run-torchrun in every pod in parallel through exec.")] = False,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds the job may run in each pod (default: no limit).")] = None,
) -> None:
    """Run SCRIPT (default: the acceptance suite) across the deployment from pod 0 and
    stream its output. Exit 0 ok, 1 acceptance FAIL, 2 bad input, 3 error or crash."""
    from mlenv.cluster.fanout import run_everywhere

    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be positive, got {timeout:g}")
    cfg = load_config(cluster)
    args = list(script or [])
    with cluster_client() as client:
        if torchrun:
            argv = pod_argv("run-torchrun", args, run_id=new_run_id())
            rep = run_everywhere(cfg, client, argv, typer.echo, timeout=timeout)
            for o in rep.failed:
                err(f"warning: {o.pod} exited {o.returncode}: {o.detail}")
            rc = rep.returncode
        else:
            # i16: kubectl's own failure (no such pod, pod not running) exits 1, which
            # would read as an acceptance FAIL: pod-0 must be Running first (else exit 3)
            require_running(client, cfg.namespace, pod_name(0), cfg.name)
            rc = client.exec_stream(pod_name(0), cfg.namespace, pod_argv("launch", args),
                                    typer.echo, timeout=timeout)
    code, note = map_exit(rc)
    if note:
        err(f"error: pod ml-dev-env-0: {note}")
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``launch`` to the app."""
    app.command("launch")(launch)
