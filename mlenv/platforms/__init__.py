"""Where a config's environment lives, behind one interface.

``base.py`` holds :class:`Platform`, one class with a method per CLI verb, each "not
supported" (exit 2) until an implementation overrides it; ``dispatch.py`` maps
``cluster.platform`` to an implementation, and each carries its platform's traits
(``mlenv.config.model.PlatformTraits``), what the layers below read as ``cfg.traits``. ``kube.py`` is OpenShift and plain Kubernetes,
using ``mlenv/render`` and ``mlenv/cluster`` as its machinery; ``offkube.py`` is Slurm
(``slurm.py``: sbatch/squeue/scontrol/scancel/sinfo/sacct) and plain hosts (``hosts.py``:
ssh). May import config, render, cluster, acceptance (its reports) and the contracts;
never the CLI. Every command line is built by :mod:`mlenv.argv`.
"""
