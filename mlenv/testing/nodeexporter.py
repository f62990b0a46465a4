"""node_exporter for the metrics tests: built from its Go module, pinned, cached outside the checkout.

``github.com/prometheus/node_exporter`` at :data:`VERSION` is built with ``go install`` into
``<cache>/node_exporter-<version>/bin/node_exporter``, ``<cache>`` being
``$MLENV_NODE_EXPORTER_CACHE`` or ``~/.cache/mlenv`` (beside the kube tier's binaries,
mlenv/testing/kube/build.py). A binary already there is never rebuilt; a build goes to a
temporary folder first and is renamed into place, so an interrupted build leaves nothing
that looks finished. The Go module cache makes a rebuild after a version bump fast.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

VERSION = "v1.12.1"
MODULE = "github.com/prometheus/node_exporter"


class BuildError(RuntimeError):
    """go is missing or the build failed; the message names the command and its output tail."""


def cache_root() -> Path:
    env = os.environ.get("MLENV_NODE_EXPORTER_CACHE", "").strip()
    return Path(env) if env else Path.home() / ".cache" / "mlenv"


def binary() -> Path:
    """Where the built node_exporter lives (it may not be built yet)."""
    return cache_root() / f"node_exporter-{VERSION}" / "bin" / "node_exporter"


def build(timeout_s: float = 1800.0) -> Path:
    """The node_exporter binary, built once (minutes on two cores) and cached.

    Raises BuildError when ``go`` is not on PATH or ``go install`` fails.
    """
    out = binary()
    if out.is_file():
        return out
    go = shutil.which("go")
    if go is None:
        raise BuildError("go is not on PATH: node_exporter is built from its Go module")
    out.parent.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test workers build it once
        if out.is_file():
            return out
        tmp = out.parent.parent / "bin.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        log = out.parent.parent / "build.log"
        # stamped like a release build, so `node_exporter --version` names what was built
        stamp = f"-X github.com/prometheus/common/version.Version={VERSION.removeprefix('v')}"
        argv = [go, "install", f"-ldflags={stamp}", f"{MODULE}@{VERSION}"]
        with open(log, "wb") as f:
            rc = subprocess.run(
                argv,
                stdout=f,
                stderr=subprocess.STDOUT,
                env={**os.environ, "GOBIN": str(tmp)},
                timeout=timeout_s,
                check=False,
            ).returncode
        if rc != 0 or not (tmp / "node_exporter").is_file():
            tail = log.read_text(errors="replace").strip().splitlines()[-10:]
            raise BuildError(f"{' '.join(argv)} failed (exit {rc}); see {log}:\n" + "\n".join(tail))
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / "node_exporter", out)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(textfile_dir: Path, timeout_s: float = 30.0) -> Iterator[str]:
    """Run node_exporter with only its textfile collector reading ``textfile_dir``; yields
    its ``/metrics`` URL once it answers, stops it (SIGTERM, then SIGKILL) afterwards."""
    port = free_port()
    argv = [
        str(build()),
        f"--web.listen-address=127.0.0.1:{port}",
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={textfile_dir}",
    ]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if p.poll() is not None:
                err = p.stderr.read().decode(errors="replace") if p.stderr else ""
                raise RuntimeError(f"node_exporter exited {p.returncode}: {err[-2000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2.0):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"node_exporter did not answer on {url} in {timeout_s:g} s"
                    ) from None
                time.sleep(0.1)
        yield url
    finally:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stderr:
            p.stderr.close()
