"""Every cluster verb at PODS pods on the kube tier's scale nodes, beside its floor.

Usage: python benchmarks/bench_scale.py [PODS] [--keep] [--files N] [--bound B] [--only V,…]
       [--pin-by label|name]

Starts (or reuses) a kube tier with PODS scale nodes (KUBE_SCALE_NODES: kwok-only pods,
docs/deploy.md "Scale nodes") in ``.mlenv/kube-scale``, writes a checkout whose config
pins PODS pods to those nodes (``nodes.pin_by: label`` unless ``--pin-by name``), and runs each verb as a developer does (``mlenv VERB`` as
a process, the tier's kubectl first on PATH). Each verb's floor is the same work done with
one plain ``kubectl`` command, or a fan-out of ``kubectl`` bounded at ``--bound`` (16)
processes at once:

- deploy: ``kubectl apply`` of the plan (``mlenv deploy --dry-run client -o json``) and
  ``kubectl rollout status``, after one ``kubectl label nodes`` of the pool label when the
  pods are pinned by it; mlenv: ``deploy`` to every pod Ready;
- status: one ``kubectl get pods,pvc -l SELECTOR -o wide`` (each side the median of five
  runs, alternating);
- sync: ``tar c | kubectl exec -i POD -- tar x`` into every pod, 16 at once;
- exec: ``kubectl exec POD -- true`` in every pod, 16 at once; mlenv: ``gpu-info`` (one
  exec per pod: the shell-style fan-out);
- teardown: one ``kubectl delete`` of every kind with the selector (not waiting for the
  pods' grace periods, as ``mlenv teardown``), and one ``kubectl label nodes -l`` taking
  the pool label off;
- quarantine / release: ``kubectl label``, ``annotate`` and ``taint`` of every node, one
  call each choosing them by a hostname selector (and their undoing); mlenv:
  ``quarantine RUN --apply`` of a run where every
  node FAILED (label, note and taint, one call per kind, and an Event per node in one
  List), and ``release RUN --force``;
- quarantine-dry-run: mlenv's plan only (no floor: nothing is sent).

Every kubectl process, mlenv's and the floors', goes through a PATH shim that logs its
start and end, so each row counts the processes started and the most at once. One JSON
line per verb: {"verb", "pods", "seconds", "floor_seconds", "processes",
"peak_concurrent", "floor_processes", "floor_peak_concurrent"}; a verb that fails says so
in "error" (and the benchmark exits 1 at the end).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlenv.contract import (  # noqa: E402
    ANNOTATION_QUARANTINE,
    APP,
    LABEL_HEALTH,
    LABEL_INSTANCE,
    LABEL_NAME,
    LABEL_POOL_PREFIX,
)
from mlenv.testing.kube import build, manifests, plane  # noqa: E402
from mlenv.workload import DEFAULT, workload_for  # noqa: E402

# the deployment's worker object, as the floor's plain kubectl commands name it
WORKERS = workload_for(DEFAULT)

PULLABLE = "registry.access.redhat.com/ubi9/ubi-minimal:latest"
NAME = "bench-scale"
RUN_ID = "20261129-000000-benchs"
# The rows, in the order they are measured (--only picks some).
VERBS = (
    "deploy",
    "status",
    "sync",
    "exec",
    "quarantine-dry-run",
    "quarantine",
    "release",
    "teardown",
)
# What `mlenv teardown` deletes, named for the floor's one delete (it keeps claims too).
KINDS = "statefulset,service,secret,configmap,serviceaccount,networkpolicy,pod"

SHIM = """#!/bin/bash
# benchmark shim: log this kubectl's start and end, run the real one
echo "S $$ $EPOCHREALTIME" >> {log}
{real} "$@"
rc=$?
echo "E $$ $EPOCHREALTIME" >> {log}
exit $rc
"""


class Counter:
    """The PATH shim's log, read back as (processes started, most running at once)."""

    def __init__(self, folder: Path, real: str) -> None:
        self.log = folder / "kubectl.log"
        self.bin = folder / "bin"
        self.bin.mkdir(parents=True)
        shim = self.bin / "kubectl"
        shim.write_text(SHIM.format(log=self.log, real=real))
        shim.chmod(0o755)

    def reset(self) -> None:
        self.log.write_text("")

    def read(self) -> tuple[int, int]:
        events = []
        for line in self.log.read_text().splitlines():
            kind, _pid, when = line.split()
            events.append((float(when), 1 if kind == "S" else -1))
        now = peak = 0
        # an end and a start at the same instant: the end first (not two at once)
        for _, step in sorted(events, key=lambda e: (e[0], e[1])):
            now += step
            peak = max(peak, now)
        return sum(1 for _, s in events if s == 1), peak


