"""``platform: hosts``: the suite over real sshd on two netns hosts.

This machine is the head (it runs ``mlenv``); each netns host runs an sshd that accepts
a key made for the test. ``nodes.gpu_nodes`` lists the hosts' addresses (this machine
reaches them over the harness's bridge, to which it gets ``<subnet>.1``). ssh reads
``MLENV_SSH_CONFIG`` (a known_hosts file under the test's temp dir, so root's own is not
touched). Tests run in file order: PASS first, then a host whose sshd is stopped.

The hosts share this machine's files but for what each mounts over in its own mount
namespace: ``<root>/ctl`` (files only the control host has: an options file) and the
login directory's ``mlenv-results`` (each host's own run folders without a shared
folder), as separate machines would. ``hosts.python`` runs this checkout's mlenv
(``PYTHONPATH``): sshd gives the sessions a fresh environment, and the venv's own mlenv
is another checkout's.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import netns
from harness import slurm as slurm_harness
from harness.nodepy import node_python

# module-scoped harness: the whole module runs on one worker (tests/conftest.py)
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("hosts")]

CLUSTER = "hosts-harness"
REPO = Path(__file__).resolve().parents[2]
# The ssh user's login directory on the hosts (root's), where runs without a shared folder
# keep their folders (mlenv.platforms.hosts.REMOTE_RESULTS)
REMOTE_RESULTS = Path(os.path.expanduser("~root")) / "mlenv-results"
BASELINE = str(Path(__file__).parent / "harness" / "baseline_harness.yaml")
SMALL = str(Path(__file__).parent / "harness" / "acceptance_small.json")


class Env:
    def __init__(self, root: Path, pods: netns.Cluster, sshd: list[subprocess.Popen[str]]) -> None:
        self.root, self.pods, self.sshd = root, pods, sshd

    def mlenv(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "MLENV_ROOT": str(self.root),
            "MLENV_SSH_CONFIG": str(self.root / "ssh_config"),
            "TORCH_EXTENSIONS_DIR": os.environ.get(
                "TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/mlenv/torch_extensions")
            ),
            "OMP_NUM_THREADS": "1",
        }
        return subprocess.run(
            [sys.executable, "-m", "mlenv", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            check=False,
        )


def _sshd_config(root: Path, pods: netns.Cluster) -> Path:
    f = root / "sshd_config"
    f.write_text(
        f"Port 22\nListenAddress 0.0.0.0\nHostKey {pods.secret_dir}/ssh_host_ed25519_key\n"
        f"AuthorizedKeysFile {root}/authorized_keys\nPermitRootLogin prohibit-password\n"
        "StrictModes no\nUsePAM no\nPidFile none\nPasswordAuthentication no\n"
    )
    return f


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    why = netns.unavailable_reason()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("hosts")
    pods = netns.Cluster(2, str(root / "pods"))
    pods.setup()
    sshd: list[subprocess.Popen[str]] = []
    try:
        subprocess.run(
            ["ip", "addr", "add", f"{pods._subnet()}.1/24", "dev", pods.bridge],
            check=True,
            capture_output=True,
        )
        netns.keypair(str(root / "id"))
        (root / "authorized_keys").write_text((root / "id.pub").read_text())
        (root / "ssh_config").write_text(
            f"UserKnownHostsFile {root}/known_hosts\nStrictHostKeyChecking no\nLogLevel ERROR\n"
        )
        cfg = _sshd_config(root, pods)
        sshd_bin = "/usr/sbin/sshd"
        (root / "ctl").mkdir()
        REMOTE_RESULTS.mkdir(
            exist_ok=True
        )  # the mount point (empty here: each host mounts its own)
        for i in range(2):
            slurm_harness.private_shm(pods, i)  # each host its own /dev/shm, as real machines
            for d in (root / "ctl", REMOTE_RESULTS):
                r = pods.run(
                    i,
                    ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(d)],
                    dict(os.environ),
                    timeout=20,
                )
                assert r.returncode == 0, f"host {i}: mount {d}: {r.stdout}"
            with open(root / f"sshd-{i}.log", "w", encoding="utf-8") as log:
                sshd.append(
                    pods.popen(
                        i,
                        [sshd_bin, "-D", "-e", "-f", str(cfg)],
                        dict(os.environ),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        (root / "clusters").mkdir()
        (root / "shared").mkdir()
        addrs = [p.address for p in pods.pods]
        py = root / "python"  # this checkout's mlenv on the hosts, whatever the venv installed
        py.write_text(
            f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} "$@"\n'
        )
        py.chmod(0o755)
        (root / "clusters" / f"{CLUSTER}.yaml").write_text(
            f"cluster:\n  name: {CLUSTER}\n  namespace: unused\nplatform: hosts\n"
            f"nodes:\n  gpu_nodes: [{addrs[0]}, {addrs[1]}]\n"
            f"hosts:\n  ssh_user: root\n  ssh_key: {root}/id\n  shared_dir: {root}/shared\n"
            f"  python: {py}\n"
            "network:\n  tcp:\n    interface_exclude: lo\ngpus:\n  per_node: 2\n  type: cpu\n  default_nodes: 2\n"
        )
        e = Env(root, pods, sshd)
        end = time.monotonic() + 20
        while True:
            r = e.mlenv("deploy", CLUSTER, timeout=60)
            if r.returncode == 0:
                break
            if time.monotonic() > end:
                # every test of the module would fail the same way: say why once, with
                # what each sshd printed and whether it still runs
                logs = "\n".join(
                    f"sshd {i} ({'running' if p.poll() is None else f'exited {p.returncode}'}): "
                    + (root / f"sshd-{i}.log").read_text()[-1500:]
                    for i, p in enumerate(sshd)
                )
                pytest.fail(f"the hosts never answered: {r.stdout}{r.stderr}\n{logs}")
            time.sleep(0.5)
        yield e
    finally:
        for p in sshd:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait(timeout=10)
        pods.teardown()


def test_hosts_preflight_and_acceptance_2x2_pass(env: Env) -> None:
    r = env.mlenv("deploy", CLUSTER)
    assert r.returncode == 0, r.stdout + r.stderr
    for p in env.pods.pods:
        assert f"preflight: host {p.address}: python" in r.stdout
    t0 = time.monotonic()
    r = env.mlenv("acceptance", "--cluster", CLUSTER, "--baseline", BASELINE, "--options", SMALL)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "verdict: PASS" in r.stdout
    runs = list(
        (env.root / "reports" / CLUSTER).glob("2*")
    )  # run folders (history.jsonl beside them)
    assert len(runs) == 1
    doc = json.loads((runs[0] / "results.json").read_text())
    # the run is in the control host's history (a scheduled cron run is in the trends)
    hist = [
        json.loads(line)
        for line in (env.root / "reports" / CLUSTER / "history.jsonl").read_text().splitlines()
    ]
    assert [h["run_id"] for h in hist] == [doc["run_id"]] and hist[0]["report_dir"] == str(
        runs[0].resolve()
    )
    assert json.loads((runs[0] / "record.json").read_text()) == hist[0]
    assert doc["verdict"] == "PASS" and doc["world"]["nodes"] == 2 and doc["world"]["ranks"] == 4
    assert sorted(set(doc["world"]["hosts"])) == [p.hostname for p in env.pods.pods]
    print(f"\nhosts 2x2 CPU ranks over ssh, quick profile (small sizes): {wall:.1f} s")


def test_hosts_without_shared_dir_ship_the_options_and_copy_the_reports_back(env: Env) -> None:
    """the options and baseline files are on this machine only (the hosts
    cannot see ctl/); each host gets a copy and the option shows in results.json; rank 0's
    reports come back from host 0's own folder into reports/<cluster>/<run-id>/ with every
    host's rank logs, and this machine's history gets the run once. Before: exit 2."""
    name = "hosts-noshare"
    text = (env.root / "clusters" / f"{CLUSTER}.yaml").read_text()
    (env.root / "clusters" / f"{name}.yaml").write_text(
        text.replace(f"name: {CLUSTER}", f"name: {name}").replace(
            f"  shared_dir: {env.root}/shared\n", ""
        )
    )
    opts = json.loads(Path(SMALL).read_text())
    opts["compute.matmul"] = {"n": 96}  # over the family's n (128): what results.json must show
    (env.root / "ctl" / "opts.json").write_text(json.dumps(opts))
    (env.root / "ctl" / "baseline.yaml").write_text(Path(BASELINE).read_text())
    t0 = time.monotonic()
    # The compute checks only: what this test proves is the files' journey (the option's
    # shape in results.json, every report file and both hosts' logs back here); the whole
    # suite over these hosts is test_hosts_preflight_and_acceptance_2x2_pass's. 195 s once
    # with the whole suite on the 2-core sandbox shared with other workers' tiers.
    r = env.mlenv(
        "acceptance",
        "--cluster",
        name,
        "--checks",
        "compute",
        "--baseline",
        str(env.root / "ctl" / "baseline.yaml"),
        "--options",
        str(env.root / "ctl" / "opts.json"),
        timeout=600,
    )
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "verdict: PASS" in r.stdout
    runs = list((env.root / "reports" / name).glob("2*"))
    assert len(runs) == 1, runs
    run = runs[0]
    doc = json.loads((run / "results.json").read_text())
    assert doc["verdict"] == "PASS" and doc["world"]["ranks"] == 4
    assert {
        tuple(c["details"]["shape"]) for c in doc["checks"] if c["name"] == "compute.matmul"
    } == {(96, 96, 96)}
    for f in (
        "summary.md",
        "record.json",
        "junit.xml",
        "inputs/options.json",
        "inputs/baseline.yaml",
    ):
        assert (run / f).is_file(), f
    hostnames = sorted(p.hostname for p in env.pods.pods)
    logs = sorted(p.name for p in (run / "logs").glob("rank*.log"))
    assert sorted({x.split(".", 1)[1].removesuffix(".log") for x in logs}) == hostnames, (
        logs
    )  # both hosts'
    history = (env.root / "reports" / name / "history.jsonl").read_text().splitlines()
    assert [json.loads(x)["run_id"] for x in history] == [run.name]
    assert not (REMOTE_RESULTS / run.name).exists()  # the hosts' folders are theirs: this is a copy
    r = env.mlenv("logs", name, "--tail", "200")
    assert r.returncode == 0 and "# rank 0 on " in r.stdout, r.stdout[-2000:] + r.stderr
    print(f"\nhosts 2x2 without shared_dir (options shipped, reports copied back): {wall:.1f} s")


def test_hosts_sync_status_teardown(env: Env) -> None:
    (env.root / "workspace" / "sub").mkdir(parents=True)
    (env.root / "workspace" / "sub" / "it's a file.py").write_text("print(1)\n")
    r = env.mlenv("sync", CLUSTER)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        env.root / "shared" / "workspace" / "sub" / "it's a file.py"
    ).read_text() == "print(1)\n"
    r = env.mlenv("status", CLUSTER)
    assert r.returncode == 0, r.stderr
    for p in env.pods.pods:
        assert f"host {p.address}" in r.stdout and "up, python" in r.stdout
    r = env.mlenv("teardown", CLUSTER)
    assert r.returncode == 0 and "leaves nothing running" in r.stdout
    r = env.mlenv(
        "shell", CLUSTER, "--pod", "1", "--", "sh", "-c", 'hostname; printf %s "$1"', "x", "$(id);y"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == f"{env.pods.pods[1].hostname}\n$(id);y"


def test_a_host_python_without_mlenv_is_stopped_and_stage_brings_it(env: Env) -> None:
    """Over ssh: preflight names the missing module and `mlenv stage`; stage
    makes the venv in the shared folder through host 0; the run then passes through it."""
    name = "hosts-stage"
    py = node_python(env.root)
    text = (env.root / "clusters" / f"{CLUSTER}.yaml").read_text()
    (env.root / "clusters" / f"{name}.yaml").write_text(
        text.replace(f"name: {CLUSTER}", f"name: {name}").replace(
            f"python: {env.root / 'python'}", f"python: {py}"
        )
    )
    r = env.mlenv("deploy", name)
    assert r.returncode == 3, r.stdout + r.stderr
    line = next(x for x in r.stderr.splitlines() if "cannot import" in x)
    assert f"{py} cannot import mlenv (ModuleNotFoundError: No module named 'mlenv')" in line, (
        r.stderr
    )
    assert f"run `mlenv stage {name}`" in line and line.rstrip().endswith("nothing was launched")
    t0 = time.monotonic()
    r = env.mlenv("stage", name, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    venv = env.root / "shared" / ".mlenv" / "venv" / name
    assert f"staged {venv}" in r.stdout
    print(f"\nmlenv stage over ssh: {time.monotonic() - t0:.1f} s")
    # The compute checks only: what this proves is that all 4 ranks run through the
    # staged venv; the whole suite over ssh is test_hosts_preflight_and_acceptance_2x2_pass's
    # (with it this test took 165 s of a CI worker, mostly DeepSpeed's training check).
    r = env.mlenv(
        "acceptance",
        "--cluster",
        name,
        "--checks",
        "compute",
        "--baseline",
        BASELINE,
        "--options",
        SMALL,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "verdict: PASS" in r.stdout
    (run,) = (env.root / "reports" / name).glob("2*")
    doc = json.loads((run / "results.json").read_text())
    assert doc["world"]["ranks"] == 4 and {
        c["rank"] for c in doc["checks"] if c["name"] == "compute.matmul"
    } == {0, 1, 2, 3}


def _running(pattern: str) -> list[str]:
    return subprocess.run(
        ["pgrep", "-f", pattern], capture_output=True, text=True, check=False
    ).stdout.split()


def test_sigterm_stops_the_run_on_every_host_and_logs_shows_the_heads_log(env: Env) -> None:
    """SIGTERM to mlenv once the 4 ranks run: every rank and ssh session ends
    (pkill over ssh), exit 143; `logs` then prints rank 0's log of that run."""
    ranks = f"mlenv.acceptance.*{env.root}/shared/results/"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlenv",
            "acceptance",
            "--cluster",
            CLUSTER,
            "--baseline",
            BASELINE,
            "--options",
            SMALL,
        ],
        env={
            **os.environ,
            "MLENV_ROOT": str(env.root),
            "MLENV_SSH_CONFIG": str(env.root / "ssh_config"),
            "OMP_NUM_THREADS": "1",
        },
        cwd=env.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        end = time.monotonic() + 180
        # once rank 0 has a result (its handlers are set: it finalises on SIGTERM) and all 4 run
        while (
            not (
                len(_running(f"python -u -m {ranks}")) == 4
                and list((env.root / "shared").glob("results/*/results.jsonl"))
            )
            and time.monotonic() < end
        ):
            assert p.poll() is None, p.communicate()[0][-3000:]
            time.sleep(0.5)
        assert len(_running(f"python -u -m {ranks}")) == 4, _running(ranks)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=120)
        print(f"\nSIGTERM to a 2x2 hosts run: ended in {time.monotonic() - t0:.1f} s")
        assert p.returncode == 143, out[-3000:]
        # (the hosts' torchrun prints its own SignalException traceback through ssh: not mlenv's)
        assert "SIGTERM: stopping run" in out and "verdict: INTERRUPTED" in out, out[-3000:]
        assert _running(f"{env.root}/shared/results/") == []
    finally:
        p.kill()
        for pid in _running(f"{env.root}/shared/results/"):
            os.kill(int(pid), signal.SIGKILL)
    r = env.mlenv("logs", CLUSTER, "--tail", "200")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# rank 0 on ") or "# rank 0 on " in r.stdout, r.stdout[-2000:]


