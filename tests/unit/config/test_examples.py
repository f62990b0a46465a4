"""The example clusters, the schema file and its agreement with the model's defaults."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mlenv.config import check_file, cluster_files, load, load_all, mode_warnings, resolve
from mlenv.config.docs import render
from mlenv.config.loader import build, refuse_other_tree
from mlenv.config.model import Cluster, ClusterInfo
from mlenv.config.schema import schema
from mlenv.errors import ConfigError, InputError

from .conftest import REPO

EXAMPLES = sorted((REPO / "clusters").glob("*.yaml"))


def test_examples_exist() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"barcelona", "nerc-tcp", "large-h200", "local"} <= names
    assert cluster_files(REPO) == EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_validates(path: Path) -> None:
    assert path.read_text().startswith("# yaml-language-server: $schema=./cluster.schema.json\n")
    c = load(path)
    assert c.name == path.stem  # `make render CLUSTER=<stem>` finds it under its own name
    assert c.source == path


def test_load_all_examples() -> None:
    assert [c.name for c in load_all(REPO)] == [p.stem for p in EXAMPLES]


def test_barcelona_values() -> None:
    c = load("barcelona", REPO)
    assert c.rdma.enabled and c.rdma.devices == ("mlx5_6", "mlx5_7", "mlx5_10", "mlx5_11")
    assert c.rdma.interfaces == ("net1", "net2", "net3", "net4")
    assert (c.rdma.gid_index, c.rdma.gdr_level, c.gpus.per_node) == (3, 5, 4)
    assert c.storage.mode == "volumeClaimTemplates"
    assert c.rdma.resources and c.rdma.networks


def test_large_cluster() -> None:
    c = load("large-h200", REPO)
    assert len(c.gpu_nodes) == c.gpus.default_nodes == 64
    assert c.gpus.per_node == 8 and len(c.rdma.devices) == 8


def test_schema_file_and_symlink() -> None:
    link = REPO / "clusters" / "cluster.schema.json"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert json.loads(link.read_text()) == schema()
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema())


def _walk(
    node: dict[str, Any], path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    out = []
    for k, sub in node.get("properties", {}).items():
        out.append(((*path, k), sub))
        out.extend(_walk(sub, (*path, k)))
    return out


def test_schema_strict_and_documented() -> None:
    for path, sub in [((), schema()), *_walk(schema())]:
        assert sub.get("description") or path == (), path
        if sub.get("type") == "object" and "properties" in sub:
            assert sub.get("additionalProperties") is False, path
        required = path[-1:] in (("cluster",), ("name",), ("namespace",)) and path[:1] == (
            "cluster",
        )
        if path and not required:
            assert "default" in sub, path


# schema path → model attribute path, where the two differ
_RENAMES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("nodes", "gpu_nodes"): ("gpu_nodes",),
    ("nodes", "pin_by"): ("pin_by",),
    ("nodes", "topology"): ("topology",),
    ("nodes", "topology_label"): ("topology_label",),
    **{
        ("acceptance", k): ("recheck", k)
        for k in ("schedule", "profile", "priority_class", "runner_image", "node_events")
    },
    ("acceptance", "metrics", "push"): ("recheck", "metrics_push"),
    ("nccl", "env"): ("nccl", "extra_env"),
    ("storage", "existing_claims", "workspace"): ("storage", "workspace_claim"),
    ("storage", "existing_claims", "datasets"): ("storage", "datasets_claim"),
    **{
        ("slurm", "container", k): ("slurm", f"container_{k}")
        for k in ("runtime", "image", "mounts", "writable", "mount_home", "env", "name")
    },
}


def _model_value(model: Any, path: tuple[str, ...]) -> Any:
    path = _RENAMES.get(path, path)
    if path[:1] == ("network",):
        path = path[1:]
    for p in path:
        model = getattr(model, p)
    return model


def _jsonish(v: Any) -> Any:
    if isinstance(v, tuple):
        if v and all(dataclasses.is_dataclass(x) for x in v):  # ExtendedResource list
            return {x.name: x.count for x in v}
        if v and all(isinstance(x, tuple) for x in v):
            return dict(v)
        return list(v)
    return v


def test_schema_defaults_equal_model_defaults() -> None:
    model = Cluster(cluster=ClusterInfo(name="x", namespace="y"))
    checked = 0
    for path, sub in _walk(schema()):
        if "default" not in sub or sub.get("properties"):
            continue
        got = _jsonish(_model_value(model, path))
        default = sub["default"]
        if path[-1] == "resources" and default == {}:
            got = got or {}
        if path in (("nccl", "env"), ("nodes", "topology"), ("slurm", "env")):
            got = got or {}
        if path == ("nodes", "topology_label"):  # null in YAML, "" in the model: none
            got = got or None
        assert got == default, path
        checked += 1
    assert checked >= 40


def test_minimal_config_builds_the_default_model() -> None:
    built = build({"cluster": {"name": "x", "namespace": "y"}})
    assert built == Cluster(cluster=ClusterInfo(name="x", namespace="y"))


def test_resolve_and_unknown_names() -> None:
    assert resolve("local", REPO) == REPO / "clusters" / "local.yaml"
    with pytest.raises(
        InputError,
        match=r"unknown cluster 'barcelna' \(did you mean 'barcelona'\?\); known clusters: ",
    ):
        load("barcelna", REPO)
    with pytest.raises(InputError, match="no such file"):
        load("clusters/none.yaml", REPO)


def test_a_bare_name_is_always_the_checkouts_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mlenv status barcelona` read a file named `barcelona` in the current
    folder before clusters/barcelona.yaml. A name without `/` or .yaml/.yml is a cluster."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "barcelona").write_text("cluster: {name: impostor, namespace: x}\n")
    assert resolve("barcelona", REPO) == REPO / "clusters" / "barcelona.yaml"
    (tmp_path / "nosuch").write_text("cluster: {name: nosuch, namespace: x}\n")
    with pytest.raises(InputError, match="unknown cluster 'nosuch'"):
        resolve("nosuch", REPO)
    assert resolve("./barcelona", REPO) == Path("./barcelona")  # a path is a path
    assert load("./barcelona", REPO).name == "impostor"


@pytest.mark.parametrize("target", ["kubeconfig", "/dev/zero"])
def test_a_linked_config_is_refused_not_followed(tmp_path: Path, target: str) -> None:
    """A link in clusters/ (to a kubeconfig: its token would land in bundles; to /dev/zero:
    an endless read) is refused by name, path, and in load_all."""
    (tmp_path / "clusters").mkdir()
    secret = tmp_path / "kubeconfig"
    secret.write_text("users: [{user: {token: sha256~SECRET}}]\n")
    link = tmp_path / "clusters" / "x.yaml"
    link.symlink_to(secret if target == "kubeconfig" else target)
    for ref in ("x", str(link)):
        with pytest.raises(
            InputError, match="a symbolic link .*a cluster config must be a regular file"
        ):
            resolve(ref, tmp_path)
    with pytest.raises(ConfigError) as e:
        load_all(tmp_path)
    assert "a symbolic link" in str(e.value.diagnostics[0].message)


def test_the_loader_reads_no_device_or_fifo(tmp_path: Path) -> None:
    from mlenv.config.loader import check_file

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    assert "not a regular file" in check_file(fifo)[1][0].message
    assert "not a regular file" in check_file(Path("/dev/zero"))[1][0].message


def test_load_all_reports_every_file_and_duplicate_names(tmp_path: Path) -> None:
    d = tmp_path / "clusters"
    d.mkdir()
    ok = "cluster:\n  name: same\n  namespace: ns\n"
    # the file name is the cluster's name, so only .yaml and .yml can still collide
    (d / "same.yaml").write_text(ok)
    (d / "same.yml").write_text("# the copy\ncluster:\n  namespace: ns\n  name:   same\n")
    (d / "c.yaml").write_text("cluster: {name: c, namespace: ns}\ngpus: {per_node: 0}\n")
    (d / "d.yaml").write_text("- not a mapping\n")
    with pytest.raises(ConfigError) as info:
        load_all(tmp_path)
    assert [(Path(x.file).name, x.path) for x in info.value.diagnostics] == [
        ("c.yaml", "gpus.per_node"),
        ("d.yaml", ""),
        ("same.yml", "cluster.name"),
    ]
    # the duplicate points at where same.yml writes the name, not at 0:0
    assert info.value.diagnostics[-1].format() == (
        f"{d / 'same.yml'}:4:11: cluster.name: cluster name 'same' is also used by "
        f"{d / 'same.yaml'}"
    )


def test_a_config_in_clusters_is_named_as_its_file(tmp_path: Path) -> None:
    d = tmp_path / "clusters"
    d.mkdir()
    (d / "mine.yaml").write_text(
        "# copied from barcelona\ncluster:\n  name: barcelona\n  namespace: ns\n"
    )
    cluster, diags = check_file(d / "mine.yaml")
    assert cluster is None
    assert [x.format() for x in diags] == [
        f"{d / 'mine.yaml'}:3:9: cluster.name: cluster name 'barcelona' differs from the file "
        "name 'mine.yaml': its manifests would go to k8s/barcelona/ (the tree of "
        "clusters/barcelona.yaml); rename the file to barcelona.yaml or set cluster.name: mine"
    ]
    with pytest.raises(ConfigError):
        load("mine", tmp_path)


def test_a_file_elsewhere_never_renders_over_a_configs_tree(tmp_path: Path) -> None:
    d = tmp_path / "clusters"
    d.mkdir()
    (d / "barcelona.yaml").write_text("cluster:\n  name: barcelona\n  namespace: ns\n")
    saved = tmp_path / "saved.yaml"
    saved.write_text("cluster:\n  name: barcelona\n  namespace: ns\n")
    with pytest.raises(InputError) as info:
        refuse_other_tree(load(saved, tmp_path), tmp_path)
    assert str(info.value) == (
        f"{saved}:2:9: cluster.name: 'barcelona' is the cluster of clusters/barcelona.yaml; "
        "rendering this file would write over that config's k8s/barcelona/ tree: give it a "
        "cluster.name of its own, or render it elsewhere with --out DIR"
    )
    # the config itself, by name or by any path to it, and a file with a name of its own pass
    refuse_other_tree(load("barcelona", tmp_path), tmp_path)
    refuse_other_tree(load(d / ".." / "clusters" / "barcelona.yaml", tmp_path), tmp_path)
    saved.write_text("cluster:\n  name: trial\n  namespace: ns\n")
    refuse_other_tree(load(saved, tmp_path), tmp_path)


def test_mode_warnings() -> None:
    local = load("local", REPO)
    (w,) = mode_warnings(local, "rdma")
    assert "network.rdma.enabled: false" in w and "falls back to TCP" in w
    assert mode_warnings(local, "tcp") == []
    assert mode_warnings(load("barcelona", REPO), "rdma") == []
    with pytest.raises(InputError, match="unknown mode 'ib'"):
        mode_warnings(local, "ib")


def test_config_reference_is_fresh() -> None:
    committed = (REPO / "docs" / "config-reference.md").read_text()
    assert committed == render(), (
        "regenerate: python -m mlenv.config.docs > docs/config-reference.md"
    )
    for path, _ in _walk(schema()):
        assert f"`{'.'.join(path)}`" in committed
