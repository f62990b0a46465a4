"""fabric.localize for real: four "hosts" on the netns harness, links slowed with tc.

Each host is a network namespace with its own veth on a shared bridge; one rank of
``python -m mlenv.acceptance`` per host (gloo over the veths), rendezvous on host 0, as
the StatefulSet's pods would run it. Shaping is Linux traffic control, so the bytes
really cross a slow link: ``tbf`` on both ends of a host's veth (a slow NIC), or ``htb``
with a ``u32`` destination filter on one host's veth (one slow path between two hosts).
The report must name that host, that pair, or nobody. Needs root and iproute2 (tc);
skips with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Cluster, HarnessUnavailable, unavailable_reason
from harness.netns import run_bounded

# Serial: four ranks judged against each other. Beside the parallel phase's other workers a
# healthy pair whose ranks waited for a core read within 20x of the 20 mbit/s one (0.0024
# GB/s), so round 1 flagged nothing (in CI, and in a make test here).
pytestmark = [pytest.mark.integration, pytest.mark.serial]

_REASON = unavailable_reason()
needs_harness = pytest.mark.skipif(_REASON is not None, reason=f"netns harness: {_REASON}")
ROOT = Path(__file__).resolve().parents[2]
HOSTS = 4
# Small messages: a healthy veth moves 256 KiB in a few milliseconds on this shared CPU, 20 mbit/s
# takes about 0.1 s, so the difference is two orders of magnitude and a round is short.
# The four ranks share two cores with whatever else runs, and a healthy pair whose ranks
# wait for a core can measure several times below the others: a pair counts as slow only
# below 5 % of a healthy one (slow_frac 0.95); the shaped links measure about 0.5 % of it
# (0.0023 against 0.35-0.55 GB/s on the 2-core sandbox), ten times under the bar.
OPTIONS = {
    "fabric.localize": {"bytes": 262144, "iters": 5, "warmup": 1, "slow_frac": 0.95},
    "collectives": {"min_bytes": 1024, "max_bytes": 262144, "factor": 16, "iters": 3, "warmup": 1},
}
# A bar for the automatic trigger (a threshold, not a measured figure): a 4-host all_reduce
# through a 20 mbit/s host reaches a bus bandwidth of at most 1.5 x 2.5 MB/s = 0.004 GB/s,
# an unshaped one several times the bar even on the loaded two cores.
BASELINE = """model: CPU (netns harness, localize)
match: []
rules:
  - {check: collectives.all_reduce, metric: busbw_gbps_large, op: ">=", value: 0.01, scope: world,
     source: "netns harness bar for the localize trigger"}
  - {check: "collectives.*", metric: wrong_elements, op: "==", value: 0, source: "exact data"}
