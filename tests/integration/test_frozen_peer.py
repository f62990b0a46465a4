"""a frozen peer (sshd stopped, the kernel still completing TCP connects) is named
by preflight, and a peer lost after preflight stops the launch instead of hanging it."""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from mlenv.pod import launch, preflight


def listener(greeting: bytes | None) -> tuple[socket.socket, int]:
    """A listening socket on loopback; ``greeting`` None = never accept (a SIGSTOPped sshd:
    the kernel completes the handshake from the backlog, nobody ever speaks)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    if greeting is not None:

        def serve() -> None:
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                c.sendall(greeting)
                c.close()

        threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_frozen_peer_named_by_preflight() -> None:
    srv, port = listener(None)
    try:
        # the old check (a completed connect) passes a frozen sshd: that was the bug
        assert preflight.preflight([preflight.Peer("127.0.0.1", port)], deadline_s=1.0)[0].ok
        t = time.monotonic()
        res = preflight.preflight(
            [preflight.Peer("127.0.0.1", port, b"SSH-")],
            deadline_s=1.5,
            interval_s=0.2,
            connect_timeout_s=0.5,
        )
        took = time.monotonic() - t
    finally:
        srv.close()
    assert not res[0].ok and res[0].stage == "banner"
    assert "accepts connections but the server does not answer" in res[0].describe()
    assert took < 2.5  # bounded by the deadline, not by the frozen peer


def test_live_sshd_banner_passes_and_a_wrong_server_does_not() -> None:
    good, gport = listener(b"SSH-2.0-OpenSSH_9.2p1 Debian\r\n")
    bad, bport = listener(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        # one call each: a good peer ends the call as soon as it answers, so its deadline
        # can be long (1.5 s was once too short for the serving thread on the loaded
        # 2-core machine); the wrong server is retried up to its deadline
        (ok,) = preflight.preflight(
            [preflight.Peer("127.0.0.1", gport, b"SSH-")],
            deadline_s=30,
            interval_s=0.2,
            connect_timeout_s=0.5,
        )
        (wrong,) = preflight.preflight(
            [preflight.Peer("127.0.0.1", bport, b"SSH-")],
            deadline_s=1.5,
            interval_s=0.2,
            connect_timeout_s=0.5,
        )
    finally:
        good.close()
        bad.close()
    assert ok.ok, ok.describe()
    assert not wrong.ok and "unexpected greeting b'HTTP/1.1" in wrong.error


LAUNCHER = r"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[1], "w").write(str(child.pid))
print("[INFO] cmd = pdsh -S -f 1024 -w ml-dev-env-0,ml-dev-env-1 ...", flush=True)
print(sys.argv[2], flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_launch_stops_when_pdsh_loses_a_host(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    line = "pdsh@ml-dev-env-0: ml-dev-env-1: ssh exited with exit code 255"
    out = io.StringIO()
    t = time.monotonic()
    with pytest.raises(launch.PeerLost, match="lost ml-dev-env-1") as e:
        launch.run(
            [sys.executable, "-c", LAUNCHER, str(pidfile), line],
            dict(os.environ),
            out=out,
            lost_grace_s=1.0,
        )
    assert time.monotonic() - t < 20 and e.value.exit_code == 3
    assert line in out.getvalue()
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the launcher's children outlived the stop"


def test_a_job_that_ends_within_the_grace_keeps_its_own_exit_code() -> None:
    # the acceptance suite's rank 0 writes its ERROR report after a peer is lost: that
    # must finish, and its exit code (3) is the launch's
    script = (
        "import sys, time; print('pdsh@ml-dev-env-0: ml-dev-env-1: ssh exited with "
        "exit code 255', flush=True); time.sleep(0.5); sys.exit(3)"
    )
    out = io.StringIO()
    assert (
        launch.run([sys.executable, "-c", script], dict(os.environ), out=out, lost_grace_s=30) == 3
    )
    assert "stopping the launch in 30 s unless the job ends first" in out.getvalue()


def test_a_rank_failing_is_not_a_lost_peer(tmp_path: Path) -> None:
    script = (
        "import sys; print('pdsh@ml-dev-env-0: ml-dev-env-1: ssh exited with exit code 1');"
        " sys.exit(1)"
    )
    assert launch.run([sys.executable, "-c", script], dict(os.environ), out=io.StringIO()) == 1


# A job whose rank 0 wrote the verdict while another rank never ends (stopped, or hung in
# a collective on another node): it keeps printing, as a launcher's poll or a stuck
# rank's warnings do.
AFTER_VERDICT = r"""
import json, os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[1], "w").write(str(child.pid))
if sys.argv[3] == "write":
    with open(os.path.join(sys.argv[2], "results.json"), "w") as f:
        json.dump({"verdict": "ERROR", "reasons": ["ERROR: rank 1 (ml-dev-env-1) hung"]}, f)
while True:
    print("[INFO] still waiting for rank 1", flush=True)
    time.sleep(0.2)
"""


def test_a_rank_left_after_the_verdict_is_stopped_and_the_verdict_is_the_exit_code(
    tmp_path: Path,
) -> None:
    """`pod launch` waited for ever on a stopped rank's node after rank 0 had reported
    (its pdsh session to that node never ended); now the job gets the grace, then is
    stopped on every node, and the verdict's code is the launch's."""
    pidfile, out = tmp_path / "child.pid", io.StringIO()
    t = time.monotonic()
    rc = launch.run(
        [sys.executable, "-c", AFTER_VERDICT, str(pidfile), str(tmp_path), "write"],
        dict(os.environ),
        out=out,
        verdict_in=(str(tmp_path), time.time()),
        after_verdict_grace_s=1.0,
    )
    assert rc == 3 and time.monotonic() - t < 20, out.getvalue()[-500:]
    assert "rank 0 wrote the verdict (ERROR) 1 s ago and the job has not ended" in out.getvalue()
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the launcher's children outlived the stop"


def test_a_report_older_than_the_run_does_not_stop_it(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"verdict": "ERROR"}))
    os.utime(tmp_path / "results.json", (time.time() - 3600, time.time() - 3600))
    script = (
        "import sys, time\nfor _ in range(15):\n    print('working', flush=True); time.sleep(0.2)\n"
        "sys.exit(0)"
    )
    out = io.StringIO()
    assert (
        launch.run(
            [sys.executable, "-c", script],
            dict(os.environ),
            out=out,
            verdict_in=(str(tmp_path), time.time()),
            after_verdict_grace_s=0.5,
        )
        == 0
    )
    assert "wrote the verdict" not in out.getvalue()
