"""The marks ``mlenv quarantine`` puts on a Kubernetes Node, as kubectl/oc argument lists.

One builder for both the dry run (the commands printed for an operator or an admin) and
``--apply`` (:meth:`mlenv.cluster.oc.OcCluster.mark_node` runs the very same lists), so
what is printed is what runs. Every value is validated for its key: the node a name, the
label and taint ``fail``, the annotation text from a narrow alphabet (run id, check name
and figure), and everything stands after ``--``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from mlenv import argv
from mlenv.contract import ANNOTATION_QUARANTINE, LABEL_HEALTH
from mlenv.contract import HEALTH_FAIL as HEALTH_FAIL
from mlenv.contract import TAINT_EFFECT as TAINT_EFFECT


@dataclass(frozen=True)
class NodeMarks:
    """What one quarantine puts on one node: the label, the annotation (why), the taint."""

    node: str
    note: str  # "mlenv <run-id>: <check> <figure>"

    def commands(self, *, remove: bool = False) -> list[list[str]]:
        """``[[verb, options…, --, positionals…], …]`` without the binary: label, annotate,
        taint (or, with ``remove``, the three undoing them)."""
        node = argv.name("Node", self.node)
        key = argv.label_key(LABEL_HEALTH)
        if remove:
            return [
                argv.kube("taint", [], ["node", node, f"{key}={HEALTH_FAIL}:{TAINT_EFFECT}-"]),
                argv.kube(
                    "annotate", [], ["node", node, f"{argv.label_key(ANNOTATION_QUARANTINE)}-"]
                ),
                argv.kube("label", [], ["node", node, f"{key}-"]),
            ]
        return [
            argv.kube(
                "label", ["--overwrite"], ["node", node, f"{key}={argv.label_value(HEALTH_FAIL)}"]
            ),
            argv.kube(
                "annotate",
                ["--overwrite"],
                ["node", node, f"{argv.label_key(ANNOTATION_QUARANTINE)}={argv.note(self.note)}"],
            ),
            argv.kube("taint", [], ["node", node, f"{key}={HEALTH_FAIL}:{TAINT_EFFECT}"]),
        ]

    def shell_lines(self, binary: str = "kubectl", *, remove: bool = False) -> list[str]:
        """The commands as an operator types them (shell-quoted)."""
        return [shlex.join([binary, *c]) for c in self.commands(remove=remove)]


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
