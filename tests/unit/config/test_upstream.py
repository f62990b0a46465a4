"""the public ml-dev-env project's cluster configs validate and render verbatim.

The four configs under tests/data/upstream/ are copied unchanged from upstream (see the
header of each). They quote every NCCL knob (`cross_nic: "1"`) and leave `gpu_nodes:`
empty to mean "any GPU node"; both must keep working.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlenv.config import check_file
from mlenv.render.plan import render_cluster
from mlenv.render.validate import validate_manifests

UPSTREAM = Path(__file__).resolve().parents[2] / "data" / "upstream"
CASES = sorted(UPSTREAM.glob("*.yaml"))


def test_all_four_upstream_configs_are_here() -> None:
    assert [c.stem for c in CASES] == ["barcelona", "cairo", "nerc-production", "template"]


@pytest.mark.parametrize("mode", ["rdma", "tcp"])
@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_upstream_config_validates_and_renders(case: Path, mode: str) -> None:
    cluster, diags = check_file(case)
    errors = [d.format() for d in diags if d.severity == "error"]
    assert cluster is not None and errors == []
    objs = render_cluster(cluster, mode, None)  # type: ignore[arg-type]
    validate_manifests(objs)
    sts = next(o for o in objs if o["kind"] == "StatefulSet")
    env = {
        e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    if mode == "rdma" and cluster.rdma.enabled:
        # the quoted knobs arrive as the numbers they are
        assert env["NCCL_CROSS_NIC"] == "1" and env["NCCL_IB_TIMEOUT"] == "22"
        assert env["NCCL_MIN_NCHANNELS"] == "4" and env["NCCL_IB_GID_INDEX"] == "3"


def test_empty_gpu_nodes_means_any_gpu_node() -> None:
    cluster, _ = check_file(UPSTREAM / "nerc-production.yaml")
    assert cluster is not None and cluster.gpu_nodes == ()
    sts = next(o for o in render_cluster(cluster, "tcp", None) if o["kind"] == "StatefulSet")
    affinity = sts["spec"]["template"]["spec"].get("affinity", {})
    assert "nodeAffinity" not in affinity  # no pinning to a node list


def test_quoted_integers_become_integers_in_the_model() -> None:
    cluster, _ = check_file(UPSTREAM / "cairo.yaml")
    assert cluster is not None
    r = cluster.rdma
    assert (r.cross_nic, r.ib_timeout, r.min_nchannels, r.gid_index, r.gdr_level) == (
        1,
        22,
        4,
        3,
        5,
    )
    assert all(isinstance(v, int) for v in (r.cross_nic, r.ib_timeout, r.min_nchannels))


def test_upstream_discovered_config_gets_a_fix_it(tmp_path: Path) -> None:
    """Upstream's discover_cluster.py wrote `interfaces: "net1,net2,net3,net4"` whatever it
    found; with 2 devices we refuse the config (it deployed upstream): the error says why
    and what to write."""
    text = (
        (UPSTREAM / "barcelona.yaml")
        .read_text()
        .replace('devices: "mlx5_6,mlx5_7,mlx5_8,mlx5_9"', 'devices: "mlx5_6,mlx5_7"')
    )
    assert 'interfaces: "net1,net2,net3,net4"' in text
    path = tmp_path / "discovered.yaml"
    path.write_text(text)
    cluster, diags = check_file(path)
    errors = [d.format() for d in diags if d.severity == "error"]
    assert cluster is None and len(errors) == 1
    assert "4 interface(s) for 2 RDMA device(s)" in errors[0]
    assert (
        "upstream's discover_cluster.py always wrote net1-net4: with 2 device(s) write "
        'interfaces: "net1,net2"'
    ) in errors[0]
    assert "mlenv discover NAME" in errors[0]
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(text.replace('"net1,net2,net3,net4"', '"net1,net2"'))
    assert check_file(fixed)[0] is not None
    # any other mismatch keeps the plain message
    other = tmp_path / "other.yaml"
    other.write_text(text.replace('"net1,net2,net3,net4"', '"net1,net2,net3"'))
    assert "discover_cluster.py" not in " ".join(d.format() for d in check_file(other)[1])
