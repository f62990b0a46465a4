"""Keeping records across runs: the run's folder, history, comparison, trends and the sign-off bundle.

Owns each run's own report folder (``rundir``: claimed and locked before the run, the
``latest`` link, whether a folder still holds the run asked for), the per-cluster
``history.jsonl`` (``history``), comparing two runs or a run with
its baseline (``compare``), the trend plots and summary over a history (``trend``) and
packing/verifying the sign-off archive (``bundle``; the operator-side parts that read
configs and rendered trees are ``mlenv/signoff.py``). May import:
``mlenv.acceptance.core``, ``.evidence``, ``.judging``, ``mlenv.errors``,
``mlenv.contract``.
"""
