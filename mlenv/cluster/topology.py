"""Racks from a Kubernetes Node label for fabric.localize (``nodes.topology_label``).

At ``mlenv launch`` the control host reads the Nodes the workload's pods run on (one
``get Node`` each: the run's nodes only, not every Node of a large cluster) and groups
them by the label's value into the same rack → nodes map ``nodes.topology`` gives
(``MLENV_TOPOLOGY``, :mod:`mlenv.contract`), so localization does not know where its
racks came from. Nodes are cluster-scoped: a user whose role is only namespaced may be
refused ``get nodes``; then the run goes on without racks, said in one warning line.

:func:`racks_from_labels` is the pure part; :func:`read` talks to the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mlenv import contract
from mlenv.cluster.api import ClusterClient, Forbidden
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.contract import rack_name
from mlenv.errors import MlenvError


@dataclass
class LabelTopology:
    """What the label gave: the racks (empty: none), an info line, warnings (one line each)."""

    racks: dict[str, list[str]] = field(default_factory=dict)
    info: str = ""
    warnings: list[str] = field(default_factory=list)

    def env_value(self) -> str | None:
        """The racks as ``MLENV_TOPOLOGY``'s JSON, or None without racks."""
        return contract.topology_json(self.racks) if self.racks else None


def racks_from_labels(label: str, nodes: Sequence[tuple[str, Mapping[str, str]]]) -> LabelTopology:
    """Group ``nodes`` ((Node name, its labels) in pod order) by the value of ``label``.

    A Node without the label (or with an empty value) is in no rack: localized on its own.
    A value that had to be rewritten is said; two different values that come out as one
    rack name (``Rack_A`` and ``rack-a``) are not merged: their nodes are in no rack.
    """
    out = LabelTopology()
    by_value: dict[str, list[str]] = {}
    unlabelled: list[str] = []
    for node, labels in nodes:
        value = str(labels.get(label) or "").strip()
        (by_value.setdefault(value, []) if value else unlabelled).append(node)
    names: dict[str, list[str]] = {}
    for value in by_value:
        rack = rack_name(value)
        if rack is None:
            out.warnings.append(
                f"topology: label {label}={value!r} on {', '.join(by_value[value])} is not a "
                "rack name (a DNS label): those nodes are in no rack"
            )
            continue
        names.setdefault(rack, []).append(value)
    for rack, values in names.items():
        if len(values) > 1:
            out.warnings.append(
                f"topology: label values {', '.join(map(repr, values))} all read as rack {rack}: "
                "their nodes are in no rack (rename the values apart)"
            )
            continue
        if values[0] != rack:
            out.warnings.append(f"topology: label value {values[0]!r} used as rack {rack}")
        out.racks[rack] = list(by_value[values[0]])
    if unlabelled:
        out.warnings.append(
            f"topology: no {label} label on {', '.join(unlabelled)}: localized on their own"
        )
    placed = sum(len(v) for v in out.racks.values())
    out.info = (
        f"topology: {placed} of {len(nodes)} node(s) in {len(out.racks)} rack(s) from the Node "
        f"label {label}"
        if out.racks
        else ""
    )
    return out


def read(cfg: ClusterConfig, client: ClusterClient) -> LabelTopology:
    """The racks of the Nodes the workload's pods run on, from ``cfg.topology_label``.

    Never raises for what the cluster refuses: ``get nodes`` forbidden, a Node gone, a
    pod not scheduled yet each become a warning and the run goes on (without racks, or
    without those nodes).
    """
    from mlenv.cluster.pods import worker_pods
    from mlenv.render.names import workload

    label = cfg.topology_label
    nodes = list(dict.fromkeys(p.node for p in worker_pods(cfg, client) if p.node))
    found: list[tuple[str, Mapping[str, str]]] = []
    gone: list[str] = []
    for n in nodes:
        try:
            obj = client.get("Node", n, None)
        except Forbidden:
            return LabelTopology(
                warnings=[
                    f"warning: topology: {_who(client)} may not read Nodes (get nodes is cluster-scoped), so the "
                    f"racks of label {label} are unknown: this run localizes without them (an admin can grant "
                    "get on nodes, or list the racks in nodes.topology)"
                ]
            )
        if obj is None:
            gone.append(n)
            continue
        found.append((n, dict((obj.get("metadata") or {}).get("labels") or {})))
    out = racks_from_labels(label, found)
    out.warnings = [f"warning: {w}" for w in out.warnings]
    if gone:
        out.warnings.append(f"warning: topology: Node {', '.join(gone)} not found: in no rack")
    if not nodes:
        out.warnings.append(
            f"warning: topology: no pod of the {workload(cfg).kind} is on a Node yet: no racks"
        )
    return out


def _who(client: ClusterClient) -> str:
    """The logged-in user's name for a warning, or a plain phrase when it cannot be read."""
    try:
        return client.whoami() or "this user"
    except MlenvError:  # the warning must not fail the run; the name is only decoration here
        return "this user"
