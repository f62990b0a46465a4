"""One API timeout bounds every ``oc``/``kubectl`` call but exec and rsync.

Against a fake ``kubectl`` that never answers (it sleeps a minute): each call carries
``--request-timeout`` = the client's ``api_timeout`` and its process is killed
:data:`~mlenv.cluster.oc.CALL_SLACK_S` later, the probe exactly at its limit; the error
is one line naming the server; exec keeps its own limit; a silent server is not retried
by deploy. The CLI end to end, through the real kubectl against a half-up HTTP server,
is ``tests/cli/test_unreachable.py::test_half_up_server_every_verb_exits_3_within_the_timeout``.
"""

from __future__ import annotations

import math
import time

import pytest

from mlenv.cluster.api import Unreachable
from mlenv.cluster.deploy import _apply_retrying
from mlenv.cluster.oc import CALL_SLACK_S, OcCluster

SERVER = "https://api.example.test:6443"
HANG = 60  # what the fake would wait: a test that waits for it has failed
# How late a kill may come on the wall clock: the fake kubectl is a Python process
# starting on a possibly overloaded machine (load 8 on 2 cores measured 3 s late). The
# exact deadline each call is given is checked through `deadlines`; the wall clock only
# shows it is enforced.
LATE = 5.0


@pytest.fixture
def deadlines(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds each client process is given before it is killed (OcCluster._call)."""
    seen: list[float] = []
    real = OcCluster._call

    def spy(line: list[str], stdin: str | None, timeout: float) -> tuple[int, str, str, bool]:
        if math.isfinite(timeout):  # inf: a call without a kill deadline
            seen.append(timeout)
        return real(line, stdin, timeout)

    monkeypatch.setattr(OcCluster, "_call", staticmethod(spy))
    return seen


@pytest.fixture
def silent(fake_bin) -> OcCluster:
    """kubectl whose every server call hangs; config view answers the server's URL."""
    fake_bin.install("kubectl")
    fake_bin.respond(
        [
            {"match": ["config", "view"], "stdout": SERVER},
            {"match": ["exec"], "sleep": 2 + CALL_SLACK_S, "stdout": "done\n"},
            {"match": [], "sleep": HANG},
        ]
    )
    return OcCluster(api_timeout=0.5)


def test_a_call_that_never_answers_is_killed_past_the_api_timeout_and_names_the_server(
    silent: OcCluster, fake_bin, deadlines: list[float]
) -> None:
    silent.server_url = SERVER  # what the probe found
    t0 = time.monotonic()
    with pytest.raises(Unreachable) as e:
        silent.get("Pod", "p", "ns")
    wall = time.monotonic() - t0
    assert deadlines == [0.5 + CALL_SLACK_S]
    assert wall < 0.5 + CALL_SLACK_S + LATE, wall
    assert str(e.value) == (
        f"cannot reach the API server {SERVER}: no answer within 0.5 s "
        "(raise the limit with MLENV_API_TIMEOUT_S or --request-timeout)"
    )
    assert "--request-timeout=500ms" in fake_bin.calls()[0]


@pytest.mark.parametrize("call", ["list", "apply", "delete", "can_i", "logs"])
def test_every_api_call_is_bounded(silent: OcCluster, call: str, deadlines: list[float]) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    run = {
        "list": lambda: silent.list("Pod", "ns", {"a": "b"}),
        "apply": lambda: silent.apply(cm, "ns"),
        "delete": lambda: silent.delete("Pod", "p", "ns"),
        "can_i": lambda: silent.can_i("create", "pods", "ns", subresource="exec"),
        "logs": lambda: silent.logs("p", "ns"),
    }[call]
    t0 = time.monotonic()
    with pytest.raises(Unreachable, match="no answer within 0.5 s"):
        run()
    assert time.monotonic() - t0 < 0.5 + CALL_SLACK_S + LATE
    assert deadlines == [0.5 + CALL_SLACK_S]  # one call (apply's first read), not retried


def test_the_probe_is_bounded_by_exactly_the_limit_it_names(
    silent: OcCluster, deadlines: list[float]
) -> None:
    """Once the probe's process had its limit plus 5 s (and kubectl retried inside)."""
    t0 = time.monotonic()
    with pytest.raises(Unreachable) as e:
        silent.probe(1.0)
    wall = time.monotonic() - t0
    assert deadlines[-1] == 1.0  # the /version request (after config view's own bound)
    assert wall < 1.0 + LATE + 1.0, wall
    assert str(e.value).startswith(f"cannot reach the API server {SERVER}: no answer within 1 s")


def test_exec_keeps_its_own_limit_not_the_api_timeout(
    silent: OcCluster, deadlines: list[float]
) -> None:
    """exec and rsync run user code for minutes: MLENV_EXEC_TIMEOUT bounds them, not the
    API timeout (this exec takes longer than api_timeout + CALL_SLACK_S and succeeds)."""
    assert silent.exec("p", "ns", ["true"], timeout=30).stdout == "done\n"
    assert deadlines == [30]


def test_after_the_probe_the_server_is_known_without_another_client_call(fake_bin) -> None:
    """discover and preflight ask for the server; the probe read it from the same
    kubeconfig a moment before (one client process less in front of a verb)."""
    fake_bin.install("kubectl")
    fake_bin.respond(
        [
            {"match": ["config", "view"], "stdout": SERVER},
            {"match": ["--raw=/version"], "stdout": '{"major": "1"}'},
        ]
    )
    c = OcCluster()
    assert c.probe(5.0) == SERVER
    before = len(fake_bin.calls())
    assert c.server() == SERVER and len(fake_bin.calls()) == before


def test_deploy_does_not_retry_a_server_that_did_not_answer() -> None:
    """Each try would cost the whole API timeout again; a server error is still retried
    (tests/unit/cluster/test_ownership.py::test_transient_failure_is_retried)."""

    class Silent:
        tries = 0

        def apply(self, *_a: object, **_k: object) -> None:
            self.tries += 1
            raise Unreachable(f"cannot reach the API server {SERVER}: no answer within 10 s")

    client = Silent()
    said: list[str] = []
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    with pytest.raises(Unreachable):
        _apply_retrying(client, cm, "ns", said.append)  # type: ignore[arg-type]
    assert client.tries == 1 and not said
