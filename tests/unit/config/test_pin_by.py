"""``nodes.pin_by``: ``name`` by default; ``label`` needs the nodes it labels, and means
nothing off Kubernetes."""

from __future__ import annotations

from .conftest import BASE, Check, messages

PINNED = BASE + "nodes:\n  gpu_nodes: [gpu-a, gpu-b]\n"


def test_pin_by_is_name_unless_label_is_asked(check: Check) -> None:
    c, d = check(PINNED)
    assert messages(d) == [] and c is not None and c.pin_by == "name"
    c, d = check(PINNED + "  pin_by: label\n")
    assert messages(d) == [] and c is not None and c.pin_by == "label"
    _, d = check(PINNED + "  pin_by: labels\n")
    assert [(x.line, x.path) for x in d if x.severity == "error"] == [(6, "nodes.pin_by")]


def test_pin_by_label_without_listed_nodes_is_an_error_at_its_line(check: Check) -> None:
    c, d = check(BASE + "nodes:\n  pin_by: label\n")
    assert c is None
    got = [(x.line, x.path) for x in d if x.severity == "error"]
    assert got == [(5, "nodes.pin_by")]
    assert "nodes.gpu_nodes lists, and it lists none" in d[0].message


def test_pin_by_label_off_kubernetes_is_a_warning(check: Check) -> None:
    c, d = check(BASE + "platform: hosts\nnodes:\n  gpu_nodes: [node-a, node-b]\n  pin_by: label\n")
    assert c is not None and messages(d) == []
    assert [(x.severity, x.path) for x in d] == [("warning", "nodes.pin_by")]


def test_many_nodes_pinned_by_name_is_a_warning_naming_pin_by_label(check: Check) -> None:
    many = "nodes:\n  gpu_nodes: [" + ", ".join(f"gpu-{i}" for i in range(128)) + "]\n"
    c, d = check(BASE + many)
    assert c is not None and messages(d) == []
    assert [(x.severity, x.path) for x in d] == [("warning", "nodes.gpu_nodes")]
    assert "nodes.pin_by: label" in d[0].message
    _, d = check(BASE + many + "  pin_by: label\n")
    assert d == []
    _, d = check(BASE + many.replace("gpu-0, ", ""))  # 127
    assert d == []
