"""``platform:``, ``slurm:`` and ``hosts:`` — located errors for values that would
reach a batch script or an ssh command line, located warnings for another platform's keys."""

from __future__ import annotations

import math

import pytest

from mlenv.config.model import Hosts, Slurm
from mlenv.config.rules import slurm_minutes

from .conftest import BASE, Check, messages

SLURM = BASE + "platform: slurm\nslurm:\n  partition: gpu\n  shared_dir: /shared/mlenv\n"
HOSTS = BASE + "platform: hosts\nnodes:\n  gpu_nodes: [node-a, node-b]\n"


def warnings(diags: list) -> list[str]:
    return [f"{d.line}:{d.path}: {d.message}" for d in diags if d.severity == "warning"]


def test_default_platform_is_openshift_and_sections_default(check: Check) -> None:
    c, d = check(BASE)
    assert d == [] and c is not None
    assert c.platform == "openshift" and c.slurm == Slurm() and c.hosts == Hosts()


def test_slurm_config_builds_the_model(check: Check) -> None:
    c, d = check(
        SLURM + '  account: proj-1\n  qos: normal\n  time_limit: "2-00:30"\n  constraint: h100\n'
        "  exclusive: false\n  gpus_flag: gres\n  container_image: nvcr.io/nvidia/pytorch:24.05-py3\n"
        "  container_mounts: [/data:/data:ro]\n  python: /opt/venv/bin/python\n"
    )
    assert messages(d) == [] and c is not None
    assert c.platform == "slurm"
    assert c.slurm == Slurm(
        partition="gpu",
        account="proj-1",
        qos="normal",
        time_limit="2-00:30",
        constraint="h100",
        exclusive=False,
        gpus_flag="gres",
        container_image="nvcr.io/nvidia/pytorch:24.05-py3",
        container_mounts=("/data:/data:ro",),
        shared_dir="/shared/mlenv",
        python="/opt/venv/bin/python",
    )


def test_slurm_requires_shared_dir_but_no_partition(check: Check) -> None:
    _, d = check(BASE + "platform: slurm\n")
    assert messages(d) == ["platform: slurm.shared_dir is required on platform: slurm"]
    _, d = check(BASE + 'platform: slurm\nslurm:\n  partition: gpu\n  shared_dir: ""\n')
    errs = [x for x in d if x.severity == "error"]
    assert [(x.line, x.path) for x in errs] == [(7, "slurm.shared_dir")]
    # MareNostrum 5, Perlmutter: no partition, the QOS or constraint picks the nodes
    c, d = check(BASE + 'platform: slurm\nslurm:\n  partition: ""\n  shared_dir: /s\n')
    assert d == [] and c is not None and c.slurm.partition == ""


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("30", 30),
        ("30:30", 30.5),
        ("01:00:00", 60),
        ("1-0", 1440),
        ("1-02:03", 1563),
        ("0-00:00:30", 0.5),
        ("UNLIMITED", math.inf),
    ],
)
def test_slurm_time_forms(text: str, minutes: float) -> None:
    assert slurm_minutes(text) == minutes


@pytest.mark.parametrize(
    "text", ["", "1h", "01:60:00", "1-24", "-5", "1:2:3:4", "01:00:00\n", "1 -0", "--time=5"]
)
def test_slurm_time_refused(text: str) -> None:
    assert slurm_minutes(text) is None


def test_unquoted_time_is_explained(check: Check) -> None:
    c, d = check(SLURM + "  time_limit: 01:00:00\n")  # unquoted: still the string, not 3600
    assert d == [] and c is not None and c.slurm.time_limit == "01:00:00"
    _, d = check(SLURM + "  time_limit: 60\n")
    assert len(messages(d)) == 1 and "Slurm time in quotes" in messages(d)[0]
    _, d = check(SLURM + '  time_limit: "1:61"\n')
    assert messages(d) == [
        "slurm.time_limit: '1:61' is not a Slurm time (minutes, MM:SS, HH:MM:SS, "
        "D-HH, D-HH:MM or D-HH:MM:SS)"
    ]
    _, d = check(SLURM + '  time_limit: "0"\n')
    assert messages(d) == ["slurm.time_limit: '0' is zero: the job could not run"]


@pytest.mark.parametrize("key", ["partition", "account", "qos", "constraint"])
@pytest.mark.parametrize(
    "value", ["-gpu", "--account=x", "gpu;id", "a b", "$(id)", "gpu\n", "g`x`", "x" * 65]
)
def test_slurm_names_are_plain_words(check: Check, key: str, value: str) -> None:
    import json

    _, d = check(
        SLURM.replace("  partition: gpu\n", "  partition: gpu\n" if key != "partition" else "")
        + f"  {key}: {json.dumps(value)}\n"
    )
    assert [x.path for x in d if x.severity == "error"] == [f"slurm.{key}"], value


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("shared_dir", "relative/dir"),
        ("shared_dir", "/a b"),
        ("shared_dir", "/x/../etc"),
        ("shared_dir", "/x;id"),
        ("shared_dir", "/$HOME"),
        ("python", "python3 -c 'import os'"),
        ("python", "-c"),
        ("python", "py`id`"),
        ("container_image", "img with space"),
        ("container_image", "/x/y.tar"),
        ("container_image", "a,b"),
    ],
)
def test_slurm_paths_and_commands(check: Check, key: str, value: str) -> None:
    import json

    _, d = check(
        SLURM.replace(
            "  shared_dir: /shared/mlenv\n", "  shared_dir: /s\n" if key != "shared_dir" else ""
        )
        + f"  {key}: {json.dumps(value)}\n"
    )
    assert [x.path for x in d if x.severity == "error"] == [f"slurm.{key}"], value


