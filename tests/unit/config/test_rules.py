"""Semantic rules: each one rejects what it should and accepts the legitimate variants."""

from __future__ import annotations

from decimal import Decimal

import pytest

from mlenv.config.rules import parse_quantity, split_list

from .conftest import BASE, Check, messages

RDMA_BARE = BASE + "network:\n  rdma:\n    enabled: true\n"
# With a device-plugin resource, so rule tests see no "no RDMA device" warning.
RDMA = RDMA_BARE + "    resources: {rdma/rdma_shared_device_a: 1}\n"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100Gi", Decimal(100 * 2**30)),
        ("500m", Decimal("0.5")),
        ("8", Decimal(8)),
        ("1.5G", Decimal("1.5e9")),
        ("1e3", Decimal(1000)),
        (".5Ki", Decimal(512)),
        ("1Ei", Decimal(2**60)),  # exbi and exa once read as an exponent: a crash, exit 3
        ("2E", Decimal(2 * 10**18)),
    ],
)
def test_quantity_parse(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["100GB", "1 Gi", "-1Gi", "Gi", "1.2.3", "1gi", ""])
def test_quantity_invalid(text: str) -> None:
    assert parse_quantity(text) is None


def test_split_list_forms() -> None:
    assert split_list("mlx5_6, mlx5_7,,") == ["mlx5_6", "mlx5_7"]
    assert split_list(["a", " b"]) == ["a", "b"]
    assert split_list(5) is None


def test_comma_string_and_list_are_equivalent(check: Check) -> None:
    a, da = check(RDMA + "    devices: mlx5_6,mlx5_7\n    interfaces: net1, net2\n")
    b, db = check(
        RDMA + "    devices: [mlx5_6, mlx5_7]\n    interfaces:\n      - net1\n      - net2\n"
    )
    assert da == [] and db == [] and a is not None and b is not None
    assert a.rdma.devices == b.rdma.devices == ("mlx5_6", "mlx5_7")
    assert a.rdma.interfaces == b.rdma.interfaces == ("net1", "net2")


def test_devices_auto_needs_no_interfaces(check: Check) -> None:
    c, d = check(RDMA + "    devices: auto\n")
    assert d == [] and c is not None
    assert c.rdma.auto_devices and c.rdma.devices == ()


def test_interface_count_must_match(check: Check) -> None:
    _, d = check(RDMA + "    devices: [a, b, c]\n    interfaces: [net1, net2]\n")
    assert messages(d) == [
        "network.rdma.interfaces: 2 interface(s) for 3 RDMA device(s); list one interface per device, in the same order"
    ]


def test_missing_interfaces_counts_as_zero(check: Check) -> None:
    _, d = check(RDMA + "    devices: mlx5_6\n")
    assert messages(d) == [
        "network.rdma: 0 interface(s) for 1 RDMA device(s); list one interface per device, in the same order"
    ]


def test_disabled_rdma_ignores_device_rules(check: Check) -> None:
    c, d = check(BASE + "network:\n  rdma:\n    enabled: false\n    devices: mlx5_6\n")
    assert d == [] and c is not None and not c.rdma.enabled


def test_gid_and_gdr_accept_quoted_numbers(check: Check) -> None:
    a, _ = check(BASE + "network:\n  rdma:\n    gid_index: '3'\n    gdr_level: '2'\n")
    b, _ = check(BASE + "network:\n  rdma:\n    gid_index: 3\n    gdr_level: 2\n")
    assert a is not None and b is not None
    assert (a.rdma.gid_index, a.rdma.gdr_level) == (b.rdma.gid_index, b.rdma.gdr_level) == (3, 2)


def test_legacy_interface_exclude_caret(check: Check) -> None:
    a, _ = check(BASE + "network:\n  tcp:\n    interface_exclude: ^lo,docker0\n")
    b, _ = check(BASE + "network:\n  tcp:\n    interface_exclude: [lo, docker0, virbr0]\n")
    assert a is not None and b is not None
    assert a.tcp.interface_exclude == ("lo", "docker0")
    assert b.tcp.interface_exclude == ("lo", "docker0", "virbr0")


def test_interface_name_length(check: Check) -> None:
    _, d = check(BASE + "network:\n  tcp:\n    interface_exclude: [averyveryverylongif]\n")
    assert messages(d) == [
        "network.tcp.interface_exclude[0]: interface name 'averyveryverylongif' is not valid (at most 15 characters, no spaces or '/')"
    ]


@pytest.mark.parametrize(("nodes", "default", "ok"), [(2, 2, True), (2, 3, False), (0, 64, True)])
def test_default_nodes_vs_pinned(check: Check, nodes: int, default: int, ok: bool) -> None:
    listed = "".join(f"    - node-{i}\n" for i in range(nodes))
    text = (
        BASE
        + ("nodes:\n  gpu_nodes:\n" + listed if nodes else "")
        + f"gpus:\n  default_nodes: {default}\n"
    )
    c, d = check(text)
    assert (c is not None) == ok, d


def test_names(check: Check) -> None:
    ok, d = check(
        "cluster:\n  name: a"
        + "b" * 62
        + "\n  namespace: x-1\nsecurity:\n  service_account: sa.team-1\n"
    )
    assert d == [] and ok is not None
    _, d = check(BASE + "nodes:\n  gpu_nodes: [node.example.com, -bad]\n")
    assert [x.path for x in d] == ["nodes.gpu_nodes[1]"]


