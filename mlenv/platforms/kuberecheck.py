"""``mlenv recheck RUN`` on Kubernetes/OpenShift: the suite once more on each node the
run quarantined, in a Pod on that node, recorded as a later run of the same cluster.

A quarantined node carries our ``NoSchedule`` taint, which the workers never tolerate,
so no ordinary run can measure it again. Per node, in order:

1. the re-check Pod (:func:`mlenv.render.recheck.node_pod`) is created from the workers'
   pod template (the live StatefulSet's, else the config's), pinned to the node and
   tolerating our taint and nothing broader. A Pod of that name already there means a
   re-check of that node is under way: refused (exit 3), nothing created;
2. once it runs, the suite runs in it through exec (the pod launcher's ``run-torchrun``
   in a world of this one node, as many ranks as a worker runs there), its output
   streamed;
3. its report folder is copied home and imported into the cluster's history, as
   ``mlenv history --fetch`` imports pod-0's runs: ``mlenv release RUN --after <id>``
   then has a later run of the same cluster that measured the node;
4. the Pod is deleted, whatever happened.

A Pod that does not start within the wait (a foreign taint on the node, a missing GPU)
is named with the scheduler's reason: that node was not re-checked (exit 3).
Exit: 0 every node PASSed, 1 one FAILed (its quarantine stays), 3 one could not be
re-checked.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlenv import contract
from mlenv.errors import EXIT_ERROR, EXIT_FAIL, EXIT_OK, InfraError

if TYPE_CHECKING:
    from mlenv.cluster.api import ClusterClient
    from mlenv.config.model import Cluster
    from mlenv.platforms.base import Session

POLL_S = 1.0
# The re-check Pod's grace period (render/recheck.py) and a margin for the kubelet.
GONE_S = 60.0


def worker_template(cfg: Cluster, client: ClusterClient) -> dict[str, Any]:
    """The live worker object's pod template (what the workers run now), else the one the
    config renders (nothing deployed: the re-check still measures the node)."""
    from mlenv.render.names import workload
    from mlenv.render.workload import workers

    wl = workload(cfg)
    live = client.get(wl.kind, wl.name, cfg.namespace)
    template = wl.pod_template(live) if live else None
    if isinstance(template, dict) and template.get("spec"):
        return template
    rendered = next(o for o in workers(cfg, cfg.own_mode, 1) if o.get("kind") in wl.kinds)
    return wl.pod_template(rendered)


def _pending_reason(client: ClusterClient, pod: dict[str, Any] | None, ns: str, name: str) -> str:
    """Why the Pod is not running: the scheduler's or kubelet's last word about it."""
    if pod is None:
        return "the Pod is gone"
    status = pod.get("status") or {}
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("message"):
            return str(c["message"])
    warnings = client.events(ns, "Pod", name, warnings=True)
    if warnings:
        return warnings[-1].message
    return f"phase {status.get('phase') or 'Pending'}"


def _wait_running(client: ClusterClient, ns: str, name: str, node: str, wait_s: float) -> None:
    """Until the Pod runs and is ready (exec reaches it); InfraError naming why not."""
    end = client.monotonic() + wait_s
    while True:
        pod = client.get("Pod", name, ns)
        status = (pod or {}).get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if status.get("phase") == "Running" and ready:
            return
        if status.get("phase") in ("Succeeded", "Failed") or client.monotonic() >= end:
            raise InfraError(
                f"node {node} not re-checked: pod {name} did not start within {wait_s:g} s "
                f"({_pending_reason(client, pod, ns, name)})"
            )
        client.pause(POLL_S)


def _wait_gone(client: ClusterClient, ns: str, name: str, wait_s: float) -> None:
    """Until the Pod is deleted for good, at most ``wait_s`` (a Pod left is said by the
    next re-check of that node, which finds it)."""
    end = client.monotonic() + wait_s
    while client.get("Pod", name, ns) is not None and client.monotonic() < end:
        client.pause(POLL_S)


def _bring_home(
    cfg: Cluster,
    client: ClusterClient,
    name: str,
    run_id: str,
    history_root: Path,
) -> dict[str, Any]:
    """Copy the run folder out of the Pod into the cluster's history; its results doc."""
    from mlenv.acceptance.records import history
    from mlenv.cluster import fetch
    from mlenv.render.recheck import NODE_DIR

    files = fetch.read_run(client, cfg.namespace, name, run_id, root=NODE_DIR)
    with tempfile.TemporaryDirectory(prefix="mlenv-recheck-") as tmp:
        folder = Path(tmp) / run_id
        for rel, data in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        rec: Any = None
        if (folder / fetch.RECORD_JSON).is_file():
            try:
                rec = json.loads((folder / fetch.RECORD_JSON).read_text(encoding="utf-8"))
            except ValueError:
                rec = None
        if not isinstance(rec, dict):
            rec = history.record_from_folder(folder, cfg.name)
        if rec is None or rec.get("run_id") != run_id or rec.get("cluster") != cfg.name:
            raise InfraError(
                f"re-check run {run_id} in pod {name}: no record of this run of cluster "
                f"{cfg.name} (the suite stopped before writing its results?)"
            )
        history.import_records(cfg.name, [(rec, folder)], history_root)
    doc = contract.read_results(history_root / cfg.name / run_id)
    return doc if isinstance(doc, dict) else {}


