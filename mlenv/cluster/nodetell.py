"""What ``mlenv quarantine`` / ``mlenv release`` tell a Kubernetes Node where a fleet looks:
an Event about the Node and, opt-in, the Node condition ``MlenvAcceptance``.

Fleet tooling reads Nodes, not our report folders: ``kubectl describe node`` and event
exporters show the Event (reason ``MlenvAcceptanceFailed`` when a run's verdict took the
node out, ``MlenvAcceptanceReleased`` when release put it back; the run id and the action
in the message), and node health-check operators act on conditions the way they act on
node-problem-detector's (``MlenvAcceptance=False``, reason and message; ``True`` again on
release). The condition lives in ``nodes/status``, a subresource with its own permission
(``auth can-i patch nodes --subresource=status``), asked before anything is written.

One builder for the printed commands and the ones :meth:`ClusterClient.tell_node` runs
(:meth:`mlenv.cluster.oc.OcCluster.tell_node`, the fake cluster's): every value is
validated for its key (the node a name, the message a quarantine note, the rest this
module's constants), the JSON is built with :mod:`json` and reaches kubectl as a file on
stdin or as the value of ``--patch=``, never as a word of its own.

Many nodes are told in few calls (:func:`tell_calls`): their Events in one List per
``create``, their conditions in one ``patch`` per group of nodes with the same entry.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mlenv import argv
from mlenv.contract import APP

CONDITION_TYPE = "MlenvAcceptance"
REASON_FAILED = "MlenvAcceptanceFailed"
REASON_PASSED = "MlenvAcceptancePassed"
REASON_RELEASED = "MlenvAcceptanceReleased"
# Node events live in the default namespace (the kubelet's own do; describe node finds them).
EVENT_NAMESPACE = "default"
COMPONENT = "mlenv"

# reason -> (event type, condition status): a failed node is a Warning and not healthy.
_MEANING = {
    REASON_FAILED: ("Warning", "False"),
    REASON_PASSED: ("Normal", "True"),
    REASON_RELEASED: ("Normal", "True"),
}


@dataclass(frozen=True)
class NodeTell:
    """One tell on one Node: the Event, and with ``condition`` the condition's new state."""

    node: str
    run_id: str
    reason: str  # REASON_FAILED | REASON_PASSED | REASON_RELEASED
    action: str  # what was done to the node: "quarantined", "released", …
    why: str  # the check and figure (a quarantine note's tail)
    at: str  # RFC 3339, UTC, second precision
    condition: bool = False

    def __post_init__(self) -> None:
        if self.reason not in _MEANING:
            raise ValueError(f"not a node tell reason: {self.reason!r}")

    @property
    def message(self) -> str:
        """``mlenv run <run-id>: <action>: <why>``, validated as a quarantine note."""
        return argv.note(argv.note_text(f"mlenv run {self.run_id}: {self.action}: {self.why}"))

    def event(self) -> dict[str, Any]:
        """The Event object (``generateName``: each tell is an Event of its own; the
        involved object's uid is the node's name, as the kubelet writes it and as
        ``kubectl describe node`` searches for it)."""
        node = argv.name("Node", self.node)
        type_, _ = _MEANING[self.reason]
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{node}.mlenv-",
                "namespace": EVENT_NAMESPACE,
                "labels": {"app.kubernetes.io/managed-by": APP},
            },
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "type": type_,
            "reason": self.reason,
            "message": self.message,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": self.at,
            "lastTimestamp": self.at,
            "count": 1,
        }

    def condition_entry(self) -> dict[str, str]:
        """The ``MlenvAcceptance`` entry of ``status.conditions``."""
        _, status = _MEANING[self.reason]
        return {
            "type": CONDITION_TYPE,
            "status": status,
            "reason": self.reason,
            "message": self.message,
            "lastHeartbeatTime": self.at,
            "lastTransitionTime": self.at,
        }

    def event_command(self) -> tuple[list[str], str]:
        """``create --namespace=default --filename=-`` and the Event as its stdin."""
        return (
            argv.kube("create", [f"--namespace={EVENT_NAMESPACE}", "--filename=-"]),
            json.dumps(self.event(), sort_keys=True),
        )

    def condition_command(self) -> list[str]:
        """``patch --subresource=status --type=strategic --patch=… -- node NODE``: a strategic
        merge keys ``status.conditions`` by type, so the kubelet's conditions stay as they are."""
        patch = json.dumps({"status": {"conditions": [self.condition_entry()]}}, sort_keys=True)
        return argv.kube(
            "patch",
            ["--subresource=status", "--type=strategic", f"--patch={patch}"],
            ["node", argv.name("Node", self.node)],
        )

    def shell_lines(self, binary: str = "kubectl") -> list[str]:
        """The commands as an operator types them (the Event through a pipe)."""
        words, body = self.event_command()
        lines = [f"echo {shlex.quote(body)} | {shlex.join([binary, *words])}"]
        if self.condition:
            lines.append(shlex.join([binary, *self.condition_command()]))
        return lines


