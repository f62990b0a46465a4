"""Pod launch figures: netns harness setup/teardown, a 2-node DeepSpeed run, and how the
launch preflight scales with the number of peers (peers simulated by local listeners).

Run: .venv/bin/python benchmarks/bench_preflight.py [--skip-harness]
     .venv/bin/python benchmarks/bench_preflight.py --suite-only [--suite-runs N]
       (the acceptance suite launched by ``pod launch`` on 2 × 1 and 2 × 2 ranks)
The harness part needs root, sshd and pdsh; it is skipped with the reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))


def bench_preflight(n: int, repeats: int = 5) -> tuple[float, float]:
    """Median seconds to preflight ``n`` answering peers, and with 1 of them dead (1 s deadline)."""
    from mlenv.pod.preflight import Peer, preflight

    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        socks.append(s)
    peers = [Peer("127.0.0.1", s.getsockname()[1]) for s in socks]
    try:
        ok = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            res = preflight(peers, deadline_s=30)
            ok.append(time.perf_counter() - t0)
            assert all(r.ok for r in res)
        dead_port = socks[-1].getsockname()[1]
        socks[-1].close()
        t0 = time.perf_counter()
        res = preflight(
            peers[:-1] + [Peer("127.0.0.1", dead_port)], deadline_s=1.0, interval_s=0.25
        )
        one_dead = time.perf_counter() - t0
        assert not res[-1].ok
    finally:
        for s in socks:
            s.close()
    return statistics.median(ok), one_dead


def bench_black_holed(n: int, deadline_s: float = 1.0) -> float:
    """Seconds to preflight ``n`` peers that drop SYNs (a listener with a full accept queue)."""
    from mlenv.pod.preflight import Peer, preflight

    srv = socket.socket()
    srv.bind(("0.0.0.0", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fill = []
    for _ in range(3):  # the queue holds one; the others stay in SYN_SENT
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fill.append(c)
    try:
        peers = [Peer(f"127.0.{k // 250}.{k % 250 + 2}", port) for k in range(n)]
        t0 = time.perf_counter()
        res = preflight(peers, deadline_s=deadline_s, interval_s=0.25)
        took = time.perf_counter() - t0
        assert not any(r.ok for r in res)
    finally:
        for c in fill:
            c.close()
        srv.close()
    return took


def bench_harness(runs: int = 3) -> dict[str, float]:
    """Setup/teardown medians and one 2-node x 1-rank DeepSpeed gloo job's wall time."""
    from harness import Cluster, unavailable_reason

    why = unavailable_reason()
    if why:
        print(f"harness: skipped ({why})")
        return {}
    setups, teardowns, jobs = [], [], []
    job = str(ROOT / "tests" / "integration" / "jobs" / "allreduce_hosts.py")
    pod = [sys.executable, "-m", "mlenv.pod"]
    for k in range(runs):
        with tempfile.TemporaryDirectory(prefix="mlenv-bench-") as d:
            c = Cluster(2, d)
            c.setup()
            try:
                setups.append(c.setup_s)
                t0 = time.perf_counter()
                for i in range(2):
                    r = c.run(i, [*pod, "init"], c.env(i))
                    assert r.returncode == 0, r.stdout
                init_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                r = c.run(
                    0,
                    [*pod, "launch", "--deadline", "20", job, "--out", os.path.join(d, "o.json")],
                    c.env(0),
                    timeout=300,
                )
                assert r.returncode == 0, r.stdout[-2000:]
                jobs.append(time.perf_counter() - t0)
                print(
                    f"harness run {k}: setup {c.setup_s:.2f} s, init x2 {init_s:.2f} s, "
                    f"launch {jobs[-1]:.2f} s",
                    flush=True,
                )
            finally:
                c.teardown()
                teardowns.append(c.teardown_s)
    return {
        "setup_s": statistics.median(setups),
        "teardown_s": statistics.median(teardowns),
        "launch_2x1_s": statistics.median(jobs),
    }


