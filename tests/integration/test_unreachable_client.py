"""Every cluster verb against an API server that is not there, through the REAL
``oc``/``kubectl`` client binary on PATH (no fake: the CLI's own client factory):

- a closed port (connection refused),
- a black-hole listener this test starts (accepts TCP, never answers: TLS never starts),
- no kubeconfig at all.

Each run must exit 3 with one ``error:`` line naming the server (or the login hint
first), no raw client chatter (``E1122 memcache.go…``), within a bounded time.

Integration tier: real client processes, each judged against a wall-clock limit. What the
probe makes of each kind of client answer is ``tests/cli/test_unreachable.py`` (a
stand-in client, in process).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = shutil.which("oc") or shutil.which("kubectl")
needs_client = pytest.mark.skipif(
    CLIENT is None, reason="needs a real oc or kubectl client on PATH"
)

# Every verb that talks to a cluster, with arguments that would otherwise work.
VERBS = [
    ["deploy", "barcelona", "--timeout", "60"],
    ["status", "barcelona"],
    ["sync", "barcelona"],
    ["shell", "barcelona"],
    ["logs", "barcelona", "--tail", "5"],
    ["port-forward", "barcelona", "--debug"],
    ["launch", "barcelona"],
    ["teardown", "barcelona"],
    ["build", "barcelona"],
    ["url", "barcelona", "vscode"],
    ["gpu-info", "barcelona"],
    ["discover", "probe-target", "--dry-run"],
]


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{server}"}}
contexts:
- name: c
  context: {{cluster: c, user: u, namespace: default}}
current-context: c
users:
- name: u
  user: {{token: not-a-real-token}}
""")
    return path


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A listener that accepts every connection and never sends a byte."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    srv.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            held.append(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield int(srv.getsockname()[1])
    stop.set()
    t.join(timeout=2)
    for c in held:
        c.close()
    srv.close()


def _env(tmp_path: Path, kubeconfig: Path | None, timeout: float) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MLENV_") and k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        MLENV_ROOT=str(ROOT),
        MLENV_STATE_DIR=str(tmp_path / "state"),
        MLENV_API_TIMEOUT_S=str(timeout),
    )
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def _mlenv(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "mlenv", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return r, time.monotonic() - t0


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("error:")]


def _run_all(
    env: dict[str, str],
) -> list[tuple[list[str], subprocess.CompletedProcess[str], float]]:
    # in parallel: the processes mostly wait on the network, not the CPU
    with ThreadPoolExecutor(max_workers=len(VERBS)) as pool:
        results = list(pool.map(lambda a: (a, *_mlenv(a, env)), VERBS))
    return results


def _run_all_in_process(
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[list[str], subprocess.CompletedProcess[str], float]]:
    """The same verbs through CliRunner, one after the other (no Python start-up per verb:
    the cases where the client answers at once); the client is still the real binary."""
    from typer.testing import CliRunner

    from mlenv.cli.app import app

    for k in [
        k
        for k in os.environ
        if k.startswith("MLENV_") or k in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    ]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = []
    for args in VERBS:
        t0 = time.monotonic()
        r = CliRunner().invoke(app, args)
        out.append(
            (
                args,
                subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr),
                time.monotonic() - t0,
            )
        )
    return out


def _check_one_line(args: list[str], r: subprocess.CompletedProcess[str], server: str) -> None:
    what = " ".join(args)
    assert r.returncode == 3, f"{what}: exit {r.returncode}\n{r.stderr}"
    errors = _errors(r.stderr)
    assert len(errors) == 1 and server in errors[0], f"{what}: {r.stderr!r}"
    others = [ln for ln in r.stderr.splitlines() if not ln.startswith("error:")]
    # the only other line allowed is the progress notice about the same server
    assert all(ln == f"contacting {server}…" for ln in others), f"{what}: {r.stderr!r}"
    assert "memcache" not in r.stderr and "E11" not in r.stderr
    assert r.stdout == "", f"{what}: printed {r.stdout!r} before failing"


@needs_client
def test_refused_connection_is_exit_3_and_one_line_for_every_verb(
    tmp_path, closed_port, monkeypatch
) -> None:
    server = f"https://127.0.0.1:{closed_port}"
    env = _env(tmp_path, _kubeconfig(tmp_path / "kc", server), timeout=5)
    for args, r, wall in _run_all_in_process(env, monkeypatch):
        _check_one_line(args, r, server)
        assert "connection refused" in r.stderr
        assert wall < 60, f"{' '.join(args)} took {wall:.1f} s on a refused connection"


@needs_client
def test_hanging_server_is_exit_3_within_the_timeout_for_every_verb(tmp_path, black_hole) -> None:
    server = f"https://127.0.0.1:{black_hole}"
    timeout = 1.5
    env = _env(tmp_path, _kubeconfig(tmp_path / "kc", server), timeout=timeout)
    for args, r, wall in _run_all(env):
        _check_one_line(args, r, server)
        assert f"no answer within {timeout:g} s" in _errors(r.stderr)[0]
        # two client calls (config view, the probe) each bounded; generous for a loaded
        # 2-core machine and for version-dispatching kubectl wrappers that add seconds
        assert wall < 60, f"{' '.join(args)} took {wall:.1f} s against a silent server"


@needs_client
def test_slow_server_says_contacting_after_2_s_then_fails(tmp_path, black_hole) -> None:
    server = f"https://127.0.0.1:{black_hole}"
    env = _env(tmp_path, _kubeconfig(tmp_path / "kc", server), timeout=3)
    r, wall = _mlenv(["status", "barcelona"], env)
    _check_one_line(["status"], r, server)
    assert r.stderr.splitlines()[0] == f"contacting {server}…"
    assert wall >= 3