def test_host_with_ssh_down_is_named_before_launch(env: Env) -> None:
    victim = env.pods.pods[1]
    os.killpg(env.sshd[1].pid, 9)
    env.sshd[1].wait(timeout=10)
    before = (
        set((env.root / "shared").glob("results/*"))
        if (env.root / "shared" / "results").exists()
        else set()
    )
    r = env.mlenv(
        "acceptance", "--cluster", CLUSTER, "--baseline", BASELINE, "--options", SMALL, timeout=60
    )
    assert r.returncode == 3, r.stdout + r.stderr
    assert (
        f"host {victim.address}: ssh unreachable" in r.stderr and "nothing was launched" in r.stderr
    )
    assert f"host {env.pods.pods[0].address}" not in r.stderr
    after = (
        set((env.root / "shared").glob("results/*"))
        if (env.root / "shared" / "results").exists()
        else set()
    )
    assert after == before, "a run was started"
    r = env.mlenv("status", CLUSTER)
    assert f"host {victim.address}: ssh unreachable" in r.stdout
    assert (
        r.returncode == 0 and f"unreachable over ssh: {victim.address} (1 of 2 hosts)" in r.stderr
    ), r.stderr
    # ssh's own failure is one line naming the host, exit 3 (not 255 and ssh's text)
    r = env.mlenv("shell", CLUSTER, "--pod", "1", "--", "true", timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert (
        r.stderr.strip().startswith(f"error: shell: host {victim.address}: ")
        and len(r.stderr.splitlines()) == 1
    )
