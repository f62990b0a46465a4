"""The marks ``mlenv quarantine`` puts on Kubernetes Nodes, as kubectl/oc argument lists.

One builder for both the dry run (the commands printed for an operator or an admin) and
``--apply`` (:meth:`mlenv.cluster.oc.OcCluster.mark_nodes` runs the very same lists, and
the record keeps them). Every value is validated for its key: the node a name, the
label and taint ``fail``, the annotation text from a narrow alphabet (run id, check name
and figure), and everything stands after ``--``.

The marks go on in one call per kind of mark, not per node (:func:`mark_calls`):
``kubectl label``, ``annotate`` and ``taint`` each take many node names, and a node
kubectl cannot mark (deleted since it was read, refused) is one line of its own while the
others are marked. The label and the taint are the same on every node: one call for all.
The annotation carries each node's note, so nodes share a call only when their notes are
the same.

kubectl reads each *named* node with a GET of its own under its client-side rate limit
(five a second: 4.5 s for 32 nodes, about 100 s a call for 512), so a caller that has
read the nodes passes those whose ``kubernetes.io/hostname`` label is their name
(:func:`hostname_is_name`) and their calls choose them by that label in one list. A
selector passes over a node it does not match without a word; a node never read (the
dry run's plan, which reads nothing, prints names an operator can run anywhere) or whose
hostname label is another is named, and ``--apply`` reads the nodes back after selector
calls to judge each by what it carries.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlenv import argv
from mlenv.contract import ANNOTATION_QUARANTINE, LABEL_HEALTH
from mlenv.contract import HEALTH_FAIL as HEALTH_FAIL
from mlenv.contract import TAINT_EFFECT as TAINT_EFFECT

# Names per kubectl call. kubectl reads and patches each named node in turn, so a call's
# time grows with its names; 200 keep one call's argv under 52 KB (at 253-character
# names) and its deadline within minutes, and 4096 nodes take 21 calls per kind.
MAX_NAMES = 200
HOSTNAME_LABEL = "kubernetes.io/hostname"  # the name a node carries as a label value


@dataclass(frozen=True)
class NodeMarks:
    """What one quarantine puts on one node: the label, the annotation (why), the taint."""

    node: str
    note: str  # "mlenv <run-id>: <check> <figure>"

    def commands(self, *, remove: bool = False) -> list[list[str]]:
        """``[[verb, options…, --, positionals…], …]`` without the binary: label, annotate,
        taint (or, with ``remove``, the three undoing them)."""
        return [c.words() for c in mark_calls([self], remove=remove)]

    def shell_lines(self, binary: str = "kubectl", *, remove: bool = False) -> list[str]:
        """The commands as an operator types them (shell-quoted)."""
        return shell_lines(mark_calls([self], remove=remove), binary)


@dataclass(frozen=True)
class MarkCall:
    """One kubectl call putting one kind of mark on (or taking it off) several nodes."""

    verb: str  # label | annotate | taint
    options: tuple[str, ...]
    nodes: tuple[str, ...]
    mark: str  # key=value, key=value:effect; with a trailing "-" its removal
    # the nodes chosen by their hostname label (``-l 'kubernetes.io/hostname in (…)'``)
    # instead of by name: kubectl reads named objects one GET at a time under its
    # client-side rate limit (5 a second: 4.5 s for 32 nodes), a selector in one list
    by_hostname: bool = False

    def words(self) -> list[str]:
        """``[verb, options…, --, node, NODE…, mark]`` without the binary; by hostname
        ``[verb, options…, --selector=…, --, node, mark]``."""
        if self.by_hostname:
            chosen = f"--selector={argv.selector_in(HOSTNAME_LABEL, self.nodes)}"
            return argv.kube(self.verb, [*self.options, chosen], ["node", self.mark])
        return argv.kube(self.verb, list(self.options), ["node", *self.nodes, self.mark])


def hostname_is_name(node: Mapping[str, Any]) -> bool:
    """Whether a Node read from the cluster carries its own name as its
    ``kubernetes.io/hostname`` label (a kubelet's ``--hostname-override`` makes it
    another), short enough for a label value: a hostname selector finds it."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return (
        isinstance(labels, Mapping)
        and isinstance(name, str)
        and len(name) <= 63
        and labels.get(HOSTNAME_LABEL) == name
    )


def _chunks(nodes: Sequence[str], size: int) -> list[tuple[str, ...]]:
    return [tuple(nodes[i : i + size]) for i in range(0, len(nodes), size)]


def chosen_calls(
    verb: str,
    options: tuple[str, ...],
    names: Sequence[str],
    mark: str,
    selectable: Callable[[str], bool],
    per_call: int = MAX_NAMES,
) -> list[MarkCall]:
    """One call of ``verb`` per ``per_call`` names: first those ``selectable`` by a
    hostname selector (and short enough for a label value), then the rest by name."""
    chosen = [n for n in names if len(n) <= 63 and selectable(n)]
    picked = set(chosen)
    named = [n for n in names if n not in picked]
    return [
        MarkCall(verb, options, c, mark, by_hostname=group is chosen)
        for group in (chosen, named)
        for c in _chunks(group, per_call)
    ]


def mark_phases(calls: Sequence[MarkCall]) -> list[list[MarkCall]]:
    """``calls`` (as :func:`mark_calls` orders them) in the steps that may run at once:
    the taint's calls alone, the label's and the notes' together, in the calls' order."""
    phases: list[list[MarkCall]] = []
    for call in calls:
        alone = call.verb == "taint"
        if phases and (phases[-1][0].verb == "taint") == alone:
            phases[-1].append(call)
        else:
            phases.append([call])
    return phases


