"""Reading evidence: what NCCL's logs, bandwidth tables and per-rank figures say.

Owns parsing NCCL's debug log and arranging its capture (``nccllog``,
``ncclcapture``), nccl-tests' bus-bandwidth arithmetic and tables (``busbw``), the
pairwise plan and judgement that localize a slow link or node (``localize``) and the
outlier statistics across ranks and nodes (``outliers``), and DCGM's ``dcgmi diag -j``
output (``dcgm``). Pure functions over numbers
and text, no torch at module level. May import: ``mlenv.acceptance.core`` and the
stdlib layers (``mlenv.errors``, ``mlenv.contract``).
"""