def bench_suite(slots: int, options: str | None, runs: int = 1) -> dict[str, object]:
    """Wall time of ``pod launch`` running the acceptance suite on 2 pods × ``slots`` ranks.

    ``options``: an options file (``--options``) over the quick profile, or None for the
    profile as shipped. Also returns the per-check durations of the last run (rank 0's
    view: the slowest rank of each check).
    """
    from harness import Cluster, unavailable_reason

    why = unavailable_reason()
    if why:
        print(f"harness suite: skipped ({why})")
        return {}
    pod = [sys.executable, "-m", "mlenv.pod"]
    baseline = str(ROOT / "tests" / "integration" / "harness" / "baseline_harness.yaml")
    walls: list[float] = []
    per_check: dict[str, float] = {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="mlenv-bench-") as d:
            c = Cluster(2, d)
            c.setup()
            try:
                env = [c.env(i, {"MLENV_CPU_SLOTS": str(slots)}) for i in range(2)]
                for i in range(2):
                    r = c.run(i, [*pod, "init"], env[i])
                    assert r.returncode == 0, r.stdout
                rdir = os.path.join(d, "report")
                # The harness baseline: peer-outlier bars for ranks sharing two cores.
                extra = ["--", *(["--options", options] if options else []), "--baseline", baseline]
                t0 = time.perf_counter()
                r = c.run(
                    0,
                    [
                        *pod,
                        "launch",
                        "--deadline",
                        "20",
                        "--profile",
                        "quick",
                        "--report-dir",
                        rdir,
                        *extra,
                    ],
                    env[0],
                    timeout=600,
                )
                walls.append(time.perf_counter() - t0)
                doc = json.loads(Path(rdir, "results.json").read_text())
                assert r.returncode == 0 and doc["verdict"] == "PASS", r.stdout[-3000:]
                per_check = {}
                for chk in doc["checks"]:
                    per_check[chk["name"]] = max(
                        per_check.get(chk["name"], 0.0), float(chk.get("duration_s") or 0)
                    )
            finally:
                c.teardown()
        label = "small options" if options else "quick profile"
        print(
            f"suite 2 x {slots} ({label}): {walls[-1]:.1f} s; "
            + ", ".join(f"{k} {v:.1f}" for k, v in per_check.items()),
            flush=True,
        )
    return {
        "wall_s": statistics.median(walls),
        "runs": len(walls),
        "per_check_s": {k: round(v, 2) for k, v in per_check.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-harness", action="store_true")
    ap.add_argument(
        "--suite-only", action="store_true", help="only the 2-node acceptance-suite runs"
    )
    ap.add_argument("--suite-runs", type=int, default=1)
    args = ap.parse_args()
    out: dict[str, object] = {}
    if args.suite_only:
        small = str(ROOT / "tests" / "integration" / "harness" / "acceptance_small.json")
        for slots in (1, 2):
            for opts in (None, small):
                key = f"suite_2x{slots}_{'small' if opts else 'quick'}"
                out[key] = bench_suite(slots, opts, args.suite_runs)
        print(json.dumps(out))
        return 0
    for n in (64, 512):
        ok_s, dead_s = bench_preflight(n)
        hole_s = bench_black_holed(n)
        out[f"preflight_{n}"] = {
            "all_up_s": round(ok_s, 4),
            "one_dead_1s_deadline_s": round(dead_s, 3),
            "all_black_holed_1s_deadline_s": round(hole_s, 3),
        }
        print(
            f"preflight {n} peers: all up {ok_s * 1000:.1f} ms (median of 5); "
            f"1 dead with 1 s deadline {dead_s:.2f} s; all dropping SYNs, 1 s deadline {hole_s:.2f} s",
            flush=True,
        )
    if not args.skip_harness:
        out["harness"] = {k: round(v, 3) for k, v in bench_harness().items()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
