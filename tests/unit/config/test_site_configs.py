"""configs written the way real Slurm and bare-metal sites write them validate;
every hostile value refused before stays refused. Grammars widen per key and per platform
(Slurm hostlists, constraint expressions, Pyxis images and mount flags), never to free text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlenv import argv
from mlenv.config import check_file, load
from mlenv.config.hostlist import HostlistError, expand
from mlenv.render.platforms import render_hosts, render_slurm

from .conftest import BASE, REPO, Check, messages

DATA = REPO / "tests" / "data" / "platforms"
SITES = sorted(DATA.glob("site-*.yaml"))
NO_NS = "cluster:\n  name: demo\n"
SLURM = NO_NS + "platform: slurm\nslurm:\n  partition: gpu\n  shared_dir: /shared/mlenv\n"
HOSTS = NO_NS + "platform: hosts\n"


def errors(diags: list) -> list[str]:
    return [x.path for x in diags if x.severity == "error"]


def test_four_site_shapes_are_there() -> None:
    assert [p.stem for p in SITES] == [
        "site-baremetal-lab",
        "site-roce-hostlist",
        "site-superpod-pyxis",
        "site-university-gres",
    ]


@pytest.mark.parametrize("path", SITES, ids=lambda p: p.stem)
def test_site_configs_validate_without_errors_or_warnings(path: Path) -> None:
    cluster, diags = check_file(path)
    assert [d.format() for d in diags] == []
    assert cluster is not None and cluster.namespace == ""


def test_superpod_renders_pyxis_lines() -> None:
    c = load(DATA / "site-superpod-pyxis.yaml")
    assert c.gpu_nodes == ("dgx-h100-001", "dgx-h100-002", "dgx-h100-003", "dgx-h100-004")
    text = render_slurm(c)["acceptance.sbatch"]
    lines = text.splitlines()
    for line in (
        "#SBATCH --reservation=acceptance",
        "#SBATCH --mem=0",
        "#SBATCH '--comment=mlenv acceptance'",
        "#SBATCH --network=sn_all",
        "#SBATCH --nodelist=dgx-h100-001,dgx-h100-002,dgx-h100-003,dgx-h100-004",
        "CONTAINER_IMAGE='nvcr.io#nvidia/pytorch:24.08-py3'",
        "CONTAINER_MOUNTS=/lustre/fsw/mlenv:/lustre/fsw/mlenv,/lustre/fsw/datasets:/datasets:ro+rbind,"
        "/home:/home:ro+rbind",
        "export NCCL_IB_HCA=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1",
        "export NCCL_SOCKET_IFNAME=bond0",
    ):
        assert line in lines, line
    # the site's options come after mlenv's own and before the first command
    first_cmd = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    assert lines.index("#SBATCH --mem=0") < first_cmd


def test_university_typed_gres_constraint_and_partitions() -> None:
    text = render_slurm(load(DATA / "site-university-gres.yaml"))["acceptance.sbatch"]
    lines = text.splitlines()
    for line in (
        "#SBATCH --partition=gpu-a100,gpu-a100-long",
        "#SBATCH --constraint='a100_80g&[rack1|rack2]'",
        "#SBATCH --gres=gpu:a100:4",
        "#SBATCH --gres-flags=enforce-binding",
    ):
        assert line in lines, line
    assert "#SBATCH --exclusive" not in lines


def test_roce_hostlist_and_squashfs() -> None:
    c = load(DATA / "site-roce-hostlist.yaml")
    assert (
        c.gpu_nodes == ("Lambda-H200-1", "Lambda-H200-2", "GPU_Node7") and c.rdma.interfaces == ()
    )
    text = render_slurm(c)["acceptance.sbatch"]
    assert "CONTAINER_IMAGE=/shared/images/pytorch-24.08.sqsh" in text.splitlines()
    assert "export NCCL_SOCKET_IFNAME='^lo,docker0'" in text.splitlines()


def test_lab_hosts_real_names_and_socket_ifname() -> None:
    plan = json.loads(render_hosts(load(DATA / "site-baremetal-lab.yaml"))["launch-plan.json"])
    assert plan["hosts"] == ["Lab-WS-01", "Lab-WS-02", "lab_ws_03.lan"]
    assert plan["env"]["NCCL_SOCKET_IFNAME"] == "enp65s0f0"


# --- namespace: a per-platform rule in the schema ------------------------------------------


@pytest.mark.parametrize("plat", ["openshift", "kubernetes"])
def test_namespace_still_required_on_kubernetes(check: Check, plat: str) -> None:
    _, d = check(NO_NS + f"platform: {plat}\n")
    assert messages(d) == ["cluster: missing required key 'namespace' under cluster"]
    _, d = check(NO_NS)  # the default platform is openshift
    assert messages(d) == ["cluster: missing required key 'namespace' under cluster"]


def test_namespace_optional_on_slurm_and_hosts_but_still_checked(check: Check) -> None:
    c, d = check(SLURM)
    assert d == [] and c is not None and c.namespace == ""
    c, d = check(HOSTS + "nodes: {gpu_nodes: [a]}\n")
    assert d == [] and c is not None
    _, d = check(SLURM.replace("  name: demo\n", "  name: demo\n  namespace: Bad_NS\n"))
    assert errors(d) == ["cluster.namespace"]


# --- node names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("hgx[01-04]", ["hgx01", "hgx02", "hgx03", "hgx04"]),
        ("gpu[1,3-4]-ib", ["gpu1-ib", "gpu3-ib", "gpu4-ib"]),
        ("r[1-2]n[08-09]", ["r1n08", "r1n09", "r2n08", "r2n09"]),
        ("GPU_Node7", ["GPU_Node7"]),
    ],
)
def test_hostlist_expansion(expr: str, names: list[str]) -> None:
    assert expand(expr) == names


@pytest.mark.parametrize(
    "expr",
    [
        "n[4-1]",
        "n[0-99999]",
        "-n[1-2]",
        "n[1-2",
        "n[a-b]",
        "n[1-2];id",
        "n[]",
        "n[1-2]$(id)",
        "n[1-2] x",
        "n[1-2]\n",
        "[1-2]",
        "n-[1-2]-",
    ],
)
def test_hostlist_refused(expr: str) -> None:
    with pytest.raises(HostlistError):
        expand(expr)


def test_node_names_widen_on_slurm_and_hosts_only(check: Check) -> None:
    nodes = "nodes:\n  gpu_nodes: [GPU_Node7, Lambda-H100-2, 'hgx[01-02]']\n"
    c, d = check(SLURM + nodes)
    assert (
        d == []
        and c is not None
        and c.gpu_nodes == ("GPU_Node7", "Lambda-H100-2", "hgx01", "hgx02")
    )
    # hosts: real names yes, hostlists no (ssh takes one host)
    _, d = check(HOSTS + nodes)
    assert errors(d) == ["nodes.gpu_nodes[2]"]
    # Kubernetes: DNS-1123 subdomains, as before
    _, d = check(BASE + nodes)
    assert errors(d) == ["nodes.gpu_nodes[0]", "nodes.gpu_nodes[1]", "nodes.gpu_nodes[2]"]


def test_hostlist_counts_nodes_and_duplicates(check: Check) -> None:
    _, d = check(SLURM + "nodes: {gpu_nodes: ['n[1-2]', n2]}\ngpus: {default_nodes: 2}\n")
    assert messages(d) == ["nodes.gpu_nodes[1]: node n2 is listed twice"]
    c, d = check(SLURM + "nodes: {gpu_nodes: ['n[1-3]']}\ngpus: {default_nodes: 3}\n")
    assert d == [] and c is not None
    _, d = check(SLURM + "nodes: {gpu_nodes: ['n[1-3]']}\ngpus: {default_nodes: 4}\n")
    assert errors(d) == ["gpus.default_nodes"]


@pytest.mark.parametrize(
    "value",
    [
        "-oProxyCommand=id",
        "a;id",
        "$(id)",
        "a b",
        "a\nb",
        "node`id`",
        "-",
        "a/b",
        "n[1-2]|id",
        ".hidden",
    ],
)
@pytest.mark.parametrize("base", ["slurm", "hosts"])
def test_hostile_node_names_stay_refused(check: Check, value: str, base: str) -> None:
    _, d = check(
        (SLURM if base == "slurm" else HOSTS) + f"nodes:\n  gpu_nodes: [{json.dumps(value)}]\n"
    )
    assert "nodes.gpu_nodes[0]" in errors(d), value


# --- slurm keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["a100_80g&ib_hdr", "[rack1|rack2]", "(a|b)&c", "h100*2&ib", "a,b"]
)
def test_constraint_expressions(check: Check, value: str) -> None:
    c, d = check(SLURM + f"  constraint: {json.dumps(value)}\n")
    assert d == [] and c is not None and c.slurm.constraint == value


@pytest.mark.parametrize(
    "value",
    [
        "a&&b",
        "a|",
        "[a|[b]]",
        "a b",
        "$(id)",
        "a;id",
        "-a",
        "a&`id`",
        "a\n",
        "(a",
        "a)",
        "*",
        "a|b > /tmp/x",
    ],
)
def test_constraint_hostile_refused(check: Check, value: str) -> None:
    _, d = check(SLURM + f"  constraint: {json.dumps(value)}\n")
    assert errors(d) == ["slurm.constraint"], value


def test_partition_list_reservation_gpu_type(check: Check) -> None:
    c, d = check(
        SLURM.replace("partition: gpu", "partition: gpu-a100,gpu-h100")
        + "  reservation: maint_window\n  gpu_type: a100\n"
    )
    assert d == [] and c is not None
    assert (c.slurm.partition, c.slurm.reservation, c.slurm.gpu_type) == (
        "gpu-a100,gpu-h100",
        "maint_window",
        "a100",
    )
    for key, value in (
        ("partition", "a,,b"),
        ("partition", "a,-b"),
        ("partition", "a, b"),
        ("reservation", "r;id"),
        ("gpu_type", "a100:4"),
        ("gpu_type", "a,b"),
    ):
        _, d = check(
            SLURM.replace("  partition: gpu\n", "  partition: gpu\n" if key != "partition" else "")
            + f"  {key}: {json.dumps(value)}\n"
        )
        assert errors(d) == [f"slurm.{key}"], (key, value)


@pytest.mark.parametrize(
    "value",
    [
        "nvcr.io#nvidia/pytorch:24.08-py3",
        "registry.local:5000#ml/torch",
        "nvcr.io/nvidia/pytorch:24.08-py3",
        "/shared/images/x.sqsh",
        "/shared/images/x.squashfs",
        "/i/x.sqfs",
    ],
)
def test_pyxis_images(check: Check, value: str) -> None:
    c, d = check(SLURM + f"  container_image: {json.dumps(value)}\n")
    assert d == [] and c is not None


@pytest.mark.parametrize(
    "value",
    [
        "nvcr.io#a#b",
        "#nvidia/pytorch",
        "nvcr.io#",
        "nvcr.io#x;id",
        "a#$(id)",
        "/x/y.tar",
        "/x/../y.sqsh",
        "-nvcr.io#x",
        "nvcr.io# x",
    ],
)
def test_pyxis_images_hostile_refused(check: Check, value: str) -> None:
    _, d = check(SLURM + f"  container_image: {json.dumps(value)}\n")
    assert errors(d) == ["slurm.container_image"], value


def test_pyxis_mount_flags(check: Check) -> None:
    ok = ["/home:/home:ro+rbind", "/home:/home:ro,rbind", "/a:/b:x-create=dir", "/a:/b:rw", "/c"]
    c, d = check(SLURM + f"  container_mounts: {json.dumps(ok)}\n")
    assert d == [] and c is not None
    bad = [
        "/a:/b:ro+exec",
        "/a:/b:ro;id",
        "/a:/b:",
        "/a:/b:ro+",
        "/a:/b:ro,/etc:/etc",
        "/a:/b:ro+rbind:x",
        "/a:/b:x-create=$(id)",
    ]
    _, d = check(SLURM + f"  container_mounts: {json.dumps(bad)}\n")
    assert errors(d) == [f"slurm.container_mounts[{i}]" for i in range(len(bad))]


# --- sbatch_args --------------------------------------------------------------------------------


def test_sbatch_args_allowed(check: Check) -> None:
    args = [
        "--mem=0",
        "--comment=site acceptance run",
        "--gres-flags=enforce-binding",
        "--network=sn_all",
        "--exclude=node[1-3]",
        "--mail-user=ml@example.org",
        "--overcommit",
        "--licenses=scratch:1",
    ]
    c, d = check(SLURM + f"  sbatch_args: {json.dumps(args)}\n")
    assert d == [] and c is not None and c.slurm.sbatch_args == tuple(args)


@pytest.mark.parametrize(
    ("arg", "says"),
    [
        ("--export=ALL,LD_PRELOAD=/x.so", "not one mlenv passes through"),
        ("--chdir=/tmp", "not one mlenv passes through"),
        ("--wrap=id", "not one mlenv passes through"),
        ("--clusters=other", "not one mlenv passes through"),
        ("--partition=x", "slurm.partition"),
        ("--time=5", "slurm.time_limit"),
        ("--output=/tmp/x", "reports go to"),
        ("-p", "not a long option"),
        ("mem=0", "not a long option"),
        ("--mem", "needs a value"),
        ("--overcommit=1", "takes no value"),
        ("--comment=$(id)", "is not plain"),
        ("--comment=a'b", "is not plain"),
        ("--comment=a\nb", "is not plain"),
        ("--comment=a #x", "is not plain"),
        ("--comment= padded", "is not plain"),
        ("--comment=a\\b", "is not plain"),
        ("--comment=-x", "is not plain"),
    ],
)
def test_sbatch_args_refused(check: Check, arg: str, says: str) -> None:
    _, d = check(SLURM + f"  sbatch_args: [{json.dumps(arg)}]\n")
    assert [(x.path, says in x.message) for x in d if x.severity == "error"] == [
        ("slurm.sbatch_args[0]", True)
    ], [x.message for x in d]


def test_sbatch_gres_only_without_gpus_flag_and_once(check: Check) -> None:
    _, d = check(SLURM + "  sbatch_args: ['--gres=gpu:a100:4']\n")
    assert errors(d) == ["slurm.sbatch_args[0]"]
    c, d = check(SLURM + "  gpus_flag: none\n  sbatch_args: ['--gres=gpu:a100:4']\n")
    assert d == [] and c is not None
    _, d = check(SLURM + "  sbatch_args: ['--mem=0', '--mem=10G']\n")
    assert messages(d) == ["slurm.sbatch_args[1]: --mem is given twice"]


def test_sbatch_option_validator_is_the_argv_one() -> None:
    assert argv.sbatch_option("--mem=0") == "--mem=0"
    with pytest.raises(argv.UnsafeArgument):
        argv.sbatch_option("--uid=0")


# --- RDMA and NCCL off Kubernetes ---------------------------------------------------------------


def test_rdma_without_interfaces_and_device_port_on_slurm(check: Check) -> None:
    rdma = "network:\n  rdma:\n    enabled: true\n    devices: ['mlx5_0:1', mlx5_1]\n"
    c, d = check(SLURM + rdma)
    assert (
        d == [] and c is not None and c.rdma.devices == ("mlx5_0:1", "mlx5_1")
    )  # no Multus/pod warning
    # Kubernetes keeps its rules: no port form, one interface per device, the pod warning
    _, d = check(BASE + rdma)
    assert errors(d) == ["network.rdma", "network.rdma.devices[0]"]
    assert [x.path for x in d if x.severity == "warning"] == ["network.rdma.enabled"]
    _, d = check(
        SLURM + "network:\n  rdma:\n    enabled: true\n    devices: ['mlx5_0:x', 'mlx5_0:1;id']\n"
    )
    assert errors(d) == ["network.rdma.devices[0]", "network.rdma.devices[1]"]


def test_socket_ifname_in_nccl_env_off_kubernetes(check: Check) -> None:
    for value in ("bond0", "ib0,ib1", "^lo,docker0", "=eth0"):
        c, d = check(SLURM + f"nccl:\n  env:\n    NCCL_SOCKET_IFNAME: {json.dumps(value)}\n")
        assert d == [] and c is not None, value
    _, d = check(BASE + "nccl:\n  env:\n    NCCL_SOCKET_IFNAME: bond0\n")
    assert messages(d) == [
        "nccl.env.NCCL_SOCKET_IFNAME: NCCL_SOCKET_IFNAME is set from network.rdma.interfaces "
        "/ network.tcp.interface_exclude; set it there instead"
    ]
    for value in ("bond0;id", "a b", "", "x" * 16, "$(id)"):
        _, d = check(SLURM + f"nccl:\n  env:\n    NCCL_SOCKET_IFNAME: {json.dumps(value)}\n")
        assert errors(d) == ["nccl.env.NCCL_SOCKET_IFNAME"], value
