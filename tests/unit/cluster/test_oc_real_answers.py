"""i22.9: what a real API server answers, read as it means it (the fake always answered
in one shape: lastTimestamp and count filled, and no Forbidden that quotes a NotFound)."""

from __future__ import annotations

from typing import Any

import pytest

from mlenv.cluster.api import Forbidden, NotFound
from mlenv.cluster.oc import classify, event_count, event_time


@pytest.mark.parametrize(("stderr", "expected"), [
    # an admission plugin's refusal that quotes a missing service account: not retried as NotFound
    ('Error from server (Forbidden): error when creating "STDIN": pods "ml-dev-env-0" is forbidden: '
     'error looking up service account ns/ml-dev-sa: serviceaccount "ml-dev-sa" not found', Forbidden),
    # an object whose name says forbidden, that is simply not there
    ('Error from server (NotFound): configmaps "forbidden-words" not found', NotFound),
    ('Error from server (NotFound): the server could not find the requested resource', NotFound),
    ('error: the server doesn\'t have a resource type "routes"', NotFound),
])
def test_the_servers_own_reason_decides(stderr: str, expected: type) -> None:
    assert type(classify(stderr)) is expected


def test_events_order_by_when_they_last_happened_whatever_api_wrote_them() -> None:
    core: dict[str, Any] = {"reason": "old", "lastTimestamp": "2026-11-27T10:00:05Z", "count": 3}
    new_style: dict[str, Any] = {"reason": "newer", "lastTimestamp": None, "eventTime": "2026-11-27T10:00:06.120000Z"}
    repeated: dict[str, Any] = {"reason": "newest", "eventTime": "2026-11-27T09:00:00.000001Z",
                "series": {"count": 7, "lastObservedTime": "2026-11-27T10:00:07.000001Z"}}
    items = [repeated, new_style, core]
    assert [e["reason"] for e in sorted(items, key=event_time)] == ["old", "newer", "newest"]
    assert [event_count(e) for e in (core, new_style, repeated)] == [3, 1, 7]


@pytest.mark.parametrize(("served", "count"), [("1k", 1000.0), ("8", 8.0), ("500m", 0.5), ("2Ki", 2048.0),
                                                ("junk", 0.0)])
def test_node_allocatable_is_read_as_a_quantity(served: str, count: float) -> None:
    """The real server wrote a device plugin's 1000 shared RDMA devices as `1k`; float()
    read 0 and preflight refused RDMA on every node (fails on the code before)."""
    from mlenv.cluster.preflight import _alloc

    node = {"status": {"allocatable": {"rdma/rdma_shared_device_a": served}}}
    assert _alloc(node, "rdma/rdma_shared_device_a") == count
