"""``mlenv status`` before and after deploy."""

from __future__ import annotations

from _fakeenv import fake_state, run


def test_status_without_deployment(tmp_path, monkeypatch) -> None:
    r = run(["status", "barcelona"], fake_state(tmp_path), monkeypatch)
    assert r.exit_code == 0 and "no pods (not deployed?" in r.output


def test_status_shows_each_pods_rdma_interfaces(tmp_path, monkeypatch) -> None:
    import json

    from mlenv.cluster.status import READ_ARGV
    from mlenv.testing.fakecluster import FakeCluster

    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    fake = FakeCluster.load(str(state))
    doc = {
        "pod": "ml-dev-env-1",
        "mode": "rdma",
        "interfaces": ["eth0", "net1"],
        "checks": [
            {
                "variable": "NCCL_SOCKET_IFNAME",
                "configured": ["net1", "net2"],
                "present": ["net1"],
                "missing": ["net2"],
                "value": "net1",
            }
        ],
    }
    # what pod init wrote in ml-dev-env-1 (ml-dev-env-0 runs an image without the file)
    fake.pod_exec_responses["ml-dev-env-1"] = {
        " ".join(READ_ARGV): {"rc": 0, "stdout": json.dumps(doc)}
    }
    fake.save(str(state))
    r = run(["status", "barcelona"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert (
        "ml-dev-env-1: RDMA interfaces: NCCL_SOCKET_IFNAME: present net1, MISSING net2" in r.output
    )
    assert "ml-dev-env-0: RDMA interfaces" not in r.output


def test_the_in_pod_reader_finds_what_pod_init_wrote(tmp_path) -> None:
    import os
    import subprocess
    import sys

    from mlenv.cluster.status import READ_INTERFACES

    (tmp_path / "interfaces.json").write_text('{"pod": "p", "checks": []}')
    out = subprocess.run(
        [sys.executable, "-c", READ_INTERFACES],
        capture_output=True,
        text=True,
        env={**os.environ, "MLENV_STATE_DIR": str(tmp_path)},
        check=True,
    )
    assert out.stdout.strip() == '{"pod": "p", "checks": []}'


def test_a_users_mlenv_folder_in_the_workspace_is_not_what_the_reader_imports(
    tmp_path,
) -> None:
    """The exec runs in the image's WORKDIR, /workspace, where sync puts the user's tree;
    ``python3 -c`` puts it first on sys.path, so a user's own ``mlenv/`` was imported."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from mlenv.cluster.status import READ_ARGV

    root = Path(__file__).resolve().parents[2]
    ws = tmp_path / "workspace"
    (ws / "mlenv").mkdir(parents=True)
    (ws / "mlenv" / "__init__.py").write_text("raise SystemExit('the user module ran')\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)  # the image's python3
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "interfaces.json").write_text('{"pod": "p", "checks": []}')
    out = subprocess.run(
        list(READ_ARGV),
        cwd=ws,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PATH": f"{bindir}:{os.environ['PATH']}",
            "PYTHONPATH": str(root),
            "MLENV_STATE_DIR": str(tmp_path / "state"),
        },
        check=False,
    )
    assert (out.returncode, out.stdout.strip()) == (0, '{"pod": "p", "checks": []}'), out.stderr
