"""``sync``: copy ``workspace/`` into every pod in parallel and prove they all match.

In ``rwx`` mode every pod mounts the same claim, so one copy (to pod-0) is enough; in
per-pod mode each pod gets its own. ``--delete`` semantics: files removed locally are
removed in the pods (the top-level ``results/`` is never touched: runs write there). Afterwards the
tree checksum (:mod:`mlenv.cluster.treehash`) is computed in each pod through exec and
compared with the local one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mlenv.cluster import treehash
from mlenv.cluster.api import Cluster
from mlenv.cluster.deploy import worker_pods
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.errors import InfraError, InputError

REMOTE_DIR = "/workspace"
Say = Callable[[str], None]


class SyncMismatch(InfraError):
    """After the copy, some pod's tree differs from the local one."""


@dataclass
class SyncReport:
    """Which pods were copied to and which were verified."""

    copied: list[str]
    verified: list[str]
    digest: str


def sync(cfg: ClusterConfig, client: Cluster, local_dir: str, *, workers: int = 8,
         timeout: float | None = None, say: Say = lambda _m: None) -> SyncReport:
    """Copy ``local_dir`` to every Running worker pod and verify the checksums.

    ``timeout`` bounds each rsync and checksum exec (None: the client's default);
    raises ExecTimeout, SyncMismatch, or InfraError when no pod runs.
    """
    if not os.path.isdir(local_dir):
        raise InputError(f"{local_dir}: not a directory (expected the workspace/ tree)")
    pods = [p for p in worker_pods(cfg, client) if p.phase == "Running"]
    if not pods:
        raise InfraError(f"no running pods of {cfg.name} in {cfg.namespace}: deploy first")
    targets = pods[:1] if cfg.storage.mode == "rwx" else pods
    excl = list(treehash.RSYNC_EXCLUDES)

    def copy(pod: str) -> str:
        client.rsync(local_dir, pod, cfg.namespace, REMOTE_DIR, delete=True, exclude=excl,
                     timeout=timeout)
        return pod

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as pool:
        copied = list(pool.map(copy, [p.name for p in targets]))
    say(f"copied {local_dir} to {', '.join(copied)}" +
        (" (shared rwx volume)" if cfg.storage.mode == "rwx" else ""))
    want = treehash.digest_files(treehash.local_files(local_dir))

    def check(pod: str) -> tuple[str, str]:
        res = client.exec(pod, cfg.namespace, ["python3", "-c", treehash.SCRIPT, REMOTE_DIR],
                          timeout=timeout)
        return pod, res.stdout.strip()

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(pods)))) as pool:
        got = list(pool.map(check, [p.name for p in pods]))
    bad = [f"{pod}: {d or 'no output'}" for pod, d in got if d != want]
    if bad:
        raise SyncMismatch(f"workspace differs after sync (local {want}):\n"
                           + "\n".join(f"  - {b}" for b in bad))
    say(f"verified {len(got)} pod(s): {want.split()[0]} files, sha256 {want.split()[1][:16]}…")
    return SyncReport(copied, [p for p, _ in got], want)


def tree_mtimes(root: str) -> dict[str, tuple[int, int]]:
    """Path → (mtime in ns, size) of the tree, to notice additions, edits and deletions."""
    out: dict[str, tuple[int, int]] = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if not treehash.excluded(rel):
                try:
                    st = os.stat(p)
                    out[rel] = (st.st_mtime_ns, st.st_size)
                except FileNotFoundError:  # deleted while walking
                    continue
    return out


def watch(cfg: ClusterConfig, client: Cluster, local_dir: str, *, interval: float = 1.0,
          max_rounds: int | None = None, sleep: Callable[[float], None] | None = None,
          timeout: float | None = None, say: Say = lambda _m: None) -> int:
    """Re-sync whenever the tree changes; returns the number of syncs (Ctrl-C stops it).

    ``sleep`` is injectable so a test can change the tree between polls without waiting.
    """
    import time

    pause = sleep or time.sleep
    syncs = 0
    last: dict[str, tuple[int, int]] | None = None
    rounds = 0
    while max_rounds is None or rounds < max_rounds:
        now = tree_mtimes(local_dir)
        if now != last:
            sync(cfg, client, local_dir, timeout=timeout, say=say)
            syncs += 1
            last = now
        rounds += 1
        if max_rounds is None or rounds < max_rounds:
            pause(interval)
    return syncs
