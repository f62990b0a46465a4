"""One container of a kube-tier pod, run as a container runtime runs it (the runtime's
shim: conmon for CRI-O, containerd-shim for containerd).

    python -I -S container.py RECORD LOG -- ARGV...

starts ARGV (confine.sh and the container's command: it enters the pod's root, network
and identity) in a session of its own, writes the record ``RECORD`` (JSON: this shim's
pid, the container process's pid and start time), copies the process's stdout and stderr
line by line into ``LOG`` in the CRI log format that kwok's log reader (``kubectl logs``)
parses, and when the process ends writes ``RECORD`` again with its exit code and finish
time, as a kubelet reads a container's state from its runtime.

The shim runs detached from the pod-root controller (its own session), so the container
outlives a restart of the controller, which adopts it again from the record. It imports
nothing but the standard library: it is started once per container start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import IO

# A line longer than this is written as partial records ("P"), as CRI runtimes split
# them (16 KiB in CRI-O and containerd), then its last part "F".
MAX_LINE = 16 * 1024


def stamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e9):09d}Z"


def write_record(path: str, record: dict[str, object]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def pump(src: IO[bytes], stream: str, log: IO[bytes], lock: threading.Lock) -> None:
    """Copy one of the process's streams into the log, a CRI record per line."""
    while True:
        line = src.readline(MAX_LINE)
        if not line:
            return
        full = line.endswith(b"\n")
        text = line[:-1] if full else line
        tag = b"F" if full or len(line) < MAX_LINE else b"P"
        with lock:
            log.write(stamp().encode() + b" " + stream.encode() + b" " + tag + b" " + text + b"\n")
            log.flush()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        raise SystemExit("usage: container.py RECORD LOG -- ARGV...")
    record, logfile, command = argv[0], argv[1], argv[3:]
    started = time.time()
    with open(logfile, "ab") as log:
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                restore_signals=True,
            )
        except OSError as e:
            # as a runtime reports a command it cannot start (StartError, exit 128)
            log.write(f"{stamp()} stderr F {e}\n".encode())
            write_record(
                record,
                {
                    "shim": os.getpid(),
                    "pid": 0,
                    "started": started,
                    "finished": time.time(),
                    "exit_code": 128,
                    "reason": "StartError",
                    "message": str(e),
                },
            )
            return 0
        write_record(record, {"shim": os.getpid(), "pid": proc.pid, "started": started})
        lock = threading.Lock()
        threads = [
            threading.Thread(target=pump, args=(proc.stdout, "stdout", log, lock), daemon=True),
            threading.Thread(target=pump, args=(proc.stderr, "stderr", log, lock), daemon=True),
        ]
        for t in threads:
            t.start()
        code = proc.wait()
        for t in threads:
            # a daemon the container left holds the pipe open: its output is not the
            # container's any more once the container has ended
            t.join(timeout=1.0)
    # a process killed by a signal reads as 128 + the signal, as runtimes report it
    exit_code = code if code >= 0 else 128 - code
    write_record(
        record,
        {
            "shim": os.getpid(),
            "pid": proc.pid,
            "started": started,
            "finished": time.time(),
            "exit_code": exit_code,
            "signal": -code if code < 0 else 0,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
