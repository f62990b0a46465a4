"""Keeping records across runs: history, comparison, trends and the sign-off bundle.

Owns the per-cluster ``history.jsonl`` (``history``), comparing two runs or a run with
its baseline (``compare``), the trend plots and summary over a history (``trend``) and
packing/verifying the sign-off archive (``bundle``; the operator-side parts that read
configs and rendered trees are ``mlenv/signoff.py``). May import:
``mlenv.acceptance.core``, ``.evidence``, ``.judging``, ``mlenv.errors``,
``mlenv.contract``.
"""
