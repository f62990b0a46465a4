"""Marking Kubernetes Nodes for ``mlenv quarantine`` / ``mlenv release``.

:class:`KubeMarker` is the Kubernetes/OpenShift :class:`mlenv.quarantine.Marker`: the
label ``ml-dev-env.io/health=fail``, the note in the ``ml-dev-env.io/quarantine``
annotation and a ``NoSchedule`` taint, printed and run from the same argument lists
(:func:`mlenv.cluster.nodemarks.mark_calls`, applied by ``ClusterClient.mark_nodes``):
one call per kind of mark for all the nodes, not three per node. A Node whose label or
quarantine taint someone else set is left alone at quarantine (checked before any mark);
at release, one whose label, taint or annotation someone changed (``health=rma``) is
left as it is. The nodes are read in one call before they are judged, and read back in
one more only when a call failed: kubectl marks the names it can and names the ones it
cannot, and what each node carries then is its verdict. A dry run has no client: it
only prints.

Each mark and its removal is also told where a fleet looks
(:mod:`mlenv.cluster.nodetell`, through ``ClusterClient.tell_node``): an Event about the
Node, and with ``condition`` (``mlenv quarantine --condition``) the Node condition
``MlenvAcceptance=False``, set back to ``True`` by release where this run set it, in
few calls too (:func:`mlenv.cluster.nodetell.tell_calls`). Every permission the marks and
tells need is asked before the first node is changed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mlenv.cluster import nodemarks, nodetell
from mlenv.cluster.api import Question
from mlenv.cluster.nodemarks import NodeMarks, hostname_is_name
from mlenv.cluster.nodetell import NodeTell

if TYPE_CHECKING:
    from mlenv.cluster.api import ClusterClient
    from mlenv.quarantine import Marked, Run, Target

MARKED = "quarantined (health label, note and NoSchedule taint set)"
UNMARKED = "released (health label, note and taint removed)"


class KubeMarker:
    """Kubernetes/OpenShift nodes through the cluster client (``binary``: oc or kubectl, for
    the printed commands)."""

    kind = "kubernetes"
    acts = True

    def __init__(
        self, binary: str, client: ClusterClient | None = None, *, condition: bool = False
    ) -> None:
        self.binary = binary
        self.client = client
        self._condition: bool | None = condition
        self._release_of: Run | None = None
        self._nodes: dict[str, dict[str, Any] | None] = {}  # read once, judged from here

    @classmethod
    def for_release(cls, binary: str, client: ClusterClient, run: Run) -> KubeMarker:
        """The marker that undoes ``run``'s quarantine: it sets the condition back when a
        node the run still holds carries this run's ``MlenvAcceptance=False`` (and then
        asks for ``patch nodes/status`` first). The nodes are read when first needed, after
        release has checked the request (a bad one is exit 2 before any cluster call)."""
        m = cls(binary, client)
        m._condition, m._release_of = None, run
        return m

    @property
    def condition(self) -> bool:
        """Whether this marker writes the ``MlenvAcceptance`` condition."""
        if self._condition is None:
            from mlenv.quarantine import Record

            run = self._release_of
            rec = Record.read(run.report_dir) if run and run.report_dir is not None else None
            held = [n for n, e in (rec.nodes.items() if rec else []) if e.get("state") == "applied"]
            self.read(held)
            self._condition = run is not None and any(
                nodetell.ours(self._node(n), run.run_id) for n in held
            )
        return self._condition

    def _tell(self, t: Target, at: str, *, remove: bool) -> NodeTell:
        # release sets back only a condition this run set (the node may never have had one)
        told = self.condition and (not remove or nodetell.ours(self._node(t.node), t.run_id))
        return NodeTell(
            node=t.node,
            run_id=t.run_id,
            reason=nodetell.REASON_RELEASED if remove else nodetell.REASON_FAILED,
            action=UNMARKED if remove else MARKED,
            why=f"{t.check} {t.figure}",
            at=at,
            condition=told,
        )

    def _client(self) -> ClusterClient:
        if self.client is None:
            raise AssertionError("a dry run reads and changes nothing on the cluster")
        return self.client

    def read(self, nodes: list[str]) -> None:
        """Each Node not read yet (a Node that is not there: None)."""
        self._nodes.update(self._read([n for n in dict.fromkeys(nodes) if n not in self._nodes]))

    def _read(self, nodes: list[str]) -> dict[str, dict[str, Any] | None]:
        """The Nodes in one ``get_many``: one list of every Node for more than a handful
        (read in chunks of 50 names, every chunk listed every Node: 11 lists at 512), a
        few dozen names to a call where the user may not list."""
        if not nodes:
            return {}
        got = self._client().get_many([("Node", n, None) for n in nodes])
        return {n: got.get(("Node", n, None)) for n in nodes}

    def _node(self, name: str) -> dict[str, Any] | None:
        self.read([name])
        return self._nodes[name]

    def _by_hostname(self, ts: list[Target]) -> set[str]:
        """The targets' nodes read so far whose hostname label is their name: their calls
        choose them by a selector. The dry run reads nothing, so its plan names every
        node; ``--apply`` plans (for its record) and marks after reading them, alike."""
        return {t.node for t in ts if (n := self._nodes.get(t.node)) and hostname_is_name(n)}

    def plan(self, ts: list[Target], *, remove: bool = False) -> list[str]:
        at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        calls = nodemarks.mark_calls(
            [NodeMarks(t.node, t.note) for t in ts],
            remove=remove,
            by_hostname=self._by_hostname(ts),
        )
        tells = [self._tell(t, at, remove=remove) for t in ts]
        return nodemarks.shell_lines(calls, self.binary) + nodetell.tell_lines(tells, self.binary)

    def unusable(self, t: Target) -> str | None:
        if t.node_from != "kubernetes":
            return (
                f"the run did not record the Kubernetes Node of {', '.join(t.hosts) or t.node} (a pod without "
                "MLENV_NODE_NAME: deployed before node verdicts); re-run after mlenv deploy"
            )
        return None

    def permitted(self) -> tuple[bool, str]:
        c = self._client()
        ns = nodetell.EVENT_NAMESPACE
        asks = [  # (question, what it allows, as kubectl asks it)
            (Question("patch", "nodes"), "patch nodes", "patch nodes"),
            (
                Question("create", "events", ns),
                f"create events in {ns}",
                f"create events --namespace={ns}",
            ),
        ]
        if self.condition:
            asks.append(
                (
                    Question("patch", "nodes", subresource="status"),
                    "patch nodes/status",
                    "patch nodes --subresource=status",
                )
            )
        answers = c.can_i_many([q for q, _, _ in asks])
        refused = [(what, ask) for (_, what, ask), ok in zip(asks, answers, strict=True) if not ok]
        if not refused:
            return True, ""
        return False, f"{c.whoami()} may not " + "; ".join(
            f"{what} (kubectl auth can-i {ask}: no)" for what, ask in refused
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

    def mark_all(
        self, ts: list[Target], *, remove: bool = False, done: Callable[[Target], None]
    ) -> Marked:
        """The marks in one call per kind (:meth:`ClusterClient.mark_nodes`); when a call
        failed or chose nodes by a selector, the nodes read back (one list for many) and
        each judged by what it carries (a
        node that has every mark is done whatever the call said of the others); then the
        marked nodes told, in one List of Events (and the condition's patches)."""
        from mlenv.quarantine import Marked

        c = self._client()
        chosen = self._by_hostname(ts)
        said = c.mark_nodes(
            [NodeMarks(t.node, t.note) for t in ts], remove=remove, by_hostname=chosen
        )
        failed: dict[str, str] = {}
        # A selector passes over a node it no longer matches (deleted since it was read)
        # without a word: after selector calls every node is read back, as after a failure.
        if said or chosen:
            now = self._read([t.node for t in ts])
            for t in ts:
                why = _not_as_meant(now.get(t.node), t.note, remove=remove)
                if why is not None:
                    named = [ln for ln in said if f'"{t.node}"' in ln or f" {t.node} " in ln]
                    heard = "; ".join(dict.fromkeys(named or said))
                    failed[t.node] = f"{why} ({heard})" if heard else why
        ok = [t for t in ts if t.node not in failed]
        for t in ok:
            done(t)
        at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        untold = c.tell_nodes([self._tell(t, at, remove=remove) for t in ok]) if ok else []
        return Marked(failed=failed, untold=untold)


def _not_as_meant(node: dict[str, Any] | None, note: str, *, remove: bool) -> str | None:
    """Why a Node read back does not carry what the calls meant it to (None: it does):
    every mark of the quarantine, or (``remove``) none of them. A Node that is gone
    carries none."""
    has = nodemarks.carried(node, note)
    if remove:
        return f"its {', '.join(has)} still on" if has else None
    if node is None:
        return "no such Node in the cluster any more"
    lacks = [m for m in ("label", "annotation", "taint") if m not in has]
    return f"its {', '.join(lacks)} not set" if lacks else None
