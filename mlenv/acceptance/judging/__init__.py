"""Judging results: the baselines' bars and the verdict they give.

Owns the baseline files' model and lookup (``baselines``: ``{metric, op, value}`` rules
as data) and the verdict over a run's results (``verdict``: per check, peer comparison,
the run's PASS/FAIL/ERROR, or INTERRUPTED when someone stopped it). May import: ``mlenv.acceptance.core``,
``mlenv.acceptance.evidence`` (outlier statistics), ``mlenv.errors``, ``mlenv.contract``.
"""
