"""``nodes:`` and ``gpus.default_nodes``: node names as each platform names them, the
racks of ``nodes.topology``, and no more pods by default than listed nodes."""

from __future__ import annotations

from typing import Any

from mlenv.config import hostlist
from mlenv.config.rules.common import _LABEL, Checker, _as_int, _get, _short
from mlenv.config.yamlpos import JsonPath
from mlenv.contract import MAX_NODES


def gpu_nodes(c: Checker) -> None:
    """Node names per platform: DNS-1123 subdomains on Kubernetes; real host names on
    hosts (``Lambda-H100-2``, ``GPU_Node7``); those and hostlists (``hgx[01-04]``) on Slurm."""
    nodes = _get(c.data, "nodes", "gpu_nodes")
    if not isinstance(nodes, list):
        return
    seen: set[str] = set()
    for i, n in enumerate(nodes):
        path: JsonPath = ("nodes", "gpu_nodes", i)
        names = node_names(c, path, n)
        if not c.off_k8s:  # a name twice: the schema's uniqueItems already says so
            continue
        twice = [x for x in names if x in seen]
        if twice:
            c.err(
                path,
                f"node {twice[0]} is listed twice"
                + (f" ({n} expands to it)" if n != twice[0] else ""),
            )
        seen.update(names)


# From here a node affinity naming every pinned node weighs on every pod list: at 128
# names each pod carries about 3 KB of them, 0.4 MB a list, and four times that per doubling.
MANY_PINNED = 128


def pin_by(c: Checker) -> None:
    """``nodes.pin_by: label`` labels the nodes ``gpu_nodes`` lists, on Kubernetes: without
    that list there is nothing to label, and off Kubernetes there are no Node labels."""
    how = _get(c.data, "nodes", "pin_by")
    listed = _get(c.data, "nodes", "gpu_nodes")
    many = isinstance(listed, list) and len(listed) >= MANY_PINNED
    if how in (None, "name") and not c.off_k8s and many:
        c.warn(
            ("nodes", "gpu_nodes"),
            f"nodes.gpu_nodes pins {len(listed)} nodes by name: each pod names all of "
            "them, so every pod list grows with their square (11 MB at 512); "
            "nodes.pin_by: label keeps each pod one label (docs/deploy.md)",
            key=True,
        )
    if how != "label":
        return
    if c.off_k8s:
        c.warn(
            ("nodes", "pin_by"),
            f"nodes.pin_by: label labels Kubernetes Nodes; platform {c.plat} ignores it",
            key=True,
        )
    elif not listed:
        c.err(
            ("nodes", "pin_by"),
            "nodes.pin_by: label pins the nodes nodes.gpu_nodes lists, and it lists none: "
            "list them, or leave pin_by out",
            key=True,
        )


def node_names(c: Checker, path: JsonPath, n: Any) -> list[str]:
    """One node entry checked as the platform names nodes; the names it stands for ([] when bad)."""
    if not isinstance(n, str):
        return []
    if not c.off_k8s:
        before = len(c.out)
        c.subdomain(path, n, "node name")
        return [n] if len(c.out) == before else []
    if c.plat == "hosts" and not hostlist.HOST.fullmatch(n):
        c.err(
            path,
            f"host name {_short(n)} is not valid (letters, digits, '-', '_', '.', starting "
            "and ending with a letter or digit)",
        )
        return []
    try:
        return list(hostlist.expand(n))
    except hostlist.HostlistError as e:
        c.err(path, f"node {_short(n)}: {e}")
        return []


def topology(c: Checker) -> None:
    """``nodes.topology``: rack names are DNS-1123 labels, nodes are named as
    ``gpu_nodes`` names them, and no node is in two racks."""
    racks = _get(c.data, "nodes", "topology")
    label = _get(c.data, "nodes", "topology_label")
    if isinstance(label, str) and label:
        # One source of racks: a list beside a label could disagree with it unseen.
        if isinstance(racks, dict) and racks:
            c.err(
                ("nodes", "topology_label"),
                "nodes.topology_label and nodes.topology both give the "
                "racks: keep one (the list, or the Node label read at launch)",
                key=True,
            )
        elif c.off_k8s:
            c.warn(
                ("nodes", "topology_label"),
                f"nodes.topology_label reads Kubernetes Node labels; "
                f"platform {c.plat} ignores it"
                + (" (Slurm's topology/tree is read by itself)" if c.plat == "slurm" else ""),
                key=True,
            )
    if not isinstance(racks, dict):
        return
    where: dict[str, str] = {}
    for rack, nodes in racks.items():
        rack_path: JsonPath = ("nodes", "topology", str(rack))
        if not isinstance(rack, str) or len(rack) > 63 or not _LABEL.match(rack):
            c.err(
                rack_path,
                f"rack name {_short(str(rack))} is not a DNS-1123 label (lowercase letters, "
                "digits and '-', at most 63 characters: rack-a, r12, leaf03)",
                key=True,
            )
        for i, n in enumerate(nodes if isinstance(nodes, list) else []):
            for name in node_names(c, (*rack_path, i), n):
                if name in where and where[name] != rack:
                    c.err(
                        (*rack_path, i),
                        f"node {name} is in two racks ({where[name]} and {rack})",
                    )
                where.setdefault(name, str(rack))


def node_count(c: Checker) -> int | None:
    """How many nodes ``nodes.gpu_nodes`` names (hostlists expanded on Slurm); None if unreadable."""
    nodes = _get(c.data, "nodes", "gpu_nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        return None
    if c.plat != "slurm":
        return len(nodes)
    try:
        return len(hostlist.expand_all(nodes))
    except hostlist.HostlistError:
        return None


def default_nodes(c: Checker) -> None:
    count = node_count(c)
    default = _as_int(_get(c.data, "gpus", "default_nodes"))
    if default is not None and default > MAX_NODES:
        c.err(("gpus", "default_nodes"), f"{default} is more than {MAX_NODES} nodes")
        return
    if count and default is not None:
        if default > count:
            c.err(
                ("gpus", "default_nodes"),
                f"default_nodes is {default} but nodes.gpu_nodes lists only {count} node(s); one pod runs per node",
            )
