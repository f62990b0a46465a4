"""How many exec calls ``launch --torchrun`` holds at once, at PODS pods, on the fake.

Usage: python benchmarks/bench_launch_streams.py [PODS …] [--run-s S]

Drives the launch's fan-out (:func:`mlenv.cluster.fanout.run_everywhere`, the code
``mlenv launch NAME --torchrun`` runs) against the in-memory fake with PODS worker pods
(the ``local`` example config, deployed in TCP mode). With the real client each exec call
is one ``kubectl exec`` process and one API connection, so the most calls in flight at
once is the most client processes and exec streams the operator's machine holds. A call
that lasts as long as the run (the old per-pod run exec, or the follow of pod 0) is held
``--run-s`` seconds (default 1); every other call (a start, a state, a stop) 10 ms, as a
short exec. Runs on this tree and on one before the detached launch alike (the old
function takes no ``run_id``). One JSON line per pod count: {"pods", "peak_concurrent",
"calls", "seconds", "bound"}.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlenv.cluster import fanout  # noqa: E402
from mlenv.cluster.deploy import DeployOptions, deploy  # noqa: E402
from mlenv.cluster.pool import fanout_bound  # noqa: E402
from mlenv.config import load  # noqa: E402
from mlenv.testing.fakecluster import FakeCluster  # noqa: E402

RUN = "python -m mlenv.pod run-torchrun"
RID = "20261129-120000-bbbbbb"


def measure(pods: int, run_s: float) -> dict[str, Any]:
    cfg = load("local", ROOT)
    fake = FakeCluster.typical(cfg.namespace, [f"gpu-{i}" for i in range(pods)], gpus=8)
    fake.add_storage_class("standard")
    deploy(cfg, DeployOptions(mode="tcp", timeout=600, nodes=pods), fake)
    fake.exec_responses[RUN] = {"rc": 0, "stdout": "rank done\n"}
    lock = threading.Lock()
    gauge = {"now": 0, "peak": 0, "calls": 0}

    def held(argv: list[str]) -> float:
        whole_run = ("run-torchrun" in argv and "--detach" not in argv) or "run-follow" in argv
        return run_s if whole_run else 0.01

    def counted(fn: Any) -> Any:
        def call(pod: str, ns: str, argv: list[str], *args: Any, **kwargs: Any) -> Any:
            with lock:
                gauge["now"] += 1
                gauge["calls"] += 1
                gauge["peak"] = max(gauge["peak"], gauge["now"])
            try:
                time.sleep(held(list(argv)))
                return fn(pod, ns, argv, *args, **kwargs)
            finally:
                with lock:
                    gauge["now"] -= 1

        return call

    fake.exec = counted(fake.exec)  # type: ignore[method-assign]
    fake.exec_stream = counted(fake.exec_stream)  # type: ignore[method-assign]
    argv = ["python", "-m", "mlenv.pod", "run-torchrun", "--run-id", RID]
    detached = "run_id" in inspect.signature(fanout.run_everywhere).parameters
    started = time.perf_counter()
    # the tree before the detached launch has no run_id (this script measures both)
    extra: dict[str, Any] = {"run_id": RID} if detached else {}
    rep = fanout.run_everywhere(cfg, fake, argv, lambda s: None, **extra)
    took = time.perf_counter() - started
    assert rep.returncode == 0 and not rep.failed, rep
    return {
        "pods": pods,
        "peak_concurrent": gauge["peak"],
        "calls": gauge["calls"],
        "seconds": round(took, 2),
        "bound": fanout_bound() if detached else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pods", type=int, nargs="*", default=[32, 256])
    ap.add_argument("--run-s", type=float, default=1.0)
    args = ap.parse_args()
    for n in args.pods:
        print(json.dumps(measure(n, args.run_s)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