def mark_calls(
    marks: Sequence[NodeMarks],
    *,
    remove: bool = False,
    per_call: int = MAX_NAMES,
    by_hostname: Collection[str] = (),
) -> list[MarkCall]:
    """The calls that put the marks on every node of ``marks`` (``remove``: take them off),
    in the order they run: label, annotate, taint (undone in reverse). One call per kind
    of mark for every ``per_call`` nodes; the annotation one per distinct note (nodes
    with the same note share it). Each node once, in the order given. The nodes in
    ``by_hostname`` (read, :func:`hostname_is_name`) are chosen by a hostname selector,
    the rest named."""
    if per_call < 1:
        raise ValueError(f"per_call must be 1 or more, got {per_call}")
    notes: dict[str, str] = {}
    for m in marks:
        notes.setdefault(argv.name("Node", m.node), argv.note(m.note))
    nodes = list(notes)
    key = argv.label_key(LABEL_HEALTH)
    note_key = argv.label_key(ANNOTATION_QUARANTINE)
    taint = f"{key}={argv.label_value(HEALTH_FAIL)}:{TAINT_EFFECT}"

    def each(
        verb: str, options: tuple[str, ...], names: Sequence[str], mark: str
    ) -> list[MarkCall]:
        return chosen_calls(verb, options, names, mark, by_hostname.__contains__, per_call)

    if remove:
        return [
            *each("taint", (), nodes, f"{taint}-"),
            *each("annotate", (), nodes, f"{note_key}-"),
            *each("label", (), nodes, f"{key}-"),
        ]
    by_note: dict[str, list[str]] = {}
    for node, note in notes.items():
        by_note.setdefault(note, []).append(node)
    return [
        *each("label", ("--overwrite",), nodes, f"{key}={argv.label_value(HEALTH_FAIL)}"),
        *(
            call
            for note, group in by_note.items()
            for call in each("annotate", ("--overwrite",), group, f"{note_key}={note}")
        ),
        *each("taint", (), nodes, taint),
    ]


def shell_lines(calls: Sequence[MarkCall], binary: str = "kubectl") -> list[str]:
    """The calls as an operator types them (shell-quoted)."""
    return [shlex.join([binary, *c.words()]) for c in calls]


def carried(node: dict[str, object] | None, note: str) -> list[str]:
    """Which of one quarantine's marks (``label``, ``annotation`` with ``note``, ``taint``)
    ``node`` carries: read back after a call that failed, to know what it did."""
    if node is None:
        return []
    meta = node.get("metadata") if isinstance(node, dict) else None
    notes = (meta or {}).get("annotations") if isinstance(meta, dict) else None
    out = []
    if marked(node) == HEALTH_FAIL:
        out.append("label")
    if isinstance(notes, dict) and notes.get(ANNOTATION_QUARANTINE) == note:
        out.append("annotation")
    if OUR_TAINT in health_taints(node):
        out.append("taint")
    return out


def ours(node: dict[str, object], run_id: str) -> bool:
    """Whether ``node`` (a Node object) carries this run's quarantine annotation."""
    meta = node.get("metadata") if isinstance(node, dict) else None
    notes = (meta or {}).get("annotations") if isinstance(meta, dict) else None
    value = notes.get(ANNOTATION_QUARANTINE) if isinstance(notes, dict) else None
    return isinstance(value, str) and value.startswith(f"mlenv {run_id}:")


def marked(node: dict[str, object]) -> str | None:
    """The quarantine label's value on ``node`` when it has one (ours or someone's), else None."""
    meta = node.get("metadata") if isinstance(node, dict) else None
    labels = (meta or {}).get("labels") if isinstance(meta, dict) else None
    value = labels.get(LABEL_HEALTH) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None


def health_taints(node: dict[str, object]) -> list[str]:
    """Every taint on ``node`` with the quarantine key, as ``key=value:effect``."""
    spec = node.get("spec") if isinstance(node, dict) else None
    taints = (spec or {}).get("taints") if isinstance(spec, dict) else None
    listed = taints if isinstance(taints, list) else []
    return [
        f"{t.get('key')}={t.get('value') or ''}:{t.get('effect')}"
        for t in listed
        if isinstance(t, dict) and t.get("key") == LABEL_HEALTH
    ]


OUR_TAINT = f"{LABEL_HEALTH}={HEALTH_FAIL}:{TAINT_EFFECT}"


def changed_marks(node: dict[str, object], run_id: str) -> str | None:
    """What someone else changed of this run's marks on ``node`` (None: all still ours, or gone).

    A label that now says something else (``rma``), a taint with our key that is not ours,
    an annotation that is not this run's: release must leave such a node as it is."""
    value = marked(node)
    if value is not None and value != HEALTH_FAIL:
        return f"its {LABEL_HEALTH} label is now {value!r}"
    other = [t for t in health_taints(node) if t != OUR_TAINT]
    if other:
        return f"it carries the taint {', '.join(other)}"
    meta = node.get("metadata") if isinstance(node, dict) else None
    notes = (meta or {}).get("annotations") if isinstance(meta, dict) else None
    note = notes.get(ANNOTATION_QUARANTINE) if isinstance(notes, dict) else None
    if note is not None and not ours(node, run_id):
        return f"its {ANNOTATION_QUARANTINE} annotation is no longer this run's"
    return None
