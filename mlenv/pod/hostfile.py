"""The DeepSpeed hostfile: one ``<host> slots=<n>`` line per pod, in rank order."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from mlenv.errors import InfraError, InputError

_LINE = re.compile(r"^(\S+)\s+slots=(\d+)\s*$")


def count_gpus(env: Mapping[str, str], dev_glob: str = "/dev/nvidia[0-9]*") -> int:
    """GPUs visible to this pod: ``nvidia-smi -L`` lines, else ``/dev/nvidiaN`` nodes.

    ``NVIDIA_VISIBLE_DEVICES`` of ``void``/``none`` (the runtime's "no GPU") counts 0.
    """
    if env.get("NVIDIA_VISIBLE_DEVICES", "").strip() in ("void", "none"):
        return 0
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "-L"], capture_output=True, text=True, timeout=20, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0:
            n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
            if n:
                return n
    return len(glob.glob(dev_glob))


def slots_per_node(gpus_per_node: int, detected_gpus: int, env: Mapping[str, str]) -> int:
    """Ranks per pod: the configured GPU count, else detected GPUs, else CPU slots.

    CPU slots come from ``MLENV_CPU_SLOTS`` (default 1): a GPU-less pod still runs ranks.
    """
    if detected_gpus > 0:
        return gpus_per_node if gpus_per_node > 0 else detected_gpus
    raw = env.get("MLENV_CPU_SLOTS", "").strip() or "1"
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"MLENV_CPU_SLOTS={raw!r}: expected an integer >= 1")
    return int(raw)


def render_hostfile(hosts: list[str], slots: int) -> str:
    """The hostfile text for ``hosts`` with ``slots`` ranks each."""
    return "".join(f"{h} slots={slots}\n" for h in hosts)


class NotInitialised(InfraError):
    """A file ``pod init`` writes is not there yet: the pod's entry point has not finished
    (a launch right after a deploy, or after a pod was replaced). Not the user's input:
    waiting, or the pod's log, says why (exit 3)."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"the pod is not initialised yet ({path} is missing: its entry point's "
            "'pod init' has not finished): wait until `mlenv status` shows every pod Ready, "
            "and read `mlenv logs` if it does not"
        )


def parse_hostfile(path: str) -> list[tuple[str, int]]:
    """``[(host, slots), …]`` from ``path``; raises InputError naming file and line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise NotInitialised(path) from None
    except OSError as e:
        raise InputError(
            f"{path}: cannot read the hostfile ({e.strerror}); run 'pod init' first"
        ) from None
    out: list[tuple[str, int]] = []
    for no, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _LINE.match(s)
        if not m or int(m.group(2)) < 1:
            raise InputError(f"{path}:{no}: expected '<host> slots=<n>' with n >= 1, got {s!r}")
        if any(h == m.group(1) for h, _ in out):
            raise InputError(f"{path}:{no}: host {m.group(1)!r} listed twice")
        out.append((m.group(1), int(m.group(2))))
    if not out:
        raise InputError(f"{path}: the hostfile lists no hosts")
    return out


def write_text(path: str, text: str, mode: int = 0o644) -> None:
    """Write ``text`` atomically (a reader never sees half a file)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
