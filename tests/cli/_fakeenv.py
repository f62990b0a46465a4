"""Helpers for CLI tests of the cluster verbs: a fake-cluster state file, injected for one
CliRunner invocation through the client factory (``mlenv.cluster.connect.use_factory``)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner, Result

from mlenv.cli.app import app
from mlenv.cluster.connect import use_factory
from mlenv.config import load
from mlenv.testing.fakecluster import FakeCluster
from mlenv.testing.fakecluster.session import state_file

ROOT = Path(__file__).resolve().parents[2]


def fake_state(tmp_path: Path, cluster: str = "barcelona", *, rdma: bool = True) -> Path:
    """Write a fake that satisfies the example cluster's preflight; returns the state path."""
    cfg = load(cluster, ROOT)
    names = list(cfg.gpu_nodes) or [f"gpu-{i}" for i in range(cfg.gpus.default_nodes)]
    fake = FakeCluster.typical(
        cfg.namespace,
        names,
        gpus=cfg.gpus.per_node,
        resources={r.name: r.count for r in cfg.rdma.resources} if rdma else None,
        networks=cfg.rdma.networks if rdma else (),
    )
    for sc in {cfg.storage.class_rwx, cfg.storage.class_rwo} - {""}:
        fake.add_storage_class(sc)
    if cfg.cluster.api:
        fake.server_url = (
            cfg.cluster.api if "://" in cfg.cluster.api else f"https://{cfg.cluster.api}"
        )
    path = tmp_path / "fake-cluster.json"
    fake.save(str(path))
    return path


def run(args: list[str], state: Path | None, monkeypatch, input: str | None = None) -> Result:
    """Invoke ``mlenv ARGS`` with the repo as root and, with a ``state``, the fake as the
    cluster (without one, the real client: whatever ``kubectl`` is on PATH)."""
    monkeypatch.setenv("MLENV_ROOT", str(ROOT))
    if state is None:
        monkeypatch.setenv("MLENV_STATE_DIR", str(ROOT / ".pytest_cache" / "mlenv-state"))
        return CliRunner().invoke(app, args, input=input)
    # `deploy` records the current cluster: next to the fake, never in the repo
    monkeypatch.setenv("MLENV_STATE_DIR", str(state.parent / ".mlenv"))
    with use_factory(state_file(state)):
        return CliRunner().invoke(app, args, input=input)