def recheck_node(
    cfg: Cluster,
    s: Session,
    client: ClusterClient,
    node: str,
    template: dict[str, Any],
    *,
    quarantined_by: str,
    profile: str,
    suite_args: list[str],
    history_root: Path,
    wait_s: float,
) -> tuple[str, str]:
    """Re-check one node; (its status in the re-check run, that run's id). InfraError
    when it could not be re-checked (the Pod is deleted either way, unless it was not ours)."""
    from mlenv.render import recheck

    pod = recheck.node_pod(cfg, node, template, profile=profile)
    name = pod["metadata"]["name"]
    ns = cfg.namespace
    before = client.get("Pod", name, ns)
    if before is not None and (before.get("metadata") or {}).get("deletionTimestamp"):
        _wait_gone(client, ns, name, wait_s)  # an earlier re-check's Pod, still going away
        before = client.get("Pod", name, ns)
    if before is not None:
        raise InfraError(
            f"a re-check of node {node} is in progress (pod {name} in {ns}): nothing started "
            f"(wait for it to end, or delete that pod if it is left over)"
        )
    client.apply(pod, ns)
    try:
        _wait_running(client, ns, name, node, wait_s)
        run_id = contract.new_run_id()
        s.say(
            f"re-check of node {node} (quarantined by run {quarantined_by}): run {run_id} in pod {name}"
        )
        suite = recheck.node_suite_argv(run_id, profile=profile, suite_args=suite_args)
        rc = client.exec_stream(
            name, ns, suite, s.say, timeout=float(recheck.PROFILE_BOUND_S[profile])
        )
        doc = _bring_home(cfg, client, name, run_id, history_root)
    finally:
        client.delete("Pod", name, ns)
        # gone before the next re-check of this node looks for it (or reads "in progress")
        _wait_gone(client, ns, name, GONE_S)
    status = contract.node_status(doc, node)
    if status is None:
        s.warn(
            f"warning: re-check run {run_id} (exit {rc}) has no verdict for node {node}: "
            "it does not count as evidence for release"
        )
        return "UNKNOWN", run_id
    return status, run_id


def recheck(
    cfg: Cluster,
    s: Session,
    client: ClusterClient,
    *,
    run_id: str,
    nodes: list[str],
    profile: str,
    suite_args: list[str],
    history_root: Path,
    wait_s: float,
) -> int:
    """Every node in turn (they may share nothing but the cluster, and one at a time keeps
    each node's figures its own); the exit code over all of them."""
    template = worker_template(cfg, client)
    failed: list[str] = []
    errors: list[str] = []
    for node in nodes:
        try:
            status, rid = recheck_node(
                cfg,
                s,
                client,
                node,
                template,
                quarantined_by=run_id,
                profile=profile,
                suite_args=suite_args,
                history_root=history_root,
                wait_s=wait_s,
            )
        except InfraError as e:
            s.warn(f"error: {e}")
            errors.append(node)
            continue
        if status == "PASS":
            s.say(
                f"node {node}: PASS in re-check run {rid}; release it with: "
                f"mlenv release {run_id} --after {rid}"
            )
        else:
            s.say(f"node {node}: {status} in re-check run {rid}; it stays quarantined")
            failed.append(node)
    s.say(
        f"re-check of run {run_id}'s quarantine: {len(nodes) - len(failed) - len(errors)} "
        f"node(s) passed, {len(failed)} did not, {len(errors)} not re-checked"
    )
    if errors:
        return EXIT_ERROR
    return EXIT_FAIL if failed else EXIT_OK
