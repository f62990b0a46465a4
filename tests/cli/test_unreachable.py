"""What the API probe makes of the client's answers: a stand-in ``kubectl`` on PATH that
answers the probe with the stderr kubectl 1.32 prints, through the CLI in process.

The real client against servers that are not there (a closed port, a silent listener, a
half-up server, no kubeconfig) is ``tests/integration/test_unreachable_client.py``: real
client processes and wall-clock limits.
"""

from __future__ import annotations

import sys

import pytest

_STANDIN = """#!{python}
import sys
argv = sys.argv[1:]
if "view" in argv:
    print("https://api.example.test:6443", end="")
elif "--raw=/version" in argv:
    sys.stderr.write({stderr!r})
    sys.exit({rc})
"""


@pytest.mark.parametrize(
    "stderr,rc,want",
    [
        (
            "Unable to connect to the server: dial tcp: lookup api.example.test on 10.0.0.2:53: "
            "no such host\n",
            1,
            "error: cannot reach the API server https://api.example.test:6443: no such host (DNS)",
        ),
        (
            "Unable to connect to the server: tls: failed to verify certificate: x509: certificate "
            "signed by unknown authority\n",
            1,
            "error: cannot reach the API server https://api.example.test:6443: TLS certificate not "
            "trusted: Unable to connect to the server: tls: failed to verify certificate: x509: "
            "certificate signed by unknown authority",
        ),
        (
            "error: You must be logged in to the server (Unauthorized)\n",
            1,
            "error: not logged in to https://api.example.test:6443 (the credentials were refused): "
            "run `oc login <server>` (or `kubectl config use-context`) or set KUBECONFIG",
        ),
        (
            'Error from server (Forbidden): forbidden: User "system:anonymous" cannot get path '
            '"/version"\n',
            1,
            None,
        ),  # the server answered: reachable, the verb goes on
    ],
)
def test_probe_answers_become_one_line(
    tmp_path, monkeypatch, stderr: str, rc: int, want: str | None
) -> None:
    from _fakeenv import run

    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "kubectl"
    exe.write_text(_STANDIN.format(python=sys.executable, stderr=stderr, rc=rc))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    r = run(["-q", "status", "barcelona"], None, monkeypatch)
    if want is None:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 3, r.output
    assert r.stderr.splitlines() == [want]


_WAITS_FOR_A_READ = """#!{python}
import os, sys, time
argv = sys.argv[1:]
mark = {mark!r}
if "view" in argv:
    print("https://api.example.test:6443", end="")
elif "--raw=/version" in argv:
    for _ in range(400):
        if os.path.exists(mark):
            print("{{}}")
            sys.exit(0)
        time.sleep(0.05)
    sys.stderr.write("Unable to connect to the server: no read came while /version waited\\n")
    sys.exit(1)
else:
    open(mark, "w").close()
    print('{{"items": []}}')
"""


def test_status_reads_beside_the_probe(tmp_path, monkeypatch) -> None:
    """status only reads, so its reads start beside the server probe instead of after it
    (one client process's time less): this stand-in answers /version only once a read
    has started (probed first, status waited 20 s for it and failed)."""
    from _fakeenv import run

    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "kubectl"
    exe.write_text(_WAITS_FOR_A_READ.format(python=sys.executable, mark=str(tmp_path / "read")))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    r = run(["-q", "status", "barcelona"], None, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "no pods" in r.stdout