# Events per ``create`` call (one List each), as nodemarks' names per call.
MAX_TELLS = 200


def tell_calls(
    tells: Sequence[NodeTell], per_call: int = MAX_TELLS
) -> list[tuple[list[str], str | None, tuple[str, ...]]]:
    """The calls that tell every node of ``tells``, each ``(argv, stdin, nodes)``: one
    ``create`` of a List of Events per ``per_call`` tells, then one ``patch`` of the
    condition per group of nodes whose condition entry is the same (``at`` and the
    message: a run's nodes with the same check and figure share one)."""
    if per_call < 1:
        raise ValueError(f"per_call must be 1 or more, got {per_call}")
    out: list[tuple[list[str], str | None, tuple[str, ...]]] = []
    for i in range(0, len(tells), per_call):
        chunk = tells[i : i + per_call]
        body = {"apiVersion": "v1", "kind": "List", "items": [t.event() for t in chunk]}
        words, _ = chunk[0].event_command()
        out.append((words, json.dumps(body, sort_keys=True), tuple(t.node for t in chunk)))
    groups: dict[str, list[str]] = {}
    for t in tells:
        if t.condition:
            patch = json.dumps({"status": {"conditions": [t.condition_entry()]}}, sort_keys=True)
            groups.setdefault(patch, []).append(argv.name("Node", t.node))
    for patch, nodes in groups.items():
        for i in range(0, len(nodes), per_call):
            names = tuple(nodes[i : i + per_call])
            words = argv.kube(
                "patch",
                ["--subresource=status", "--type=strategic", f"--patch={patch}"],
                ["node", *names],
            )
            out.append((words, None, names))
    return out


def tell_lines(tells: Sequence[NodeTell], binary: str = "kubectl") -> list[str]:
    """:func:`tell_calls` as an operator types them (each List through a pipe)."""
    return [
        f"echo {shlex.quote(body)} | {shlex.join([binary, *words])}"
        if body is not None
        else shlex.join([binary, *words])
        for words, body, _ in tell_calls(tells)
    ]


def condition_of(node: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``MlenvAcceptance`` condition of a Node object, None when it has none."""
    status = node.get("status") if isinstance(node, dict) else None
    conds = status.get("conditions") if isinstance(status, dict) else None
    for c in conds if isinstance(conds, list) else []:
        if isinstance(c, dict) and c.get("type") == CONDITION_TYPE:
            return c
    return None


def ours(node: dict[str, Any] | None, run_id: str) -> bool:
    """Whether the Node's ``MlenvAcceptance`` condition is this run's ``False``."""
    c = condition_of(node)
    return (
        c is not None
        and c.get("status") == "False"
        and str(c.get("message", "")).startswith(f"mlenv run {run_id}:")
    )


def merge_condition(node: dict[str, Any], entry: dict[str, str]) -> None:
    """Put ``entry`` into ``node``'s ``status.conditions`` by type, as the strategic merge
    patch does (the fake cluster's half): the entry's fields replace that type's, the
    other conditions stay."""
    conds = node.setdefault("status", {}).setdefault("conditions", [])
    for i, c in enumerate(conds):
        if c.get("type") == entry["type"]:
            conds[i] = {**c, **entry}
            return
    conds.append(dict(entry))


def run_tells(doc: dict[str, Any], at: str) -> list[NodeTell]:
    """The Events a finished run tells its judged Kubernetes Nodes (``acceptance.node_events``):
    a FAIL node ``MlenvAcceptanceFailed`` with its action and first finding, a PASS node
    ``MlenvAcceptancePassed``. A WARN or UNKNOWN node, and a node that is a host or a pod
    rather than a Kubernetes Node, gets none (its status is in ``metrics.prom``)."""
    run_id = str(doc.get("run_id") or "")
    sec = doc.get("node_verdicts")
    nodes = sec.get("nodes") if isinstance(sec, dict) else None
    out = []
    for n in nodes if isinstance(nodes, list) else []:
        if not isinstance(n, dict) or n.get("node_from") != "kubernetes":
            continue
        status = n.get("status")
        if status not in ("PASS", "FAIL"):
            continue
        action = n.get("action")
        action_id = action.get("id") if isinstance(action, dict) else None
        found = [f for f in n.get("findings") or [] if isinstance(f, dict)]
        first = next((f for f in found if f.get("status") == "FAIL"), None)
        out.append(
            NodeTell(
                node=str(n.get("node")),
                run_id=run_id,
                reason=REASON_FAILED if status == "FAIL" else REASON_PASSED,
                action=f"{status}, action {action_id or 'none'}",
                why=(
                    f"{first.get('check')} {first.get('figure')}"
                    if first
                    else f"{len(n.get('checks') or [])} check(s) passed"
                ),
                at=at,
            )
        )
    return out
