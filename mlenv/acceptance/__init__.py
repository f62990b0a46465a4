"""The acceptance workload: checks on every rank, a verdict and reports (torch/DeepSpeed imported lazily).

Find a behaviour by its folder; each says in its own docstring what it may import, and
the parts below import only the parts above them in this list:

- ``core/``: the check framework (what a check is, its options, profiles, selection,
  the result shape, fault injection, timing).
- ``evidence/``: reading NCCL logs, bus bandwidth, outliers, localizing a slow link.
- ``judging/``: baselines (the bars) and the verdict.
- ``records/``: history across runs, compare, trends, the sign-off archive.
- ``reports/``: results.json(l), JUnit, Markdown, plots and rank 0's live console.
- ``checks/``: the shipped checks, and the models and datasets training uses.
- ``run/``: the world of ranks, the per-rank runner, ``mlenv acceptance --local``.
- ``__main__``: ``python -m mlenv.acceptance``, the rank entry point pods, sbatch and
  hosts run.

``datasets``, ``data`` and ``models`` at this level are compatibility names (training
scripts synced into pods import them), re-exporting ``checks.datasets`` and
``checks.models``.
"""
