"""Where a config's environment lives, behind one interface.

``base.py`` holds :class:`Platform`, the Protocol with one method per CLI verb, and
:class:`PlatformBase` ("not supported" for every verb, exit 2); ``dispatch.py`` maps
``cluster.platform`` to an implementation. ``kube.py`` is OpenShift and plain Kubernetes,
using ``mlenv/render`` and ``mlenv/cluster`` as its machinery; ``offkube.py`` is Slurm
(``slurm.py``: sbatch/squeue/scontrol/scancel/sinfo/sacct) and plain hosts (``hosts.py``:
ssh). May import config, render, cluster, acceptance (its reports) and the contracts;
never the CLI. Every command line is built by :mod:`mlenv.argv`.
"""
