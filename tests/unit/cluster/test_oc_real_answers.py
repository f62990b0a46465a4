"""i22.9: what a real API server answers, read as it means it (the fake always answered
in one shape: lastTimestamp and count filled, and no Forbidden that quotes a NotFound)."""

from __future__ import annotations

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
    core = {"reason": "old", "lastTimestamp": "2026-11-27T10:00:05Z", "count": 3}
    new_style = {"reason": "newer", "lastTimestamp": None, "eventTime": "2026-11-27T10:00:06.120000Z"}
    repeated = {"reason": "newest", "eventTime": "2026-11-27T09:00:00.000001Z",
                "series": {"count": 7, "lastObservedTime": "2026-11-27T10:00:07.000001Z"}}
    items = [repeated, new_style, core]
    assert [e["reason"] for e in sorted(items, key=event_time)] == ["old", "newer", "newest"]
    assert [event_count(e) for e in (core, new_style, repeated)] == [3, 1, 7]