class Bench:
    """The verbs and their floors at ``pods`` pods on ``tier``'s scale nodes (named
    ``SCALE_NODE_PREFIX<i>``, i < pods); ``tolerate``: a taint key those nodes carry that
    the deployment tolerates (a plane shared with other tests keeps their pods off them);
    ``platform``: the config's (``kubernetes`` on the plain flavour). Each row is printed
    and kept in ``rows``."""

    def __init__(
        self,
        pods: int,
        tier: plane.Tier,
        work: Path,
        bound: int,
        tolerate: str | None = None,
        platform: str | None = None,
        pin_by: str = "label",
    ) -> None:
        self.pods = pods
        self.tier = tier
        self.work = work
        self.bound = bound
        self.tolerate = tolerate
        self.platform = platform  # the config's platform: (none) for OpenShift, kubernetes
        self.pin_by = pin_by  # nodes.pin_by: the pool label (the default here) or each name
        self.rows: list[dict[str, Any]] = []
        self.ns = f"bench-scale-{pods}"
        self.counter = Counter(work / "shim", str(build.paths().kube("kubectl")))
        self.env = {
            **os.environ,
            "KUBECONFIG": str(tier.admin_kubeconfig),
            "PATH": f"{self.counter.bin}:{os.environ.get('PATH', '')}",
            "MLENV_ROOT": str(work / "co"),
            "MLENV_STATE_DIR": str(work / "co" / ".mlenv"),
            "PYTHONPATH": str(ROOT),
            # a 2-core plane starting hundreds of pods answers slowly: mlenv's default 10 s
            # for the server's first answer ended a deploy at 128 pods here
            "MLENV_API_TIMEOUT_S": os.environ.get("MLENV_API_TIMEOUT_S", "60"),
        }
        self.failed = False

    # -- helpers ------------------------------------------------------------------------
    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        res = subprocess.run(
            ["kubectl", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
            timeout=3600,
        )
        if check and res.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])}: {res.stderr.strip()[-500:]}")
        return res.stdout

    def mlenv(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mlenv", *args],
            cwd=self.work / "co",
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=3600,
        )

    def fan_out(self, fn: Callable[[str], object], pods: list[str]) -> None:
        with ThreadPoolExecutor(max_workers=self.bound) as pool:
            list(pool.map(fn, pods))

    def measure(self, fn: Callable[[], Any]) -> tuple[float, int, int, Any]:
        self.counter.reset()
        t = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t
        procs, peak = self.counter.read()
        return seconds, procs, peak, out

    def row(
        self,
        verb: str,
        mine: Callable[[], Any] | tuple[float, int, int, Any],
        floor: Callable[[], Any] | tuple[float, int, int, Any] | None,
        expect: tuple[int, ...] = (0,),
        repeat: int = 1,
    ) -> None:
        """Measure ``mine``, then ``floor``, and print the row; either may be measured
        before (deploy's and teardown's floors change the state the verb starts from, and
        quarantine's must not meet mlenv's marks). ``repeat``: a read that changes nothing
        is measured that many times, alternating with its floor, and each side's median
        kept (one second's worth of work on a shared 2-core machine varies by a tenth)."""
        if repeat > 1 and callable(mine) and callable(floor):
            mine_runs, floor_runs = [], []
            for _ in range(repeat):
                mine_runs.append(self.measure(mine))
                floor_runs.append(self.measure(floor))
            mine = sorted(mine_runs, key=lambda m: m[0])[repeat // 2]
            floor = sorted(floor_runs, key=lambda m: m[0])[repeat // 2]
        seconds, procs, peak, res = mine if isinstance(mine, tuple) else self.measure(mine)
        row: dict[str, Any] = {
            "verb": verb,
            "pods": self.pods,
            "seconds": round(seconds, 2),
            "floor_seconds": None,
            "processes": procs,
            "peak_concurrent": peak,
        }
        if isinstance(res, subprocess.CompletedProcess) and res.returncode not in expect:
            self.failed = True
            row["error"] = f"exit {res.returncode}: {(res.stderr or res.stdout).strip()[-400:]}"
        if floor is not None:
            f_seconds, f_procs, f_peak, _ = (
                floor if isinstance(floor, tuple) else self.measure(floor)
            )
            row.update(
                floor_seconds=round(f_seconds, 2),
                floor_processes=f_procs,
                floor_peak_concurrent=f_peak,
                ratio=round(seconds / f_seconds, 2) if f_seconds else None,
            )
        self.rows.append(row)
        print(json.dumps(row), flush=True)

    @property
    def pod_names(self) -> list[str]:
        return [WORKERS.pod_name(i) for i in range(self.pods)]

    @property
    def nodes(self) -> list[str]:
        return [f"{manifests.SCALE_NODE_PREFIX}{i}" for i in range(self.pods)]

    # -- setup --------------------------------------------------------------------------
    def checkout(self, files: int) -> None:
        co = self.work / "co"
        data = yaml.safe_load((ROOT / "clusters" / "local.yaml").read_text())
        data["cluster"].update({"name": NAME, "namespace": self.ns})
        data["nodes"] = {"gpu_nodes": self.nodes, "pin_by": self.pin_by}
        data["gpus"].update({"per_node": 8, "type": "H100-80GB", "default_nodes": self.pods})
        data["image"] = {"ref": PULLABLE}
        if self.platform:
            data["platform"] = self.platform
        if self.tolerate:
            gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            mine = {"key": self.tolerate, "operator": "Exists", "effect": "NoSchedule"}
            data["scheduling"] = {"tolerations": [gpu, mine]}
        (co / "clusters").mkdir(parents=True)
        (co / "clusters" / f"{NAME}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        ws = co / "workspace"
        for i in range(files):
            sub = ws / f"pkg{i // 50}"
            sub.mkdir(parents=True, exist_ok=True)
            (sub / f"mod{i}.py").write_text(f"# module {i}\n" + "x = 1\n" * 200)
        self.kubectl("create", "namespace", self.ns, check=False)
        self.plan = self.mlenv("deploy", NAME, "--mode", "tcp", "--dry-run", "client", "-o", "json")
        if self.plan.returncode != 0:
            raise RuntimeError(f"mlenv deploy --dry-run client: {self.plan.stderr[-1500:]}")

    def report(self) -> Path:
        """A finished run on this cluster in which every node FAILED (what quarantine acts on)."""
        d = self.work / "run"
        d.mkdir()
        nodes = [
            {
                "node": node,
                "hosts": [pod],
                "node_from": "kubernetes",
                "status": "FAIL",
                "findings": [
                    {"status": "FAIL", "check": "compute.matmul", "figure": "tflops_fp32 = 0.2"}
                ],
            }
            for node, pod in zip(self.nodes, self.pod_names, strict=True)
        ]
        doc = {
            "schema_version": 1,
            "run_id": RUN_ID,
            "started": "2026-11-29T00:00:00+00:00",
            "verdict": "FAIL",
            "node_verdicts": {"nodes": nodes},
            "checks": [],
        }
        (d / "results.json").write_text(json.dumps(doc))
        (d / "record.json").write_text(json.dumps({"run_id": RUN_ID, "cluster": NAME}))
        return d

    # -- the floors ---------------------------------------------------------------------
    def selector(self) -> str:
        return f"{LABEL_INSTANCE}={NAME},{LABEL_NAME}={APP}"

    def pool(self) -> str:
        """The pool label's ``key=value`` (nodes.pin_by: label)."""
        return f"{LABEL_POOL_PREFIX}{self.ns}={NAME}"

    def by_hostname(self) -> str:
        """A selector of the scale nodes by their hostname label (each one's name)."""
        return f"kubernetes.io/hostname in ({','.join(self.nodes)})"

    def floor_deploy(self) -> None:
        if self.pin_by == "label":  # the pods select the label: the nodes need it first
            # chosen by hostname: kubectl reads named nodes one rate-limited GET at a time
            self.kubectl("label", "nodes", "--overwrite", "-l", self.by_hostname(), self.pool())
        self.kubectl("apply", "-n", self.ns, "-f", "-", stdin=self.plan.stdout)
        self.kubectl("rollout", "status", "-n", self.ns, WORKERS.ref, "--timeout=3600s")

    def floor_teardown(self) -> None:
        if self.pin_by == "label":  # first, as mlenv's: on a server not yet deleting pods
            key = self.pool().partition("=")[0]
            self.kubectl("label", "nodes", "-l", self.pool(), f"{key}-")
        # as mlenv's teardown: sent, not waited for (the pods have their grace period)
        self.kubectl("delete", KINDS, "-n", self.ns, "-l", self.selector(), "--wait=false")

    def floor_status(self) -> None:
        self.kubectl("get", "pods,pvc", "-n", self.ns, "-l", self.selector(), "-o", "wide")

    def floor_sync(self) -> None:
        archive = subprocess.run(
            ["tar", "-C", str(self.work / "co" / "workspace"), "-c", "."],
            capture_output=True,
            check=True,
        ).stdout

        def copy(pod: str) -> None:
            res = subprocess.run(
                [
                    "kubectl",
                    "exec",
                    "-i",
                    "-n",
                    self.ns,
                    pod,
                    "--",
                    "tar",
                    "-C",
                    "/workspace",
                    "-x",
                    # the scale nodes' pods share one root: never unlink and recreate
                    "--overwrite",
                ],
                input=archive,
                capture_output=True,
                env=self.env,
                check=False,
            )
            if res.returncode != 0:
                raise RuntimeError(f"floor sync {pod}: {res.stderr.decode()[-300:]}")

        self.fan_out(copy, self.pod_names)

    def floor_exec(self) -> None:
        self.fan_out(
            lambda pod: self.kubectl("exec", "-n", self.ns, pod, "--", "true"), self.pod_names
        )

    def floor_mark(self, undo: bool) -> None:
        label = LABEL_HEALTH + ("-" if undo else "=quarantined")
        note = ANNOTATION_QUARANTINE + ("-" if undo else f"={RUN_ID}")
        taint = LABEL_HEALTH + (":NoSchedule-" if undo else f"={RUN_ID}:NoSchedule")
        # chosen by hostname, as mlenv's --apply chooses the nodes it read: named nodes
        # are one rate-limited GET each (301 s a quarantine at 512 nodes)
        chosen = ["-l", self.by_hostname()]
        self.kubectl("label", "nodes", *chosen, label, "--overwrite")
        self.kubectl("annotate", "nodes", *chosen, note, "--overwrite")
        self.kubectl("taint", "nodes", *chosen, taint, *([] if undo else ["--overwrite"]))

    # -- the run ------------------------------------------------------------------------
    def run(self, only: frozenset[str] | None = None) -> None:
        """Every row, or those in ``only``; without ``deploy`` there, the deployment is
        made (or, kept from an earlier ``--keep`` run, re-applied) unmeasured, and without
        ``teardown`` it is left up for the next run."""

        def wanted(verb: str) -> bool:
            return only is None or verb in only

        hist = str(self.work / "history")
        run = str(self.report())
        deploy = lambda: self.mlenv("deploy", NAME, "--mode", "tcp", "--timeout", "3600")  # noqa: E731
        if wanted("deploy"):
            # from nothing: a deployment kept by an earlier --keep run goes first, unmeasured
            # (its apply and rollout would be a no-op measured as the floor)
            if self.kubectl("get", f"{WORKERS.kind},pods", "-n", self.ns, "-o", "name").split():
                self.floor_teardown()
                self.wait_gone()
            # deploy's floor first, then its own teardown's floor, so mlenv deploys afresh
            f_deploy = self.measure(self.floor_deploy)
            f_teardown = self.measure(self.floor_teardown)
            self.wait_gone()
            self.row("deploy", deploy, f_deploy)
        else:
            f_teardown = None
            res = deploy()
            if res.returncode != 0:
                self.failed = True
                print(f"# mlenv deploy: exit {res.returncode}: {res.stderr[-400:]}", flush=True)
        if self.failed:
            raise RuntimeError("mlenv deploy failed (its row says why): nothing left to measure")
        if wanted("status"):
            self.row("status", lambda: self.mlenv("status", NAME), self.floor_status, repeat=5)
        if wanted("sync"):
            self.row("sync", lambda: self.mlenv("sync", NAME), self.floor_sync)
        if wanted("exec"):
            # gpu-info ends 3 here (the tier's pods have no nvidia-smi), after asking every pod
            self.row("exec", lambda: self.mlenv("gpu-info", NAME), self.floor_exec, expect=(3,))
        if wanted("quarantine-dry-run"):
            self.row(
                "quarantine-dry-run",
                lambda: self.mlenv("quarantine", run, "--confirm", "1/1", "--history-dir", hist),
                None,
            )
        if wanted("quarantine") or wanted("release"):
            # mlenv's quarantine and release first, then the floors' marks and their
            # undoing: release leaves a node alone whose marks someone else changed
            mark = self.measure(
                lambda: self.mlenv(
                    "quarantine", run, "--confirm", "1/1", "--apply", "--history-dir", hist
                )
            )
            unmark = self.measure(
                lambda: self.mlenv("release", run, "--force", "--history-dir", hist)
            )
            floor_mark = self.measure(lambda: self.floor_mark(undo=False))
            floor_unmark = self.measure(lambda: self.floor_mark(undo=True))
            self.row("quarantine", mark, floor_mark)
            self.row("release", unmark, floor_unmark)
        if wanted("teardown") and f_teardown is not None:
            self.row("teardown", lambda: self.mlenv("teardown", NAME), f_teardown)

    def wait_nodes(self) -> None:
        """Until every scale node is Ready and rid of its not-ready taint: a tier just
        started has them NotReady, and tainted until the node controller's next pass, and
        deploy's preflight refuses such a node."""
        deadline = time.monotonic() + 600
        want = set(self.nodes)
        while True:
            rows = self.kubectl(
                "get",
                "nodes",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} "
                '{.status.conditions[?(@.type=="Ready")].status} '
                '{.spec.taints[*].key}{"\\n"}{end}',
            ).splitlines()
            fine = {
                r.split()[0]
                for r in rows
                if r.split()[1:2] == ["True"] and "node.kubernetes.io/" not in r
            }
            missing = want - fine
            if not missing:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(missing)} scale nodes not Ready after 600 s")
            time.sleep(2)

    def wait_gone(self) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            # the workload object too: one still being deleted is what a new apply meets
            left = self.kubectl("get", f"{WORKERS.kind},pods", "-n", self.ns, "-o", "name")
            if not left.split():
                return
            time.sleep(1)
        raise RuntimeError(f"{len(left.split())} objects still there 600 s after the delete")


def tier_for(pods: int) -> tuple[plane.Tier, bool]:
    folder = ROOT / ".mlenv" / "kube-scale"
    tier = plane.Tier(plane.tier_dir(folder))
    st = plane.status(tier)
    if st["up"] and int(st.get("scale_nodes") or 0) == pods:
        return tier, False
    if st["up"]:
        plane.down(folder=folder)
    return plane.up("openshift", folder=folder, scale_nodes=pods), True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pods", type=int, nargs="?", default=32, help="pods (default 32)")
    ap.add_argument("--keep", action="store_true", help="leave the tier up at the end")
    ap.add_argument("--files", type=int, default=200, help="files in the synced tree")
    ap.add_argument("--bound", type=int, default=16, help="the floors' fan-out bound")
    ap.add_argument(
        "--pin-by",
        choices=("label", "name"),
        default="label",
        help="nodes.pin_by of the benchmark's config (default label)",
    )
    ap.add_argument(
        "--only",
        default="",
        help=f"comma-separated rows to measure (of {','.join(VERBS)}; default all)",
    )
    args = ap.parse_args()
    only = frozenset(v for v in args.only.split(",") if v) or None
    if only is not None and (only - set(VERBS) or ("teardown" in only and "deploy" not in only)):
        print(
            f"bench_scale: --only takes {','.join(VERBS)}; teardown's floor needs deploy",
            file=sys.stderr,
        )
        return 2
    if args.pods < 1:
        print("bench_scale: PODS must be 1 or more", file=sys.stderr)
        return 2
    # mlenv as installed: its bytecode compiled (pip does; a checkout under
    # PYTHONDONTWRITEBYTECODE would compile every changed module in every verb's process)
    compileall.compile_dir(str(ROOT / "mlenv"), quiet=1)
    started = time.perf_counter()
    tier, owned = tier_for(args.pods)
    print(
        f"# tier with {args.pods} scale nodes ready in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        bench = Bench(args.pods, tier, work, args.bound, pin_by=args.pin_by)
        bench.wait_nodes()
        bench.checkout(args.files)
        bench.run(only)
        return 1 if bench.failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if owned and not args.keep:
            plane.down(folder=tier.folder)


if __name__ == "__main__":
    sys.exit(main())
