"""OcCluster's captured calls: one client process each, run by ``subprocess.run`` with no
shell (openshift-client's ``invoke`` polled each process, 0.1-0.3 s past its end per
kubectl call on the kube tier). What invoke did stays: the argv (namespace right after the
verb, nothing of one call in the next), an empty stdin unless one is given, LC_ALL for
English messages, a kill at the deadline with exit -1 and the output so far (that kill,
on the wall clock, is ``tests/integration/test_client_deadlines.py``)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from mlenv.cluster.oc import OcCluster

KUBECTL = r"""
import json, os, sys
with open(os.environ["ARGV_LOG"], "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[1:], "stdin": sys.stdin.read(),
                         "lc_all": os.environ.get("LC_ALL")}) + "\n")
print(json.dumps({"kind": "ConfigMap", "metadata": {"name": "x", "resourceVersion": "1"}}))
"""


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[OcCluster, Path]:
    exe = tmp_path / "kubectl"
    exe.write_text(f"#!{sys.executable}\n{KUBECTL}")
    exe.chmod(0o755)
    log = tmp_path / "argv.log"
    monkeypatch.setenv("ARGV_LOG", str(log))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    return OcCluster(str(exe)), log


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_namespace_never_leaks_into_the_next_call(client) -> None:
    c, log = client
    c.get("ConfigMap", "x", "ns-a")
    c.get("Node", "n1", None)  # cluster-scoped: no namespace
    c.get("ConfigMap", "x", "ns-b")
    calls = [r["argv"] for r in _calls(log)]
    assert len(calls) == 3
    assert calls[0][:2] == ["get", "--namespace=ns-a"]
    assert not any(a.startswith("--namespace") for a in calls[1])
    assert calls[2][:2] == ["get", "--namespace=ns-b"] and "--namespace=ns-a" not in calls[2]


def test_the_argv_is_the_one_openshift_client_ran(client, tmp_path: Path) -> None:
    """binary, verb, --namespace, the client flags, the options, --request-timeout, then
    the names after "--": what invoke built from its project context and cmd_args (the
    same argv, stdin and LC_ALL for get, list, apply, exec, can-i and a cluster-scoped
    get were compared before and after the change)."""
    exe = client[0].binary
    kc = tmp_path / "kc"
    kc.write_text("")
    c = OcCluster(exe, kubeconfig=str(kc), context="ctx-a", api_timeout=7)
    c.get("ConfigMap", "x", "ns-a")
    (call,) = _calls(client[1])
    assert call["argv"] == [
        "get",
        "--namespace=ns-a",
        f"--kubeconfig={kc}",
        "--context=ctx-a",
        "--output=json",
        "--ignore-not-found",
        "--request-timeout=7000ms",
        "--",
        "ConfigMap",
        "x",
    ]


def test_stdin_is_empty_unless_given_and_messages_are_english(client) -> None:
    """A call without input reads an empty stdin, never the terminal or a pipe of the
    caller's; apply's manifest goes in whole. LC_ALL=en_US.UTF-8 as invoke set it:
    classify reads kubectl's English messages."""
    c, log = client
    c.get("ConfigMap", "x", "ns-a")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    c.apply(cm, "ns-a")
    calls = _calls(log)
    assert calls[0]["stdin"] == ""
    applied = [r for r in calls if r["argv"][0] == "apply"]
    assert applied and json.loads(applied[0]["stdin"])["metadata"]["name"] == "x"
    assert {r["lc_all"] for r in calls} == {"en_US.UTF-8"}


def test_no_shell_reads_the_argv() -> None:
    """Each word reaches the process as it is: nothing is expanded, split or run."""
    rc, out, err, timed_out = OcCluster._call(
        [
            sys.executable,
            "-c",
            "import json, sys; print(json.dumps(sys.argv[1:]))",
            "a b",
            "$(touch /nonexistent-mlenv)",
            "x; y",
            "*",
        ],
        None,
        10,
    )
    assert (rc, timed_out, err) == (0, False, "")
    assert json.loads(out) == ["a b", "$(touch /nonexistent-mlenv)", "x; y", "*"]


@pytest.mark.parametrize("timeout", [math.inf, 0])
def test_no_positive_finite_deadline_waits_for_the_end(timeout: float) -> None:
    """NO_TIMEOUT (launch's exec streams a whole run), and 0 as invoke read it: no limit."""
    rc, out, _err, timed_out = OcCluster._call(
        [sys.executable, "-c", "import time, sys; time.sleep(0.3); sys.exit(3)"], None, timeout
    )
    assert (rc, timed_out, out) == (3, False, "")
