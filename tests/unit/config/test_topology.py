"""``nodes.topology``: racks for fabric.localize, validated with located errors and
handed to the ranks as ``MLENV_TOPOLOGY`` on every platform that renders an environment."""

from __future__ import annotations

import json

from mlenv.acceptance.evidence import topology as T
from mlenv.render.env import pod_env
from mlenv.render.platforms import launch_plan, render_slurm

from .conftest import BASE, Check, messages

TOPO = BASE + "nodes:\n  topology:\n    rack-a: [worker-1, worker-2]\n    rack-b: [worker-3]\n"
SLURM = BASE + (
    "platform: slurm\nslurm:\n  partition: gpu\n  shared_dir: /shared/mlenv\n"
    "nodes:\n  topology:\n    leaf01: ['hgx[01-02]']\n    leaf02: [hgx03]\n"
)
HOSTS = BASE + (
    "platform: hosts\nnodes:\n  gpu_nodes: [node-a, node-b]\n"
    "  topology: {r1: [node-a], r2: [node-b]}\n"
)


def test_topology_is_read_in_file_order(check: Check) -> None:
    c, d = check(TOPO)
    assert messages(d) == [] and c is not None
    assert c.topology == (("rack-a", ("worker-1", "worker-2")), ("rack-b", ("worker-3",)))


def test_bad_rack_name_and_node_in_two_racks_are_located(check: Check) -> None:
    c, d = check(
        BASE + "nodes:\n  topology:\n    Rack_A: [worker-1]\n    rack-b: [worker-2, worker-1]\n"
    )
    assert c is None
    got = [(x.line, x.path, x.message) for x in d if x.severity == "error"]
    assert (
        got[0][:2] == (6, "nodes.topology.Rack_A")
        and "rack name 'Rack_A' is not a DNS-1123 label" in got[0][2]
    )
    assert (
        got[1][:2] == (7, "nodes.topology.rack-b[1]")
        and "node worker-1 is in two racks (Rack_A and rack-b)" in got[1][2]
    )


def test_node_names_follow_the_platform(check: Check) -> None:
    _, d = check(BASE + "nodes:\n  topology:\n    rack-a: [Worker_1]\n")
    assert any("node name 'Worker_1' is not a DNS-1123 subdomain" in m for m in messages(d))
    _, d = check(TOPO.replace("worker-3]", "worker-3, worker-3]"))
    assert messages(d) and all(
        "nodes.topology.rack-b" in m for m in messages(d)
    )  # the schema: uniqueItems


def test_topology_reaches_the_pods_and_parses_back(check: Check) -> None:
    c, d = check(TOPO)
    assert c is not None
    env = {e["name"]: str(e.get("value")) for e in pod_env(c, "tcp", 3)}
    assert T.parse(env["MLENV_TOPOLOGY"]) == {
        "rack-a": ["worker-1", "worker-2"],
        "rack-b": ["worker-3"],
    }
    plain, _ = check(BASE)
    assert plain is not None and "MLENV_TOPOLOGY" not in {
        e["name"] for e in pod_env(plain, "tcp", 3)
    }


def test_slurm_expands_hostlists_and_exports_it_quoted(check: Check) -> None:
    c, d = check(SLURM)
    assert messages(d) == [] and c is not None
    assert c.topology == (("leaf01", ("hgx01", "hgx02")), ("leaf02", ("hgx03",)))
    script = render_slurm(c)["acceptance.sbatch"]
    line = next(x for x in script.splitlines() if x.startswith("export MLENV_TOPOLOGY="))
    assert (
        line
        == "export MLENV_TOPOLOGY='"
        + json.dumps({"leaf01": ["hgx01", "hgx02"], "leaf02": ["hgx03"]}, separators=(",", ":"))
        + "'"
    )


def test_hosts_launch_plan_carries_it(check: Check) -> None:
    c, d = check(HOSTS)
    assert messages(d) == [] and c is not None
    assert T.parse(launch_plan(c)["env"]["MLENV_TOPOLOGY"]) == {"r1": ["node-a"], "r2": ["node-b"]}


# -- nodes.topology_label: racks from a Kubernetes Node label, read at launch --

LABEL = BASE + "nodes:\n  topology_label: topology.kubernetes.io/zone\n"


def test_topology_label_is_a_label_key(check: Check) -> None:
    c, d = check(LABEL)
    assert messages(d) == [] and c is not None and c.topology_label == "topology.kubernetes.io/zone"
    assert c.topology == ()
    _, d = check(LABEL.replace("topology.kubernetes.io/zone", "Bad Key/zone"))
    assert [x.line for x in d if x.severity == "error"] == [5]
    assert any("nodes.topology_label" in m and "a label key" in m for m in messages(d))


def test_topology_label_beside_a_list_is_an_error(check: Check) -> None:
    c, d = check(TOPO + "  topology_label: example.com/rack\n")
    assert c is None
    got = [(x.line, x.path, x.message) for x in d if x.severity == "error"]
    assert got == [
        (
            8,
            "nodes.topology_label",
            "nodes.topology_label and nodes.topology both give the racks: keep one "
            "(the list, or the Node label read at launch)",
        )
    ]


def test_topology_label_off_kubernetes_is_a_warning(check: Check) -> None:
    c, d = check(
        SLURM.replace(
            "  topology:\n    leaf01: ['hgx[01-02]']\n    leaf02: [hgx03]\n",
            "  topology_label: example.com/rack\n",
        )
    )
    assert c is not None and messages(d) == []
    assert [(x.severity, x.path) for x in d] == [("warning", "nodes.topology_label")]
    assert "Slurm's topology/tree is read by itself" in d[0].message
