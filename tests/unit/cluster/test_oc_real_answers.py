"""what a real API server answers, read as it means it (the fake always answered
in one shape: lastTimestamp and count filled, and no Forbidden that quotes a NotFound)."""

from __future__ import annotations

from typing import Any

import pytest

from mlenv.cluster.api import Forbidden, NotFound
from mlenv.cluster.oc import classify, event_count, event_time


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        # an admission plugin's refusal that quotes a missing service account: not retried as NotFound
        (
            'Error from server (Forbidden): error when creating "STDIN": pods "ml-dev-env-0" is forbidden: '
            'error looking up service account ns/ml-dev-sa: serviceaccount "ml-dev-sa" not found',
            Forbidden,
        ),
        # an object whose name says forbidden, that is simply not there
        ('Error from server (NotFound): configmaps "forbidden-words" not found', NotFound),
        (
            "Error from server (NotFound): the server could not find the requested resource",
            NotFound,
        ),
        ('error: the server doesn\'t have a resource type "routes"', NotFound),
    ],
)
def test_the_servers_own_reason_decides(stderr: str, expected: type) -> None:
    assert type(classify(stderr)) is expected


def test_events_order_by_when_they_last_happened_whatever_api_wrote_them() -> None:
    core: dict[str, Any] = {"reason": "old", "lastTimestamp": "2026-11-27T10:00:05Z", "count": 3}
    new_style: dict[str, Any] = {
        "reason": "newer",
        "lastTimestamp": None,
        "eventTime": "2026-11-27T10:00:06.120000Z",
    }
    repeated: dict[str, Any] = {
        "reason": "newest",
        "eventTime": "2026-11-27T09:00:00.000001Z",
        "series": {"count": 7, "lastObservedTime": "2026-11-27T10:00:07.000001Z"},
    }
    items = [repeated, new_style, core]
    assert [e["reason"] for e in sorted(items, key=event_time)] == ["old", "newer", "newest"]
    assert [event_count(e) for e in (core, new_style, repeated)] == [3, 1, 7]


@pytest.mark.parametrize(
    ("served", "count"), [("1k", 1000.0), ("8", 8.0), ("500m", 0.5), ("2Ki", 2048.0), ("junk", 0.0)]
)
def test_node_allocatable_is_read_as_a_quantity(served: str, count: float) -> None:
    """The real server wrote a device plugin's 1000 shared RDMA devices as `1k`; float()
    read 0 and preflight refused RDMA on every node (fails on the code before)."""
    from mlenv.cluster.preflight import _alloc

    node = {"status": {"allocatable": {"rdma/rdma_shared_device_a": served}}}
    assert _alloc(node, "rdma/rdma_shared_device_a") == count


# What kubectl 1.34 printed against the kube tier (v1.34.4) with kwok, which serves the
# nodes' kubelet endpoints, stopped (captured 2026-11-27), and older servers' SPDY shapes.
EXEC_NODE_DOWN = (
    'error: Internal error occurred: error sending request: Post "https://localhost:39571/exec/t1/p1/c'
    '?command=echo&command=hi&error=1&output=1": dial tcp 127.0.0.1:39571: connect: connection refused'
)
LOGS_NODE_DOWN = (
    'Error from server: Get "https://localhost:39571/containerLogs/t1/p1/c": dial tcp 127.0.0.1:39571: '
    "connect: connection refused"
)
SPDY_NODE_DOWN = "Error from server: error dialing backend: dial tcp 10.0.3.17:10250: i/o timeout"


@pytest.mark.parametrize("stderr", [EXEC_NODE_DOWN, LOGS_NODE_DOWN, SPDY_NODE_DOWN])
def test_a_node_the_server_cannot_reach_is_said_as_such(stderr: str) -> None:
    """the API server answered, its kubelet call failed: exit 3 naming the pod and
    the dial that failed, never "cannot reach the API server" nor a generic API error."""
    from mlenv.cluster.api import NodeUnreachable

    e = classify(stderr, "Pod", "p1")
    assert type(e) is NodeUnreachable and e.exit_code == 3
    assert "pod p1" in str(e) and "could not reach the node" in str(e) and "dial tcp" in str(e)
    assert "cannot reach the API server" not in str(e)


@pytest.mark.parametrize(
    "stderr",
    [
        # kwok's answer for a command that ran and failed: the command's failure, not the node's
        "error: Internal error occurred: error executing command in container: cmd wait: false : exit status 1",
        "command terminated with exit code 1",
        'error: unable to upgrade connection: container not found ("main")',
    ],
)
def test_a_command_that_ran_and_failed_is_not_a_node_problem(stderr: str) -> None:
    from mlenv.cluster.oc import kubelet_unreachable

    assert kubelet_unreachable(stderr) is None


def test_an_exec_the_server_could_not_deliver_is_unreachable_not_execfailed(
    tmp_path, monkeypatch
) -> None:
    """Through OcCluster.exec with a kubectl that answers as the real one did: the command
    never ran, so neither ExecFailed (check=True) nor a result with exit 1 (check=False)."""
    from mlenv.cluster.api import NodeUnreachable
    from mlenv.cluster.oc import OcCluster

    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"#!/bin/sh\necho '{EXEC_NODE_DOWN}' >&2\nexit 1\n")
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    client = OcCluster(str(kubectl))
    for check in (True, False):
        with pytest.raises(NodeUnreachable, match="pod p1"):
            client.exec("p1", "ns", ["true"], check=check, timeout=20)
    lines: list[str] = []
    with pytest.raises(NodeUnreachable):
        client.exec_stream("p1", "ns", ["true"], lines.append, timeout=20)
    assert lines == []


def test_a_command_that_prints_the_node_message_itself_is_its_own_failure(
    tmp_path, monkeypatch
) -> None:
    """The remote command printed kubectl's node-down line itself and exited 7: it ran, so
    kubectl ends with "command terminated with exit code 7" and the failure is the
    command's (ExecFailed / exit 7 passed through, the line printed), not NodeUnreachable."""
    from mlenv.cluster.api import ExecFailed
    from mlenv.cluster.oc import OcCluster, classify, kubelet_unreachable

    ran = f"{EXEC_NODE_DOWN}\ncommand terminated with exit code 7"
    assert (
        kubelet_unreachable(ran) is None
        and type(classify(ran, "Pod", "p1")).__name__ != "NodeUnreachable"
    )
    # quoted inside a line that is not kubectl's own error line: not the node either
    assert kubelet_unreachable(f"retrying: {EXEC_NODE_DOWN}") is None
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(
        f"#!/bin/sh\necho '{EXEC_NODE_DOWN}' >&2\necho 'command terminated with exit code 7' >&2\n"
        "exit 7\n"
    )
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    client = OcCluster(str(kubectl))
    with pytest.raises(ExecFailed):
        client.exec("p1", "ns", ["true"], check=True, timeout=20)
    assert client.exec("p1", "ns", ["true"], check=False, timeout=20).returncode == 7
    lines: list[str] = []
    assert client.exec_stream("p1", "ns", ["true"], lines.append, timeout=20) == 7
    assert lines == [EXEC_NODE_DOWN, "command terminated with exit code 7"]
