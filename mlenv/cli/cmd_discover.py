"""``mlenv discover NAME --namespace NS``: write a starting ``clusters/NAME.yaml`` (i10.8)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlenv.cli._clusterctx import session
from mlenv.cli._common import SETTINGS, guarded, repo_root
from mlenv.contract import APP
from mlenv.errors import InputError


@guarded
def discover(
    name: Annotated[str, typer.Argument(help="Cluster name: the file is clusters/NAME.yaml.")],
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace to deploy into (default: ml-dev-env).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the config, write nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Read GPU nodes, RDMA resources, networks and storage classes; write a starting config."""
    import re

    from mlenv.config import check_file
    from mlenv.platforms.dispatch import platform_named

    # `mlenv -n NS discover NAME` (the global option before the verb) means the same; the
    # default namespace is named after the app, as upstream's was
    namespace = namespace or SETTINGS.namespace or APP
    dns = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    for what, v in (("NAME", name), ("--namespace", namespace)):
        if not dns.match(v):
            raise InputError(f"{what} {v!r}: must be a DNS-1123 label (lowercase letters, digits, '-')")
    path = Path(repo_root()) / "clusters" / f"{name}.yaml"
    if path.exists() and not force and not dry_run:
        raise InputError(f"{path} exists: pass --force to overwrite it, or --dry-run to print")
    text = platform_named("openshift").discover(name, session(), namespace=namespace)
    if dry_run:
        typer.echo(text, nl=False)
        return
    import tempfile

    # validated before it lands, so clusters/ never holds a file `mlenv validate` rejects
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir) / f"{name}.yaml"
        tmp.write_text(text)
        cfg, diags = check_file(tmp)
    if cfg is None:
        raise InputError("the discovered config does not validate:\n" + "\n".join(str(d) for d in diags))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    typer.echo(f"wrote {path}: review it, then `mlenv validate {name}`")


def register(app: typer.Typer) -> None:
    """Add ``discover`` to the app."""
    app.command("discover")(discover)