"""


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(HOSTS, str(tmp_path_factory.mktemp("localize")))
    try:
        c.setup()
    except HarnessUnavailable as e:
        pytest.skip(f"netns harness: {e}")
    try:
        yield c
    finally:
        c.teardown()


def _suite(
    c: Cluster, report: Path, *args: str, timeout: float = 90, extra: dict[str, str] | None = None
) -> tuple[dict[str, Any], str, float]:
    """One rank per host; returns (results.json, rank 0's output, wall seconds)."""
    opts = report.parent / f"{report.name}-options.json"
    opts.write_text(json.dumps(OPTIONS))
    procs = []
    t0 = time.monotonic()
    for i in range(c.n):
        env = c.env(
            i,
            {
                "RANK": str(i),
                "WORLD_SIZE": str(c.n),
                "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1",
                "NODE_RANK": str(i),
                "PYTHONPATH": str(ROOT),
                "MPLBACKEND": "Agg",
                **(extra or {}),
            },
        )
        argv = [
            sys.executable,
            "-m",
            "mlenv.acceptance",
            "--checks",
            "fabric.localize",
            "--deadline",
            "60",
            "--report-dir",
            str(report),
            "--options",
            str(opts),
            *args,
        ]
        procs.append(
            c.popen(
                i,
                argv,
                env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    outs = [run_bounded(p, timeout) for p in procs]
    wall = time.monotonic() - t0
    log = outs[0].stdout
    assert (report / "results.json").exists(), "\n".join(o.stdout[-2000:] for o in outs)
    return json.loads((report / "results.json").read_text()), log, wall


def _loc(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc["checks"] if c["name"] == "fabric.localize"]


def _rounds(entry: dict[str, Any]) -> list[dict[str, Any]]:
    rounds: list[dict[str, Any]] = entry["details"]["rounds"]
    for r in rounds:  # every round is recorded: disjoint pairs, a figure each
        nodes = [n for p in r["pairs"] for n in p["nodes"]]
        assert len(nodes) == len(set(nodes)) and all(p["gbps"] > 0 for p in r["pairs"])
    return rounds


# Serial: with no link shaped, the pairs' timings differ only by noise, and beside the other
# workers' runs on 2 cores that noise named a link (FAIL) in a CI rehearsal (2026-11-28); the
# shaped tests here stay in the parallel phase (their slow link is many times the noise).
@pytest.mark.serial
@needs_harness
def test_no_shaping_names_nobody(hosts: Cluster, tmp_path: Path) -> None:
    doc, log, wall = _suite(hosts, tmp_path / "report", "--localize")
    (entry,) = _loc(doc)
    assert entry["status"] == "PASS" and entry["scope"] == "world", entry
    assert entry["details"]["outcome"] == "nobody" and entry["details"]["trigger"] == [
        "requested (--localize)"
    ]
    rounds = _rounds(entry)  # four hosts: the survey measures all six pairs before naming nobody
    assert len(rounds) == 3 and len({tuple(p["nodes"]) for r in rounds for p in r["pairs"]}) == 6
    assert "no slow node or link" in log
    print(
        f"[measured] 4 hosts, no shaping: {len(_rounds(entry))} round(s), suite wall {wall:.1f} s"
    )


@needs_harness
def test_slow_host_is_named(hosts: Cluster, tmp_path: Path) -> None:
    hosts.shape_pod(2, "20mbit")
    try:
        doc, log, wall = _suite(hosts, tmp_path / "report", "--localize")
    finally:
        hosts.unshape(2)
    (entry,) = _loc(doc)
    assert (
        entry["status"] == "FAIL" and entry["scope"] == "node" and entry["node"] == "ml-dev-env-2"
    ), entry
    assert (
        entry["details"]["slow_nodes"] == ["ml-dev-env-2"] and entry["details"]["slow_links"] == []
    )
    rounds = _rounds(entry)
    assert len(rounds) == 2 and rounds[0]["suspects"] == ["ml-dev-env-2", "ml-dev-env-3"]
    assert doc["verdict"] == "FAIL" and any(
        "ml-dev-env-2" in r and "slow node" in r for r in doc["reasons"]
    )
    assert "FAIL  fabric.localize" in log and "node ml-dev-env-2" in log
    cases = ET.parse(tmp_path / "report" / "junit.xml").getroot().findall("testsuite/testcase")
    assert any(
        c.get("classname") == "fabric.localize"
        and c.get("name") == "node ml-dev-env-2"
        and c.find("failure") is not None
        for c in cases
    )
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "| fabric.localize | node ml-dev-env-2 | FAIL |" in summary
    assert (
        "round 1: ml-dev-env-0<->ml-dev-env-1" in summary
        and "ml-dev-env-2<->ml-dev-env-3" in summary
    )
    print(
        f"[measured] 4 hosts, host 2 at 20 mbit/s: {len(rounds)} round(s), suite wall {wall:.1f} s, "
        f"pairs {[(p['nodes'], round(p['gbps'], 4)) for r in rounds for p in r['pairs']]}"
    )


@needs_harness
def test_collective_below_its_bar_triggers_localization_by_itself(
    hosts: Cluster, tmp_path: Path
) -> None:
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(BASELINE)
    hosts.shape_pod(1, "20mbit")
    try:
        doc, log, wall = _suite(
            hosts,
            tmp_path / "report",
            "--checks",
            "collectives.all_reduce,fabric.localize",
            "--baseline",
            str(baseline),
        )
    finally:
        hosts.unshape(1)
    ar = [
        c for c in doc["checks"] if c["name"] == "collectives.all_reduce" and c["scope"] == "world"
    ]
    assert [c["status"] for c in ar] == ["FAIL"], ar  # the world group, below its bar
    (entry,) = _loc(doc)
    assert entry["status"] == "FAIL" and entry["node"] == "ml-dev-env-1", entry
    (why,) = entry["details"]["trigger"]
    assert why.startswith("FAIL: collectives.all_reduce world") and "busbw_gbps_large" in why
    print(
        f"[measured] 4 hosts, host 1 at 20 mbit/s, auto trigger: {len(_rounds(entry))} round(s), "
        f"suite wall {wall:.1f} s"
    )


@needs_harness
def test_nothing_below_its_bar_skips_localization(hosts: Cluster, tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(BASELINE)
    doc, _, _ = _suite(
        hosts,
        tmp_path / "report",
        "--checks",
        "collectives.all_reduce,fabric.localize",
        "--baseline",
        str(baseline),
    )
    (entry,) = _loc(doc)
    assert entry["status"] == "SKIP" and "not needed" in entry["reasons"][0], entry
    assert doc["verdict"] == "PASS"


@needs_harness
@pytest.mark.parametrize("src,dst", [(0, 1), (2, 1)])
def test_slow_path_between_two_hosts_names_the_pair(
    hosts: Cluster, tmp_path: Path, src: int, dst: int
) -> None:
    """(0, 1) is a round-1 pair: its two ends are re-paired with others in round 2. (1, 2)
    is not: round 1 finds nothing, and the survey's round 2 (the other ring neighbours)
    meets it between two nodes already known good."""
    hosts.shape_path(src, dst, "20mbit")  # only what host src sends to host dst
    try:
        doc, log, wall = _suite(hosts, tmp_path / "report", "--localize")
    finally:
        hosts.unshape(src)
    a, b = sorted((src, dst))
    (entry,) = _loc(doc)
    assert entry["status"] == "FAIL" and entry["scope"] == "link", entry
    assert entry["details"]["slow_links"] == [[f"ml-dev-env-{a}", f"ml-dev-env-{b}"]]
    assert entry["details"]["slow_nodes"] == []
    assert entry["details"]["group"] == f"ml-dev-env-{a} <-> ml-dev-env-{b}"
    rounds = _rounds(entry)
    assert len(rounds) == 2 and rounds[0]["suspects"] == (
        [f"ml-dev-env-{a}", f"ml-dev-env-{b}"] if b == a + 1 and a % 2 == 0 else []
    )
    assert any(
        f"cable/port/switch path between ml-dev-env-{a} and ml-dev-env-{b}" in r
        for r in doc["reasons"]
    )
    print(
        f"[measured] 4 hosts, path {src}->{dst} at 20 mbit/s: {len(rounds)} round(s), suite wall {wall:.1f} s"
    )


@needs_harness
def test_slow_rack_uplink_is_named_as_the_rack(hosts: Cluster, tmp_path: Path) -> None:
    """hosts 0 and 1 are rack-a, 2 and 3 racks of their own; everything hosts 0 and 1
    send out of the rack is shaped (their leaf's uplink), nothing between them. With the
    topology the report names rack-a once; the same shaping without it names links."""
    topology = {
        "rack-a": ["ml-dev-env-0", "ml-dev-env-1"],
        "rack-b": ["ml-dev-env-2"],
        "rack-c": ["ml-dev-env-3"],
    }
    for i in (0, 1):
        hosts.shape_paths(i, [2, 3], "20mbit")
    try:
        doc, log, wall = _suite(
            hosts, tmp_path / "report", "--localize", extra={"MLENV_TOPOLOGY": json.dumps(topology)}
        )
        plain, _, _ = _suite(hosts, tmp_path / "plain", "--localize")
    finally:
        for i in (0, 1):
            hosts.unshape(i)
    (entry,) = _loc(doc)
    assert (
        entry["status"] == "FAIL"
        and entry["scope"] == "rack"
        and entry["details"]["group"] == "rack-a"
    ), entry
    assert entry["details"]["slow_nodes"] == [] and entry["details"]["slow_links"] == []
    assert entry["details"]["rack_nodes"] == {"rack-a": ["ml-dev-env-0", "ml-dev-env-1"]}
    rounds = _rounds(entry)
    assert [p["nodes"] for p in rounds[0]["pairs"]] == [
        ["ml-dev-env-0", "ml-dev-env-1"]
    ]  # inside the rack first
    (rack,) = doc["node_verdicts"]["racks"]
    assert rack["action"]["id"] == "check-rack-uplink" and doc["node_verdicts"]["links"] == []
    assert "every pair crossing rack rack-a is slow" in log
    assert {c["scope"] for c in _loc(plain)} == {"link"}  # what the topology replaces
    print(
        f"[measured] 4 hosts, rack-a's uplink at 20 mbit/s: {len(rounds)} round(s), suite wall {wall:.1f} s, "
        f"pairs {[(p['nodes'], round(p['gbps'], 4)) for r in rounds for p in r['pairs']]}"
    )


def test_cli_localize_flag_reaches_the_suite(tmp_path: Path) -> None:
    """``mlenv acceptance --local --localize``: the check runs though --checks does not name it
    (one machine is one node: nothing between nodes to localize, said so). Only the
    environment check besides: no figure that a loaded machine could make an outlier."""
    report = tmp_path / "report"
    env = dict(os.environ, PYTHONPATH=str(ROOT), DS_ACCELERATOR="cpu", MPLBACKEND="Agg")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlenv",
            "acceptance",
            "--local",
            "--nproc",
            "2",
            "--localize",
            "--checks",
            "environment",
            "--report-dir",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    doc = json.loads((report / "results.json").read_text())
    (entry,) = _loc(doc)
    assert entry["status"] == "SKIP" and entry["reasons"] == [
        "one node: no link between nodes to localize"
    ]
    assert "fabric.localize" in p.stdout


@pytest.mark.serial
def test_slow_node_fault_without_root(tmp_path: Path) -> None:
    """Where the netns harness cannot run: four real gloo ranks as four "nodes" on loopback,
    node 2's leader stretched by the ``slow`` fault (its timed calls really take 200x).

    Margins, from the CI run that failed with 50x and slow_frac 0.8 (bar at a fifth of the
    reference): on a loaded 2-core machine a healthy loopback pair measured 0.0345 GB/s
    beside 0.27 (8x apart) and was named a slow link. Now the bar is 1/33 of the reference:
    node 2's pairs fall ~6x under it, a healthy pair must be 33x off to cross it. Serial:
    four ranks judged against each other, as the other outlier tests."""
    from checks_harness import WorldSpec, run_world

    spec = WorldSpec(
        nprocs=4,
        nnodes=4,
        checks=["fabric.localize"],
        deadline_s=60,
        options={
            "fabric.localize": {"mode": "always", "bytes": 262144, "iters": 5, "slow_frac": 0.97}
        },
        env={"MLENV_FAULT": "slow:node=2,factor=200,check=fabric.localize"},
    )
    records = run_world(spec, tmp_path)
    assert all(r["error"] is None for r in records), records
    results = records[0]["results"]
    assert [(r["status"], r["scope"], r["node"]) for r in results] == [("FAIL", "node", "node2")], (
        results
    )
    entry = results[0]
    assert len(entry["details"]["rounds"]) == 2
    assert all(r["results"] == [] for r in records[1:])  # rank 0 reports for the world