@needs_client
def test_no_kubeconfig_gives_the_login_hint_first_for_every_verb(tmp_path, monkeypatch) -> None:
    env = _env(tmp_path, None, timeout=5)  # empty HOME: no ~/.kube/config either
    for args, r, _ in _run_all_in_process(env, monkeypatch):
        assert r.returncode == 3, f"{args}: {r.stderr}"
        lines = r.stderr.splitlines()
        assert len(lines) == 1, f"{args}: {r.stderr!r}"
        assert lines[0].startswith("error: not logged in: run `oc login"), lines[0]
        assert "localhost:8080" not in r.stderr


@needs_client
def test_request_timeout_flag_and_env_are_validated(tmp_path, closed_port) -> None:
    server = f"https://127.0.0.1:{closed_port}"
    env = _env(tmp_path, _kubeconfig(tmp_path / "kc", server), timeout=5)
    env["MLENV_API_TIMEOUT_S"] = "soon"
    r, _ = _mlenv(["status", "barcelona"], env)
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: MLENV_API_TIMEOUT_S=soon: expected a number of seconds between 0 and 86400"
    )
    env["MLENV_API_TIMEOUT_S"] = "5"
    r, _ = _mlenv(["status", "barcelona", "--request-timeout", "-1"], env)
    assert r.returncode == 2 and "--request-timeout" in r.stderr


@needs_client
def test_unreadable_kubeconfig_flag_is_exit_2(tmp_path) -> None:
    env = _env(tmp_path, None, timeout=5)
    r, _ = _mlenv(["status", "barcelona", "--kubeconfig", str(tmp_path / "missing")], env)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"error: kubeconfig {tmp_path / 'missing'} (--kubeconfig) is "
        "unreadable: No such file or directory"
    )


@needs_client
def test_unknown_context_is_exit_2_naming_it(tmp_path, closed_port) -> None:
    env = _env(tmp_path, _kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{closed_port}"), 5)
    r, _ = _mlenv(["status", "barcelona", "--context", "nope"], env)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.splitlines()) == 1 and "nope" in r.stderr


@needs_client
def test_kubeconfig_without_a_context_names_the_file(tmp_path) -> None:
    empty = tmp_path / "empty-kubeconfig"
    empty.write_text("apiVersion: v1\nkind: Config\n")
    env = _env(tmp_path, None, timeout=5)
    r, _ = _mlenv(["status", "barcelona", "--kubeconfig", str(empty)], env)
    assert r.returncode == 3
    assert r.stderr.splitlines() == [
        "error: not logged in: run `oc login <server>` (or `kubectl config use-context`) or "
        f"set KUBECONFIG (no current context in {empty})"
    ]


# -- a half-up API server ---------------------------------------------------------


def _real_kubectl() -> str | None:
    """The kubectl the kube tier builds (same minor as its plane), else the machine's."""
    built = Path.home() / ".cache/mlenv/kube-probe/bin/kubectl"
    if built.is_file() and os.access(built, os.X_OK):
        return str(built)
    return shutil.which("kubectl")


KUBECTL = _real_kubectl()


@pytest.fixture
def half_up() -> Iterator[tuple[int, list[str]]]:
    """An HTTP API server that answers ``GET /version`` and never answers anything else
    (an apiserver whose etcd is gone: the health endpoints respond, requests hang).
    Yields its port and the paths it was asked for."""
    import http.server
    import json as _json
    import socketserver

    asked: list[str] = []
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            asked.append(self.path)
            if self.path.split("?")[0] == "/version":
                body = _json.dumps({"major": "1", "minor": "30", "gitVersion": "v1.30.0"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            stop.wait(600)  # hang: the client's own limit has to end it

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        def log_message(self, *_a: object) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield int(srv.server_address[1]), asked
    stop.set()
    srv.shutdown()
    srv.server_close()


@pytest.mark.skipif(
    KUBECTL is None,
    reason="needs a real kubectl (the kube tier's "
    "~/.cache/mlenv/kube-probe/bin/kubectl, else one on PATH)",
)
def test_half_up_server_every_verb_exits_3_within_the_timeout(
    tmp_path,
    half_up,
    monkeypatch,
) -> None:
    """/version answers, everything else hangs: once the probe passed and each later
    call had 30 s of its own (kubectl retried discovery five times): 122-152 s and raw
    kubectl text. Now every call is bounded by the one setting and the verb is exit 3,
    one line naming the server, within the timeout plus 5 s (measured in process: no
    Python start-up in the figure)."""
    port, asked = half_up
    server = f"http://127.0.0.1:{port}"
    timeout = 2.0
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kubectl").symlink_to(str(KUBECTL))
    env = _env(tmp_path, _kubeconfig(tmp_path / "kc", server), timeout=timeout)
    env["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    results = _run_all_in_process(env, monkeypatch)
    assert any(p.split("?")[0] == "/version" for p in asked)  # the probe was answered
    assert any(p.split("?")[0] != "/version" for p in asked)  # and a later call hung
    for args, r, wall in results:
        what = " ".join(args)
        assert r.returncode == 3, f"{what}: exit {r.returncode}\n{r.stderr}"
        errors = _errors(r.stderr)
        assert len(errors) == 1 and server in errors[0], f"{what}: {r.stderr!r}"
        assert f"no answer within {timeout:g} s" in errors[0], f"{what}: {r.stderr!r}"
        assert "memcache" not in r.stderr and "E11" not in r.stderr, f"{what}: {r.stderr!r}"
        assert wall < timeout + 5, f"{what} took {wall:.1f} s against a half-up server"
