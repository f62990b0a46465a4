"""``mlenv secrets``: the Secrets a rendered tree needs, for GitOps.

``k8s/<cluster>/<mode>/`` holds no Secret: keys never go into git in the clear. ``mlenv
deploy`` creates them; a GitOps tool that applies the folder alone needs them from
elsewhere. This verb prints fresh ones (labelled for this instance, so a later ``mlenv
deploy`` keeps them) for ``kubeseal``/SOPS/External Secrets; it talks to no cluster.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session
from mlenv.cli._common import err, guarded
from mlenv.cli._output import check_format
from mlenv.errors import InputError


@guarded
def secrets(
    cluster: Annotated[str, typer.Argument(help="Cluster name or config file.")],
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="rdma or tcp (which rendered tree the Secrets are for; default: the config's).",
        ),
    ] = None,
    output: Annotated[
        str, typer.Option("-o", "--output", help="yaml (multi-document) or json (a v1 List).")
    ] = "yaml",
) -> None:
    """Print fresh Secrets (ssh keys, dev-tool credentials) for k8s/<cluster>/<mode>/: seal them, never commit them."""
    from mlenv.render.serialize import dump_all

    if mode is not None and mode not in ("rdma", "tcp"):
        raise InputError(f"--mode must be rdma or tcp, got {mode!r}")
    check_format(output, ("yaml", "json"))  # one message for every verb's -o
    cfg = load_config(cluster)
    docs = platform(cfg).secrets(cfg, session(), mode=mode or cfg.own_mode)  # .4
    if output == "json":
        typer.echo(
            json.dumps(
                {"apiVersion": "v1", "kind": "List", "items": docs}, indent=2, sort_keys=True
            )
        )
    else:
        typer.echo(
            dump_all(docs, sort_keys=True, default_flow_style=False, explicit_start=True), nl=False
        )
    if sys.stdout.isatty():
        err(
            "these are private keys in the clear: pipe them to kubeseal or sops instead of a terminal or a file in git"
        )
    else:
        err(
            f"{len(docs)} Secret(s) for namespace {cfg.namespace}: encrypt before committing "
            "(e.g. | kubeseal -o yaml); mlenv deploy keeps them (they carry this instance's labels)"
        )


def register(app: typer.Typer) -> None:
    """Add ``secrets`` to the app."""
    app.command("secrets")(secrets)
