"""Racks from a Kubernetes Node label: the pure grouping and rack names."""

from __future__ import annotations

from mlenv.acceptance.evidence import topology as T
from mlenv.cluster.topology import racks_from_labels
from mlenv.contract import rack_name

ZONE = "topology.kubernetes.io/zone"


def test_nodes_are_grouped_by_the_labels_value_in_pod_order() -> None:
    got = racks_from_labels(
        ZONE, [("n1", {ZONE: "rack-b"}), ("n2", {ZONE: "rack-a"}), ("n3", {ZONE: "rack-b"})]
    )
    assert got.racks == {"rack-b": ["n1", "n3"], "rack-a": ["n2"]} and got.warnings == []
    assert got.info == f"topology: 3 of 3 node(s) in 2 rack(s) from the Node label {ZONE}"
    value = got.env_value()
    assert value is not None and T.parse(value) == got.racks  # what rank 0 reads back


def test_label_values_that_are_not_dns_labels_are_rewritten_and_said() -> None:
    assert rack_name("Rack_A.1") == "rack-a-1" and rack_name("us-east-1a") == "us-east-1a"
    assert rack_name("") is None
    got = racks_from_labels(ZONE, [("n1", {ZONE: "Rack_A"}), ("n2", {ZONE: "Rack_A"})])
    assert got.racks == {"rack-a": ["n1", "n2"]}
    assert got.warnings == ["topology: label value 'Rack_A' used as rack rack-a"]


def test_two_values_with_one_rack_name_are_not_merged() -> None:
    got = racks_from_labels(
        ZONE, [("n1", {ZONE: "Rack_A"}), ("n2", {ZONE: "rack-a"}), ("n3", {ZONE: "b"})]
    )
    assert got.racks == {"b": ["n3"]}
    assert got.warnings == [
        "topology: label values 'Rack_A', 'rack-a' all read as rack rack-a: their nodes are "
        "in no rack (rename the values apart)"
    ]


def test_unlabelled_nodes_are_in_no_rack_and_no_labels_no_racks() -> None:
    got = racks_from_labels(ZONE, [("n1", {ZONE: "a"}), ("n2", {}), ("n3", {ZONE: ""})])
    assert got.racks == {"a": ["n1"]}
    assert got.warnings == [f"topology: no {ZONE} label on n2, n3: localized on their own"]
    none = racks_from_labels(ZONE, [("n1", {}), ("n2", {})])
    assert none.racks == {} and none.env_value() is None and none.info == ""
