"""The pool label of ``nodes.pin_by: label``: deploy puts it on the pinned Nodes, the pods
select it, teardown takes it off.

A node affinity naming the pinned nodes repeats all N names in each of the N pods, so
every pod list, watch and status read grows with N² (11 MB of pods at 512 nodes, about
300 MB at 2048). One label, ``pool.ml-dev-env.io/<namespace>=<cluster.name>``, keeps each
pod the same size whatever the node count. The cost is rights on Nodes: labelling needs
``patch nodes``, which a namespace user seldom has. Deploy labels only the nodes that lack
the label, so nodes an admin labelled once (the commands :func:`label_lines` prints) need
no rights at all, and a re-deploy patches nothing.

The calls are the quarantine's (:class:`mlenv.cluster.nodemarks.MarkCall`): one ``label``
per 200 nodes, every value checked for its key, the names after ``--``. They choose the
nodes by their ``kubernetes.io/hostname`` label, which is one list where names are a GET
each; a selector passes over a node it does not match without a word, so a node whose
hostname label is not its name (a kubelet's ``--hostname-override``) is named instead,
known from the node objects preflight and teardown read anyway. Labelling never
overwrites: a node pinned by another deployment of the namespace (the key's value another
cluster name) is kubectl's refusal, and preflight names it before anything is applied.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from mlenv import argv
from mlenv.cluster.api import ClusterClient, Forbidden, Manifest
from mlenv.cluster.nodemarks import MarkCall, chosen_calls, hostname_is_name, shell_lines
from mlenv.config.model import Cluster
from mlenv.errors import InfraError
from mlenv.render.names import pinned_by_label, pool_label, pool_selector

__all__ = [
    "PoolLabelFailed",
    "label_calls",
    "label_lines",
    "labelled_nodes",
    "named_nodes",
    "pinned_by_label",
    "pool_holder",
    "pool_label",
    "pool_selector",
    "put_labels",
    "take_labels",
]


class PoolLabelFailed(InfraError):
    """kubectl did not put the pool label on every pinned node (exit 3)."""


def named_nodes(nodes: Iterable[Manifest]) -> set[str]:
    """The names of ``nodes`` a hostname selector would not find (their
    ``kubernetes.io/hostname`` label another, or absent): their calls name them."""
    return {str(n["metadata"]["name"]) for n in nodes if not hostname_is_name(n)}


def label_calls(
    cluster: Cluster, nodes: Sequence[str], *, remove: bool = False, named: Collection[str] = ()
) -> list[MarkCall]:
    """``kubectl label -l 'kubernetes.io/hostname in (N,…)' -- node KEY=VALUE``
    (``remove``: ``KEY-``) for every 200 nodes; the nodes in ``named`` (hostname label not
    their name) and any whose name is too long for a label value (over 63 characters) by
    their names."""
    key, value = pool_label(cluster)
    mark = (
        f"{argv.label_key(key)}-" if remove else f"{argv.label_key(key)}={argv.label_value(value)}"
    )
    names = [argv.name("Node", n) for n in nodes]
    return chosen_calls("label", (), names, mark, lambda n: n not in named)


def label_lines(cluster: Cluster, nodes: Sequence[str], named: Collection[str] = ()) -> list[str]:
    """The commands an admin runs to label ``nodes`` (shell-quoted; ``oc`` on OpenShift)."""
    binary = "oc" if cluster.traits.openshift else "kubectl"
    return shell_lines(label_calls(cluster, nodes, named=named), binary)


def pool_holder(cluster: Cluster, node: dict[str, object]) -> str | None:
    """The cluster name the node's pool label key of this namespace holds (this
    deployment's, or another's), None when it has none."""
    meta = node.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    held = labels.get(pool_label(cluster)[0]) if isinstance(labels, dict) else None
    return None if held is None else str(held)


def labelled_nodes(cluster: Cluster, client: ClusterClient) -> list[Manifest] | None:
    """The Nodes carrying this deployment's pool label, in one list by label, by name;
    None when the user may not list Nodes."""
    key, value = pool_label(cluster)
    try:
        nodes = client.list("Node", None, {key: value})
    except Forbidden:
        return None
    return sorted(nodes, key=lambda n: str(n["metadata"]["name"]))


def put_labels(
    cluster: Cluster, client: ClusterClient, nodes: Sequence[str], named: Collection[str] = ()
) -> None:
    """Label ``nodes`` with the pool label (``named``: by name, see :func:`label_calls`);
    PoolLabelFailed with kubectl's lines (and the commands for an admin) when any node
    was not labelled."""
    if not nodes:
        return
    said = client.run_marks(label_calls(cluster, nodes, named=named))
    if said:
        raise PoolLabelFailed(
            "nodes.pin_by: label: the pool label did not go on every pinned node:\n  "
            + "\n  ".join(said)
            + "\nan admin can label them (then deploy needs no rights on Nodes):\n  "
            + "\n  ".join(label_lines(cluster, nodes, named))
        )


def take_labels(cluster: Cluster, client: ClusterClient, nodes: Sequence[Manifest]) -> list[str]:
    """Take the pool label off ``nodes`` (read from the cluster: those whose hostname
    label is not their name go by name); what kubectl said of those it could not unlabel."""
    if not nodes:
        return []
    names = [str(n["metadata"]["name"]) for n in nodes]
    return client.run_marks(label_calls(cluster, names, remove=True, named=named_nodes(nodes)))
