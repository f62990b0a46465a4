"""The verbs on platforms other than Kubernetes (issue 13): Slurm (``slurm.py``) and plain
hosts over ssh (``hosts.py``). ``mlenv/cli`` dispatches here on ``cluster.platform``; every
command line is built by :mod:`mlenv.argv`."""

from __future__ import annotations

OFF_KUBERNETES = ("slurm", "hosts")
