"""``mlenv stage``: bring mlenv (and DeepSpeed where the node lacks it) from this machine to
the nodes of a Slurm or hosts cluster, which often cannot download anything."""

from __future__ import annotations

from typing import Annotated

import typer

from mlenv.cli._clusterctx import load_config, platform, session
from mlenv.cli._common import guarded


@guarded
def stage(
    cluster: Annotated[
        str, typer.Argument(help="Cluster name or config file (platform slurm or hosts).")
    ],
) -> None:
    """Build a wheelhouse here (a wheel of mlenv; PyYAML and DeepSpeed where the node's
    python lacks them) in <shared_dir>/.mlenv/wheelhouse/CLUSTER, then on one node (srun
    -N1, inside slurm.container_image when set; ssh to host 0) make
    <shared_dir>/.mlenv/venv/CLUSTER with the node's python and --system-site-packages (the
    image's torch stays), installing from the wheelhouse only. Later runs use that venv.
    Exit 3 when a step fails (named), 2 for a config it cannot serve."""
    cfg = load_config(cluster)
    platform(cfg).stage(cfg, session())


def register(app: typer.Typer) -> None:
    """Add ``stage`` to the app."""
    app.command("stage")(stage)