def test_requests_and_limits(check: Check) -> None:
    ok, d = check(
        BASE
        + "resources:\n  requests: {cpu: 500m, memory: 1Gi}\n  limits: {cpu: 1, memory: 1024Mi}\n"
    )
    assert d == [] and ok is not None
    assert ok.resources.limits.cpu == "1" and ok.resources.requests.cpu == "500m"
    _, d = check(BASE + "resources:\n  requests: {cpu: '2'}\n  limits: {cpu: 1500m}\n")
    assert messages(d) == ["resources.requests.cpu: request '2' is above the limit '1500m'"]


def test_nccl_env(check: Check) -> None:
    c, d = check(BASE + "nccl:\n  env:\n    NCCL_ALGO: Ring\n    NCCL_NSOCKS_PERTHREAD: 4\n")
    assert d == [] and c is not None
    assert c.nccl.extra_env == (("NCCL_ALGO", "Ring"), ("NCCL_NSOCKS_PERTHREAD", "4"))
    _, d = check(BASE + "nccl:\n  env:\n    NCCL_DEBUG: INFO\n")
    assert messages(d) == [
        "nccl.env.NCCL_DEBUG: NCCL_DEBUG is set from nccl.debug; set it there instead"
    ]


def test_resources_and_networks(check: Check) -> None:
    c, d = check(
        RDMA_BARE + "    devices: auto\n    resources: {openshift.io/mlnx: 2, rdma/a: 1}\n"
        "    networks: [rail-1, ns-2/rail-2]\n"
    )
    assert d == [] and c is not None
    assert [(r.name, r.count) for r in c.rdma.resources] == [
        ("openshift.io/mlnx", 2),
        ("rdma/a", 1),
    ]
    assert c.rdma.networks == ("rail-1", "ns-2/rail-2")
    _, d = check(BASE + "network:\n  rdma:\n    networks: [a/b/c]\n")
    assert [x.path for x in d] == ["network.rdma.networks[0]"]


def test_all_errors_of_a_file_at_once(check: Check) -> None:
    _, d = check(
        "cluster:\n  name: X\n  namespace: Y\nstorage:\n  mode: nope\nshm_size: lots\n"
        "gpus:\n  per_node: -1\nssh_port: 80\n"
    )
    assert [x.path for x in d] == [
        "cluster.name",
        "cluster.namespace",
        "storage.mode",
        "shm_size",
        "gpus.per_node",
        "ssh_port",
    ]
    assert [x.line for x in d] == [2, 3, 5, 6, 8, 9]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e999999999", Decimal("Infinity")),
        ("1e" + "9" * 5000, Decimal("Infinity")),
        ("9" * 5000 + "e999999", Decimal("Infinity")),
        ("1e-" + "9" * 5000, Decimal(0)),
    ],
)
def test_quantity_beyond_decimal_range_never_raises(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_quantity_above_the_kubernetes_cap(check: Check) -> None:
    _, d = check(BASE + f"shm_size: '{2**63}'\nstorage:\n  workspace_size: '{2**63 - 1}'\n")
    assert messages(d) == [
        f"shm_size: '{2**63}' is too large for a Kubernetes quantity (at most 2^63-1 base units)"
    ]


@pytest.mark.parametrize("key", ["gid_index", "gdr_level"])
@pytest.mark.parametrize("value", ['"3\\n"', '"\\n3"', '"3 "', '"٣"', '"³"', '"+3"'])
def test_quoted_numbers_are_ascii_digits_only(check: Check, key: str, value: str) -> None:
    c, d = check(RDMA + f"    devices: auto\n    {key}: {value}\n")
    assert c is None
    assert [x.path for x in d if x.severity == "error"] == [f"network.rdma.{key}"]


def test_quoted_numbers_keep_working(check: Check) -> None:
    c, d = check(RDMA + '    devices: auto\n    gid_index: "003"\n    gdr_level: "0000002"\n')
    assert d == [] and c is not None
    assert (c.rdma.gid_index, c.rdma.gdr_level) == (3, 2)


@pytest.mark.parametrize(
    ("rdma", "warned"),
    [
        ("    devices: auto\n", True),
        ("    devices: auto\n    resources: {}\n    networks: []\n", True),
        ("    devices: auto\n    networks: [rail-1]\n", False),
        ("    devices: auto\n    resources: {rdma/a: 1}\n", False),
    ],
)
def test_rdma_without_device_or_network_warns(check: Check, rdma: str, warned: bool) -> None:
    c, d = check(RDMA_BARE + rdma)
    assert c is not None, "a warning never blocks the config"
    assert [x.severity for x in d] == (["warning"] if warned else [])
    if warned:
        assert (
            d[0]
            .format()
            .endswith(
                "c.yaml:6:14: warning: network.rdma.enabled: RDMA is enabled but neither network.rdma.resources "
                "nor network.rdma.networks is set, so the pods request no RDMA device and no Multus network "
                "(add the device-plugin resource, e.g. 'rdma/rdma_shared_device_a: 1', and the "
                "NetworkAttachmentDefinition names)"
            )
        )


def test_rdma_disabled_never_warns(check: Check) -> None:
    c, d = check(BASE + "network:\n  rdma:\n    enabled: false\n")
    assert c is not None and d == []


def test_schema_patterns_use_ecma_end_of_input() -> None:
    from mlenv.config.schema import python_pattern, schema

    assert python_pattern("^[0-9]+$").search("300\n") is None
    assert python_pattern("^[0-9]+$").search("300")
    assert python_pattern(r"^a\$[$]$").search("a$$")  # escaped and in-class $ stay literal
    # every pattern of the schema refuses a trailing newline after a value it accepts
    patterns: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema())
    assert len(patterns) >= 4
    assert all(
        r"\Z" in python_pattern(p).pattern and "$" not in python_pattern(p).pattern
        for p in patterns
    )
