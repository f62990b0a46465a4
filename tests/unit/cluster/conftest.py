"""Fixtures: real example configs (clusters/*.yaml) and a fake cluster that fits them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlenv.config import load
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.testing.fakecluster import FakeCluster

ROOT = Path(__file__).resolve().parents[3]


def fake_for(cfg: ClusterConfig, *, nodes: int | None = None, rdma: bool = True) -> FakeCluster:
    """A fake that satisfies every preflight check of ``cfg`` (tests then break one thing)."""
    names = list(cfg.gpu_nodes) or [f"gpu-{i}" for i in range(nodes or cfg.gpus.default_nodes)]
    fake = FakeCluster.typical(
        cfg.namespace,
        names,
        gpus=cfg.gpus.per_node,
        resources={r.name: r.count for r in cfg.rdma.resources} if rdma else None,
        networks=cfg.rdma.networks if rdma else (),
        storage_classes=["standard"],
    )
    for sc in {cfg.storage.class_rwx, cfg.storage.class_rwo} - {""}:
        fake.add_storage_class(sc)
    if cfg.cluster.api:
        fake.server_url = (
            cfg.cluster.api if "://" in cfg.cluster.api else f"https://{cfg.cluster.api}"
        )
    return fake


@pytest.fixture
def barcelona() -> ClusterConfig:
    """The RDMA example: 4 pinned nodes, RoCE networks, per-pod volumes."""
    return load("barcelona", ROOT)


@pytest.fixture
def local_cfg() -> ClusterConfig:
    """The TCP demo profile."""
    return load("local", ROOT)


@pytest.fixture(name="fake_for")
def fake_for_fixture():
    """The :func:`fake_for` factory, as a fixture."""
    return fake_for


_FAKE_CLIENT = r"""
import json, os, sys, time
argv = sys.argv[1:]
with open(os.environ["FAKEBIN_RESPONSES"], encoding="utf-8") as fh:
    responses = json.load(fh)
# read stdin only where the real tool would (apply -f -, exec -i): an inherited terminal
# or pipe must not block the fake; an "early" answer comes before any input is read (a
# missing pod, a command that never reads), as kubectl gives it to a caller still writing
early = any(r.get("early") and all(t in argv for t in r.get("match", [])) for r in responses)
wants = ("--filename=-" in argv or "-i" in argv) and sys.stdin and not early
stdin = sys.stdin.read() if wants else ""
with open(os.environ["FAKEBIN_LOG"], "a", encoding="utf-8") as fh:
    fh.write(json.dumps({"tool": os.path.basename(sys.argv[0]), "argv": argv, "stdin": stdin}) + "\n")
for r in responses:
    if all(tok in argv for tok in r.get("match", [])) and r.get("stdin_has", "") in stdin:
        time.sleep(r.get("sleep", 0))
        sys.stdout.write(r.get("stdout", ""))
        sys.stderr.write(r.get("stderr", ""))
        sys.exit(r.get("rc", 0))
"""


class FakeBin:
    """A PATH holding a fake ``oc`` or ``kubectl`` that records every argv (and stdin) and
    answers from a list of ``{"match": [tokens…], "stdin_has": text, "stdout", "stderr", "rc",
    "sleep", "early"}`` (``early``: answered before any stdin is read)."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        import shutil
        import sys

        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.log = root / "calls.jsonl"
        self.responses = root / "responses.json"
        self.respond([])
        self.script = root / "fakeclient.py"
        self.script.write_text(_FAKE_CLIENT)
        self._python = sys.executable
        for tool in ("tar",):  # the kubectl sync path packs the tree with tar
            real = shutil.which(tool)
            if real:
                (self.bin / tool).symlink_to(real)
        monkeypatch.setenv("PATH", str(self.bin))
        monkeypatch.setenv("FAKEBIN_LOG", str(self.log))
        monkeypatch.setenv("FAKEBIN_RESPONSES", str(self.responses))
        for var in (
            "KUBECONFIG",
            "OPENSHIFT_CLIENT_PYTHON_DEFAULT_PROJECT",
            "OPENSHIFT_CLIENT_PYTHON_DEFAULT_CONFIG_PATH",
            "OPENSHIFT_CLIENT_PYTHON_DEFAULT_API_SERVER",
            "OPENSHIFT_CLIENT_PYTHON_DEFAULT_OC_LOGLEVEL",
        ):
            monkeypatch.delenv(var, raising=False)

    def install(self, tool: str) -> str:
        """Put a fake ``tool`` (oc or kubectl) on PATH; returns its path."""
        path = self.bin / tool
        path.write_text(f"#!{self._python}\nexec(open({str(self.script)!r}).read())\n")
        path.chmod(0o755)
        return str(path)

    def respond(self, responses: list[dict[str, object]]) -> None:
        """The answers, first match wins; no match: exit 0 with no output."""
        import json

        self.responses.write_text(json.dumps(responses))

    def calls(self) -> list[list[str]]:
        """Every argv the fake tools were called with, oldest first."""
        return [list(c["argv"]) for c in self.records()]  # type: ignore[call-overload]

    def records(self) -> list[dict[str, object]]:
        """Every call with tool, argv and stdin."""
        import json

        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeBin:
    """A PATH with nothing but the fake client tools a test installs (and tar)."""
    return FakeBin(tmp_path / "fakebin", monkeypatch)