def test_container_mounts(check: Check) -> None:
    _, d = check(
        SLURM + "  container_mounts: [/a:/b, /c, /d:/e:ro, 'x:/y', '/a,/b:/c', '/a:/b:exec']\n"
    )
    assert [x.path for x in d if x.severity == "error"] == [
        "slurm.container_mounts[3]",
        "slurm.container_mounts[4]",
        "slurm.container_mounts[5]",
    ]


def test_another_platforms_keys_are_located_warnings(check: Check) -> None:
    c, d = check(BASE + "slurm:\n  partition: gpu\n")
    assert c is not None and messages(d) == []
    assert warnings(d) == [
        "4:slurm: 'slurm:' applies to platform: slurm, but this config's platform is "
        "openshift: it is ignored"
    ]
    c, d = check(
        SLURM
        + "shm_size: 8Gi\nstorage: {mode: rwx}\nhosts: {ssh_port: 22}\nimage: {ref: quay.io/a/b:1}\n"
    )
    assert c is not None and messages(d) == []
    assert warnings(d) == [
        "8:shm_size: 'shm_size' is the pods' /dev/shm size; platform slurm ignores it",
        "9:storage: 'storage' is the pods' volumes; platform slurm ignores it",
        "10:hosts: 'hosts:' applies to platform: hosts, but this config's platform is slurm: it is ignored",
        "11:image.ref: image.ref is the pods' image; platform slurm ignores it (use slurm.container_image)",
    ]


def test_hosts_config(check: Check) -> None:
    c, d = check(
        HOSTS + 'hosts:\n  ssh_user: ml_user\n  ssh_port: "2200"\n  ssh_key: ~/.ssh/id_ed25519\n'
        "  shared_dir: /nfs/ml\n  python: python3.11\n"
    )
    assert d == [] and c is not None
    assert c.platform == "hosts" and c.gpu_nodes == ("node-a", "node-b")
    assert c.hosts == Hosts(
        ssh_user="ml_user",
        ssh_port=2200,
        ssh_key="~/.ssh/id_ed25519",
        shared_dir="/nfs/ml",
        python="python3.11",
    )


def test_hosts_needs_hosts_and_plain_values(check: Check) -> None:
    _, d = check(BASE + "platform: hosts\n")
    assert messages(d) == [
        "platform: platform: hosts needs the hosts listed in nodes.gpu_nodes (host 0 is the head)"
    ]
    _, d = check(
        HOSTS + 'hosts:\n  ssh_user: "-oProxyCommand=id"\n  ssh_key: "key file"\n  ssh_port: 0\n'
        '  python: "python3;id"\n  shared_dir: "~/x"\n'
    )
    assert sorted(x.path for x in d if x.severity == "error") == [
        "hosts.python",
        "hosts.shared_dir",
        "hosts.ssh_key",
        "hosts.ssh_port",
        "hosts.ssh_user",
    ]


def test_unknown_platform_is_a_schema_error(check: Check) -> None:
    _, d = check(BASE + "platform: lsf\n")
    assert [x.path for x in d if x.severity == "error"] == ["platform"]


@pytest.mark.parametrize(
    "toleration,what",
    [
        ("{operator: Exists}", "tolerates every taint"),
        ("{operator: Exists, effect: NoSchedule}", "tolerates every taint"),
        ("{key: ml-dev-env.io/health, operator: Exists}", "tolerates the quarantine taint"),
        (
            "{key: ml-dev-env.io/health, value: fail, effect: NoSchedule}",
            "tolerates the quarantine",
        ),
    ],
)
def test_a_toleration_that_lets_workers_onto_quarantined_nodes_is_a_located_warning(
    check: Check, toleration: str, what: str
) -> None:
    text = (
        BASE + "scheduling:\n  tolerations:\n"
        "    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n"
        f"    - {toleration}\n"
    )
    c, d = check(text)
    assert c is not None and [x for x in d if x.severity == "error"] == []
    (w,) = warnings(d)
    line = text.splitlines().index(f"    - {toleration}") + 1
    assert w.startswith(f"{line}:scheduling.tolerations[1]: this toleration {what}"), w
    assert "mlenv quarantine --apply" in w


@pytest.mark.parametrize(
    "toleration",
    [
        "{key: nvidia.com/gpu, operator: Exists}",
        "{operator: Exists, effect: NoExecute}",
        "{key: ml-dev-env.io/health, value: rma, effect: NoSchedule}",
    ],
)
def test_tolerations_of_other_taints_are_quiet(check: Check, toleration: str) -> None:
    _, d = check(BASE + f"scheduling:\n  tolerations:\n    - {toleration}\n")
    assert warnings(d) == []


def test_a_quarantine_toleration_on_slurm_is_left_to_the_ignored_key_warning(check: Check) -> None:
    _, d = check(SLURM + "scheduling:\n  tolerations:\n    - {operator: Exists}\n")
    assert [w.split(": ", 1)[1] for w in warnings(d)] == [
        "'scheduling' is the pods' tolerations and node selector; platform slurm ignores it"
    ]
