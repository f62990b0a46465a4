"""the harness's own machinery: its bounded run never hangs on a pipe a grandchild still
holds, and two clusters alive at once never share a subnet."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import netns
from harness.netns import run_bounded

# The child leaves a grandchild that keeps stdout open and sleeps; the grandchild moves to
# its own session, so killing the child's group does not reach it: only abandoning the
# pipe ends the wait.
SCRIPT = r"""
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(60)"])
print("started", flush=True)
time.sleep(60)
"""


def test_harness_run_returns_after_its_timeout_despite_a_grandchild() -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    t = time.monotonic()
    res = run_bounded(p, timeout=1.0)
    took = time.monotonic() - t
    assert res.returncode == 124
    assert took < 10, f"run blocked {took:.1f} s on the grandchild's pipe"


def test_run_bounded_returns_output_of_a_quick_command() -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", "print('hi')"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    res = run_bounded(p, timeout=10)
    assert res.returncode == 0 and res.stdout == "hi\n"


needs_ip = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/sbin/ip").exists() and not Path("/sbin/ip").exists(),
    reason="claims live under /run and read this machine's routes (root, iproute2)",
)


@needs_ip
def test_two_live_clusters_whose_tags_start_alike_get_different_subnets(tmp_path: Path) -> None:
    """The subnet once came from the tag's first byte: two clusters in two test workers
    with tags ``de…`` both took 10.231.222, and the hosts harness's ssh reached the Slurm
    harness's node (no sshd there: connection refused)."""
    a = netns.Cluster(2, str(tmp_path / "a"), tag="de0001")
    b = netns.Cluster(2, str(tmp_path / "b"), tag="de0002")
    try:
        a._claim_subnet()
        b._claim_subnet()
        assert a._subnet() != b._subnet(), (a._subnet(), b._subnet())
    finally:
        a._release_subnet()
        b._release_subnet()


@needs_ip
def test_a_claim_left_by_a_dead_run_is_taken_over_and_a_routed_subnet_is_skipped(
    tmp_path: Path,
) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    c = netns.Cluster(2, str(tmp_path / "c"), tag="d00000")
    c._claim_subnet()
    first = c.octet
    c._release_subnet()
    os.makedirs(netns.SUBNETS, exist_ok=True)
    stale = Path(netns.SUBNETS) / str(first)
    stale.write_text(dead.stdout)  # a claimer that has exited
    try:
        c._claim_subnet()
        assert c.octet == first and stale.read_text().strip() == str(os.getpid())
    finally:
        c._release_subnet()
    assert not stale.exists()
    # this machine routes the octet (an address on some other link): never claimed
    dev = f"mlt{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", dev, "type", "bridge"], check=True, capture_output=True)
    try:
        subprocess.run(
            ["ip", "addr", "add", f"10.231.{first}.1/24", "dev", dev],
            check=True,
            capture_output=True,
        )
        subprocess.run(["ip", "link", "set", dev, "up"], check=True, capture_output=True)
        c._claim_subnet()
        assert c.octet != first
    finally:
        c._release_subnet()
        subprocess.run(["ip", "link", "del", dev], capture_output=True, check=False)
