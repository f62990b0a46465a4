"""``acceptance.metrics.push``: the Pushgateway a scheduled re-check pushes to, validated
with a located error (http(s) only, no credentials, a plain path)."""

from __future__ import annotations

import pytest

from mlenv.contract import push_url
from mlenv.errors import InputError

from .conftest import BASE, Check, messages

SECTION = BASE + "acceptance:\n  schedule: '0 3 * * 0'\n  metrics:\n    push: '{url}'\n"


@pytest.mark.parametrize(
    "url",
    [
        "http://pushgateway.monitoring:9091",
        "https://push.example.com/prom/",
        "http://10.0.0.7:9091",
        "http://[fd00::7]:9091",
    ],
)
def test_a_plain_gateway_url_is_read(check: Check, url: str) -> None:
    c, d = check(SECTION.format(url=url))
    assert messages(d) == [] and c is not None and c.recheck.metrics_push == url


def test_unset_means_no_push(check: Check) -> None:
    c, d = check(BASE + "acceptance:\n  schedule: '0 3 * * 0'\n")
    assert messages(d) == [] and c is not None and c.recheck.metrics_push == ""


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://gw:9091", "expected an http:// or https:// URL"),
        ("pushgateway:9091", "expected an http:// or https:// URL"),
        ("https://ops:hunter2@gw:9091", "carries credentials (user:password@)"),
        ("http://gw:9091/x?job=a", "no query"),
        ("http://gw:9091/a%0Ab", "no %"),
        ("http://gw:9091/a b", "no spaces"),
        ("http://-gw:9091", "expected http(s)://HOST[:PORT][/PATH]"),
    ],
)
def test_a_bad_url_is_a_located_error(check: Check, url: str, why: str) -> None:
    c, d = check(SECTION.format(url=url))
    assert c is None
    err = [x for x in d if x.severity == "error"]
    assert [(x.line, x.path) for x in err] == [(7, "acceptance.metrics.push")], err
    assert why in err[0].message
    assert "hunter2" not in err[0].message  # a password is never echoed back


def test_an_unknown_key_under_metrics_is_refused(check: Check) -> None:
    c, d = check(BASE + "acceptance:\n  metrics:\n    pull: 'http://gw:9091'\n")
    assert c is None and any("acceptance.metrics" in m for m in messages(d)), messages(d)


def test_the_validator_refuses_what_would_become_an_option_or_a_second_word() -> None:
    for bad in ("--push=http://x", "http://x:9091 --insecure", "http://x/\n"):
        with pytest.raises(InputError):
            push_url(bad)
    assert push_url("https://gw.example.com:9091/") == "https://gw.example.com:9091/"


def test_node_events_is_read_and_off_kubernetes_a_warning(check: Check) -> None:
    c, d = check(BASE + "acceptance:\n  node_events: true\n")
    assert messages(d) == [] and c is not None and c.recheck.node_events is True
    c, d = check(
        BASE + "platform: slurm\nslurm:\n  partition: gpu\n  shared_dir: /shared/mlenv\n"
        "acceptance:\n  node_events: true\n"
    )
    assert c is not None and messages(d) == []
    warned = [x for x in d if x.severity == "warning" and x.path == "acceptance.node_events"]
    assert len(warned) == 1 and "tells Kubernetes Nodes" in warned[0].message
    c, d = check(BASE + "acceptance:\n  node_events: 'yes'\n")
    assert c is None and any("acceptance.node_events" in m for m in messages(d)), messages(d)
