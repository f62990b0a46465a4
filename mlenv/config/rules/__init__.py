"""Semantic rules the JSON Schema cannot express: names, quantities, cross-field consistency.

They run even when the schema found errors (so one run reports everything) and
therefore read the raw data defensively: a value of the wrong type was already
reported by the schema and is simply skipped here.

One module per config section (:mod:`.cluster`, :mod:`.storage`, :mod:`.image`,
:mod:`.nodes`, :mod:`.acceptance`, :mod:`.network`, :mod:`.integers`, :mod:`.platforms`
with :mod:`.slurm` and :mod:`.hosts`), each a set of functions of one
:class:`~.common.Checker`; :func:`semantic_diagnostics` runs them in one fixed order, so the
diagnostics of a config come out in the same order every time.
"""

from __future__ import annotations

from mlenv.config.rules import (
    acceptance,
    cluster,
    image,
    integers,
    network,
    nodes,
    platforms,
    storage,
)
from mlenv.config.rules.acceptance import CRON_FIELDS, cron_field, cron_problem
from mlenv.config.rules.common import MAX_QUANTITY, Checker, parse_quantity, split_list
from mlenv.config.rules.slurm import slurm_minutes
from mlenv.config.yamlpos import Parsed
from mlenv.errors import Diagnostic

__all__ = [
    "CRON_FIELDS",
    "MAX_QUANTITY",
    "cron_field",
    "cron_problem",
    "parse_quantity",
    "semantic_diagnostics",
    "slurm_minutes",
    "split_list",
]


def semantic_diagnostics(parsed: Parsed, file: str) -> list[Diagnostic]:
    """Every semantic-rule violation in ``parsed.data`` (see module docstring)."""
    c = Checker(parsed, file)
    if not isinstance(c.data, dict):
        return c.out
    cluster.names(c)
    storage.classes(c)
    image.check(c)
    cluster.free_text(c)
    nodes.gpu_nodes(c)
    nodes.pin_by(c)
    nodes.topology(c)
    acceptance.check(c)
    storage.claims_and_sizes(c)
    network.rdma(c)
    network.tcp(c)
    nodes.default_nodes(c)
    network.nccl_env(c)
    integers.quoted_integers(c)
    platforms.check(c)
    cluster.ports(c)
    return c.out
