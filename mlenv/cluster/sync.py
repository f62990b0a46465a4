"""``sync``: copy ``workspace/`` into every pod in parallel, and prove every file arrived.

In ``rwx`` mode every pod mounts the same claim, so one copy (to pod-0) is enough; in
per-pod mode each pod gets its own.

Sync never deletes by default: it adds and updates files, and whatever a pod wrote under
``/workspace`` that is not in the local tree (checkpoints, hostfiles, results) survives, as
it did in the ml-dev-env project this tool succeeds; a file in both becomes the local
version (``dry_run`` lists it as an update first). ``delete=True`` (``mlenv sync --delete``)
also removes pod files that are gone locally, but never the protected paths
(:func:`~mlenv.cluster.treehash.protected`: the top-level ``results/``; checkpoints at
any depth: ``checkpoint*``/``global_step*`` paths and ``.ckpt``/``.pt``/``.pth``/
``.safetensors`` files; dot-files and dot-directories; caches), and only after the copy succeeded. ``dry_run``
lists what would change, per pod, and changes nothing.

The plan and the check both come from a listing of the pod's tree (path → sha256,
:data:`~mlenv.cluster.treehash.LIST_SCRIPT` run through exec), so the oc and kubectl
clients behave the same and the fake cluster can model it faithfully. With kubectl a sync
is one exec (and one interpreter) per pod, planned while it runs
(:meth:`~mlenv.cluster.api.ClusterClient.copy_planned`): the pod lists its tree, the plan
is made from that here, the pod receives a tar of just the files it lacks or holds
otherwise (each such set packed once for every pod that needs it) and lists those files
again as they landed (the check). A sync with nothing to do lists once and writes nothing.
oc rsync plans for itself, so there the plan comes first, by a listing of its own: a first
sync is two processes per pod (list; copy and list), a sync with nothing to do one.
``--delete`` and ``--dry-run`` plan first on both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from mlenv.cluster import treehash
from mlenv.cluster.api import ClusterClient, PodView
from mlenv.cluster.pods import worker_pods
from mlenv.cluster.pool import bounded_map
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.errors import InfraError, InputError

REMOTE_DIR = "/workspace"
Say = Callable[[str], None]


class SyncMismatch(InfraError):
    """After the copy, some pod lacks a local file or holds a different version of it."""


@dataclass
class PodPlan:
    """What a sync changes in one pod (relative paths)."""

    pod: str
    add: list[str] = field(default_factory=list)
    update: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # in the pod only, left alone

    def summary(self) -> str:
        """``ml-dev-env-0: 2 added, 1 updated, 0 deleted, 3 kept``."""
        return (
            f"{self.pod}: {len(self.add)} added, {len(self.update)} updated, "
            f"{len(self.delete)} deleted, {len(self.kept)} kept (only in the pod)"
        )


@dataclass
class SyncReport:
    """Which pods were copied to and verified, and what changed in each."""

    copied: list[str]
    verified: list[str]
    digest: str
    plans: list[PodPlan] = field(default_factory=list)
    dry_run: bool = False


# The pod's tree as path -> sha256 (treehash.LIST_SCRIPT), by exec or after a copy.
_LIST = (*treehash.POD_PYTHON, treehash.LIST_SCRIPT, REMOTE_DIR)


def _listing(
    client: ClusterClient, cfg: ClusterConfig, pod: str, timeout: float | None
) -> dict[str, str]:
    return _parse_listing(pod, client.exec(pod, cfg.namespace, _LIST, timeout=timeout).stdout)


def _parse_listing(pod: str, stdout: str) -> dict[str, str]:
    try:
        data = json.loads(stdout or "{}")
    except json.JSONDecodeError:
        raise InfraError(
            f"{pod}: the tree listing printed no JSON: {stdout.strip()[:200]!r}"
        ) from None
    if not isinstance(data, dict):
        raise InfraError(f"{pod}: the tree listing is not a mapping")
    return {str(k): str(v) for k, v in data.items()}


def plan_pod(pod: str, local: dict[str, str], remote: dict[str, str], *, delete: bool) -> PodPlan:
    """Compare local and pod listings (path → sha256) into a :class:`PodPlan`."""
    out = PodPlan(pod)
    for rel in sorted(local):
        if rel not in remote:
            out.add.append(rel)
        elif remote[rel] != local[rel]:
            out.update.append(rel)
    for rel in sorted(set(remote) - set(local)):
        if treehash.excluded(rel):
            continue  # never synced, never compared (results/, caches)
        if delete and not treehash.protected(rel):
            out.delete.append(rel)
        else:
            out.kept.append(rel)
    return out


def sync(
    cfg: ClusterConfig,
    client: ClusterClient,
    local_dir: str,
    *,
    workers: int | None = None,
    timeout: float | None = None,
    delete: bool = False,
    dry_run: bool = False,
    say: Say = lambda _m: None,
) -> SyncReport:
    """Copy ``local_dir`` to every Running worker pod and verify every file arrived.

    At most ``workers`` pods at once (default: MLENV_FANOUT, 16; mlenv/cluster/pool.py),
    with a progress line (``synced 312/512``) on large fan-outs.
    ``delete`` removes pod files gone locally (protected paths never); ``dry_run`` only
    plans and says what would change. ``timeout`` bounds each copy and exec (None: the
    client's default); raises ExecTimeout, SyncMismatch, or InfraError when no pod runs.
    """
    if not os.path.isdir(local_dir):
        raise InputError(f"{local_dir}: not a directory (expected the workspace/ tree)")
    pods = [p for p in worker_pods(cfg, client) if p.phase == "Running"]
    if not pods:
        raise InfraError(f"no running pods of {cfg.name} in {cfg.namespace}: deploy first")
    targets = [p.name for p in (pods[:1] if cfg.storage.mode == "rwx" else pods)]
    tools = cfg.dev_tools.vscode or cfg.dev_tools.jupyter or cfg.dev_tools.tensorboard
    if tools and cfg.storage.mode != "rwx":
        # upstream's dev tools saw the synced code; here, per pod, they have their own volume
        say(
            "note: the dev tools' /workspace is their own volume (storage.mode: "
            "volumeClaimTemplates): sync fills the workers'; storage.mode: rwx shares one"
        )
    local = treehash.local_listing(local_dir)
    want = treehash.listing_digest(local)

    shared = " (shared rwx volume)" if cfg.storage.mode == "rwx" else ""
    # What each pod holds once its copy is done, where that is already known without
    # another exec: the pod's tree listed by the copy's own exec, or the plan's listing of
    # a pod that needed nothing. A pod that shares another's rwx volume, or had files
    # deleted after its copy, is listed again.
    after: dict[str, dict[str, str]] = {}
    if not dry_run and not delete and client.one_stream_copy:
        # one exec per pod where the client streams a tar (kubectl): the pod's listing,
        # the plan made from it here, the tar of just what it lacks, the check of those
        # files as they landed; oc rsync is planned first, as below
        def stream(pod: str) -> PodPlan:
            seen: list[tuple[dict[str, str], PodPlan]] = []

            def choose(listed: str) -> list[str]:
                before = _parse_listing(pod, listed)
                pl = plan_pod(pod, local, before, delete=False)
                seen.append((before, pl))
                return pl.add + pl.update

            landed = client.copy_planned(
                packs, pod, cfg.namespace, REMOTE_DIR, choose, timeout=timeout
            )
            before, pl = seen[0]
            # the files not sent were listed, as the local ones, moments before
            after[pod] = {**before, **_parse_listing(pod, landed)}
            return pl

        with client.packs(local_dir, list(local)) as packs:
            plans = bounded_map(stream, targets, bound=workers, progress=say, what="synced")
        for pl in plans:
            say(pl.summary() + shared)
        return _verify(cfg, client, pods, local, want, after, plans, workers, timeout, say)

    planned: dict[str, dict[str, str]] = {}

    def plan(pod: str) -> PodPlan:
        planned[pod] = _listing(client, cfg, pod, timeout)
        return plan_pod(pod, local, planned[pod], delete=delete)

    plans = bounded_map(plan, targets, bound=workers, progress=say, what="listed")
    if dry_run:
        for pl in plans:
            say(f"dry run: {pl.summary()}{shared}")
            for mark, paths in (("+", pl.add), ("~", pl.update), ("-", pl.delete)):
                for rel in paths:
                    say(f"  {mark} {treehash.shown(rel)}")
        return SyncReport([], [], want, plans, dry_run=True)

    def copy(pl: PodPlan) -> str:
        if pl.add or pl.update:
            listed = client.rsync(
                local_dir,
                pl.pod,
                cfg.namespace,
                REMOTE_DIR,
                exclude=list(treehash.RSYNC_EXCLUDES),
                timeout=timeout,
                then=() if pl.delete else _LIST,
            )
            if not pl.delete:
                after[pl.pod] = _parse_listing(pl.pod, listed)
        elif not pl.delete:
            after[pl.pod] = planned[pl.pod]
        # delete only after the copy succeeded: a failed copy must not leave fewer files
        if pl.delete:
            client.exec(
                pl.pod,
                cfg.namespace,
                [*treehash.POD_PYTHON, treehash.REMOVE_SCRIPT, REMOTE_DIR],
                stdin=json.dumps(pl.delete),
                timeout=timeout,
            )
        return pl.pod

    bounded_map(copy, plans, bound=workers, progress=say, what="synced")
    for pl in plans:
        say(pl.summary() + shared)
    return _verify(cfg, client, pods, local, want, after, plans, workers, timeout, say)


def _verify(
    cfg: ClusterConfig,
    client: ClusterClient,
    pods: list[PodView],
    local: dict[str, str],
    want: str,
    after: dict[str, dict[str, str]],
    plans: list[PodPlan],
    workers: int | None,
    timeout: float | None,
    say: Say,
) -> SyncReport:
    """Every pod holds every local file (``after``: listings already taken; the others are
    listed now); SyncMismatch naming what is missing where."""

    def check(pod: str) -> tuple[str, list[str]]:
        remote = after[pod] if pod in after else _listing(client, cfg, pod, timeout)
        return pod, [rel for rel, h in sorted(local.items()) if remote.get(rel) != h]

    got = bounded_map(check, [p.name for p in pods], bound=workers, progress=say, what="checked")
    bad = [
        f"{pod}: {len(missing)} file(s) missing or different: "
        f"{', '.join(treehash.shown(m) for m in missing[:5])}" + (" …" if len(missing) > 5 else "")
        for pod, missing in got
        if missing
    ]
    if bad:
        raise SyncMismatch(
            f"workspace incomplete after sync (local {want}):\n"
            + "\n".join(f"  - {b}" for b in bad)
        )
    say(
        f"verified {len(got)} pod(s): all {want.split()[0]} local files present "
        f"(sha256 {want.split()[1][:16]}…)"
    )
    return SyncReport([pl.pod for pl in plans], [p for p, _ in got], want, plans)


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


def watch(
    cfg: ClusterConfig,
    client: ClusterClient,
    local_dir: str,
    *,
    interval: float = 1.0,
    max_rounds: int | None = None,
    sleep: Callable[[float], None] | None = None,
    timeout: float | None = None,
    delete: bool = False,
    say: Say = lambda _m: None,
) -> int:
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
            sync(cfg, client, local_dir, timeout=timeout, delete=delete, say=say)
            syncs += 1
            last = now
        rounds += 1
        if max_rounds is None or rounds < max_rounds:
            pause(interval)
    return syncs
