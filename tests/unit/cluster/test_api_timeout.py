"""One API timeout bounds every ``oc``/``kubectl`` call: what needs no wait here (the
probe's server remembered, a silent server not retried by deploy). Each call killed at
its deadline on the wall clock is ``tests/integration/test_client_deadlines.py``; the CLI
end to end, through the real kubectl against a half-up HTTP server, is
``tests/integration/test_unreachable_client.py::test_half_up_server_every_verb_exits_3_within_the_timeout``.
"""

from __future__ import annotations

import pytest

from mlenv.cluster.api import Unreachable
from mlenv.cluster.deploy import _apply_retrying
from mlenv.cluster.oc import OcCluster

SERVER = "https://api.example.test:6443"


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


def test_the_kubeconfig_read_and_the_server_request_run_at_once(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's two client processes are in front of every verb: run side by side, not
    one after the other. This kubectl's ``config view`` answers only once the request to
    /version has started (one after the other, it gives up after 20 s and fails)."""
    import sys

    mark = tmp_path / "version-started"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        f"mark = {str(mark)!r}\n"
        "if '--raw=/version' in sys.argv:\n"
        "    open(mark, 'w').close()\n"
        "    print('{}')\n"
        "    sys.exit(0)\n"
        "for _ in range(400):\n"
        "    if os.path.exists(mark):\n"
        f"        print({SERVER!r})\n"
        "        sys.exit(0)\n"
        "    time.sleep(0.05)\n"
        "sys.exit('error: no /version request while the kubeconfig was read')\n"
    )
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    c = OcCluster()
    c.probe(30.0)
    assert c.server() == SERVER


def test_a_list_is_parsed_with_the_collector_paused_and_restored() -> None:
    """Parsing a big List only allocates (no cycles): the collector is paused for it,
    from several threads at once, and left as it was found."""
    import gc
    import json
    from concurrent.futures import ThreadPoolExecutor

    from mlenv.cluster.oc import parsed_list

    doc = json.dumps({"items": [{"metadata": {"name": f"p{i}"}} for i in range(20000)]})

    def parse(_: int) -> int:
        return len(parsed_list(doc)["items"])

    assert gc.isenabled()
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(parse, range(8))) == [20000] * 8
    assert gc.isenabled()
    gc.disable()
    try:
        parsed_list(doc)
        assert not gc.isenabled()  # a caller's own pause is kept
    finally:
        gc.enable()


def test_a_call_beside_the_probe_answers_after_it_with_its_error_first(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """probe_beside: a read starts while the probe runs and answers only once the probe
    ended; when the probe failed, the read raises the probe's error (one line, exit 3),
    never its own."""
    import sys

    from mlenv.errors import InfraError

    for refused in (False, True):
        kubectl = tmp_path / "kubectl"
        kubectl.write_text(
            f"#!{sys.executable}\n"
            "import sys\n"
            "if 'view' in sys.argv:\n"
            f"    print({SERVER!r}, end='')\n"
            "elif '--raw=/version' in sys.argv:\n"
            + (
                "    sys.stderr.write('The connection to the server api was refused\\n')\n"
                "    sys.exit(1)\n"
                if refused
                else "    print('{}')\n"
            )
            + "else:\n"
            "    sys.stderr.write('error: the read failed its own way\\n')\n"
            "    sys.exit(1)\n"
        )
        kubectl.chmod(0o755)
        monkeypatch.setenv("PATH", str(tmp_path))
        c = OcCluster()
        ended: list[bool] = []
        c.probe_beside(30.0, None, ended.append)
        with pytest.raises(InfraError) as e:
            c.get("Pod", "p", "ns")
        assert ended == [not refused]
        if refused:
            assert isinstance(e.value, Unreachable) and "refused" in str(e.value)
        else:
            assert "its own way" in str(e.value)
