"""Marking Kubernetes Nodes for ``mlenv quarantine`` / ``mlenv release``.

:class:`KubeMarker` is the Kubernetes/OpenShift :class:`mlenv.quarantine.Marker`: the
label ``ml-dev-env.io/health=fail``, the note in the ``ml-dev-env.io/quarantine``
annotation and a ``NoSchedule`` taint, printed and run from the same argument lists
(:class:`mlenv.cluster.nodemarks.NodeMarks`, applied by ``ClusterClient.mark_node``). A
Node whose label or quarantine taint someone else set is left alone at quarantine
(checked before any mark); at release, one whose label, taint or annotation someone
changed (``health=rma``) is left as it is. A dry run has no client: it only prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlenv.cluster import nodemarks
from mlenv.cluster.nodemarks import NodeMarks

if TYPE_CHECKING:
    from mlenv.cluster.api import ClusterClient
    from mlenv.quarantine import Target


class KubeMarker:
    """Kubernetes/OpenShift nodes through the cluster client (``binary``: oc or kubectl, for
    the printed commands)."""

    kind = "kubernetes"
    acts = True

    def __init__(self, binary: str, client: ClusterClient | None = None) -> None:
        self.binary = binary
        self.client = client

    def _client(self) -> ClusterClient:
        if self.client is None:
            raise AssertionError("a dry run reads and changes nothing on the cluster")
        return self.client

    def _node(self, name: str) -> dict[str, Any] | None:
        return self._client().get("Node", name, None)

    def commands(self, t: Target, *, remove: bool = False) -> list[str]:
        return NodeMarks(t.node, t.note).shell_lines(self.binary, remove=remove)

    def unusable(self, t: Target) -> str | None:
        if t.node_from != "kubernetes":
            return (
                f"the run did not record the Kubernetes Node of {', '.join(t.hosts) or t.node} (a pod without "
                "MLENV_NODE_NAME: deployed before node verdicts); re-run after mlenv deploy"
            )
        return None

    def permitted(self) -> tuple[bool, str]:
        c = self._client()
        ok = c.can_i("patch", "nodes")
        return (
            ok,
            "" if ok else f"{c.whoami()} may not patch nodes (kubectl auth can-i patch nodes: no)",
        )

    def foreign_mark(self, t: Target) -> str | None:
        node = self._node(t.node)
        if node is None:
            return "no such Node in the cluster"
        if nodemarks.marked(node) is not None and not nodemarks.ours(node, t.run_id):
            return (
                "already carries the ml-dev-env.io/health label, set by someone else or another run"
            )
        # Checked before any mark: a taint with our key that is not ours would make the
        # taint step fail after the label and annotation were set.
        taints = nodemarks.health_taints(node)
        if taints and not nodemarks.ours(node, t.run_id):
            return f"already carries the taint {', '.join(taints)}, set by someone else"
        return None

    def not_ours_now(self, t: Target) -> str | None:
        node = self._node(t.node)
        if node is None:
            return "no such Node in the cluster any more"
        changed = nodemarks.changed_marks(node, t.run_id)
        if changed:
            return f"{changed} (changed by someone else): left alone"
        if not nodemarks.ours(node, t.run_id) and not t.partial:
            return "its quarantine annotation is no longer this run's (changed by someone else): left alone"
        return None

    def mark(self, t: Target, *, remove: bool = False) -> None:
        self._client().mark_node(NodeMarks(t.node, t.note), remove=remove)
