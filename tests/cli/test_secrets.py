"""``mlenv secrets`` (GitOps): the Secrets a rendered tree needs, printed for sealing."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mlenv.cli.app import app
from mlenv.cluster import keys
from mlenv.cluster.deploy import secret_labels
from mlenv.config import load

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None, reason="ssh-keygen (openssh-client) not installed"
)


def _run(args: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setenv("MLENV_ROOT", str(ROOT))
    r = CliRunner().invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


def test_prints_ssh_and_devtools_secrets_deploy_would_keep(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = _run(["secrets", "barcelona", "--mode", "rdma"], monkeypatch)
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    cfg = load("barcelona", ROOT)
    by_name = {d["metadata"]["name"]: d for d in docs}
    ssh = by_name[keys.SECRET_NAME]
    assert ssh["metadata"]["namespace"] == cfg.namespace
    # what a GitOps tool applies from this output is what deploy then keeps (not regenerated)
    assert keys.reusable(ssh, keys.KEY_FILES, secret_labels(cfg))
    assert base64.b64decode(ssh["data"]["id_ed25519"]).startswith(
        b"-----BEGIN OPENSSH PRIVATE KEY-----"
    )
    assert "encrypt before committing" in err
    # barcelona's rendered dev tools refer to the credentials Secret, so it is printed too
    uses_devtools = keys.DEVTOOLS_SECRET in "".join(
        p.read_text() for p in (ROOT / "k8s" / "barcelona" / "rdma").glob("*.yaml")
    )
    assert (keys.DEVTOOLS_SECRET in by_name) == uses_devtools


def test_fresh_keys_every_time_and_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    _, a, _ = _run(["secrets", "local", "--mode", "tcp", "-o", "json"], monkeypatch)
    _, b, _ = _run(["secrets", "local", "--mode", "tcp", "-o", "json"], monkeypatch)
    la, lb = json.loads(a), json.loads(b)
    assert la["kind"] == "List" and la["items"][0]["kind"] == "Secret"
    assert la["items"][0]["data"]["id_ed25519"] != lb["items"][0]["data"]["id_ed25519"]


@pytest.mark.parametrize(
    "args",
    [
        ["secrets", "barcelona", "--mode", "--kubeconfig=x"],
        ["secrets", "barcelona", "-o", "table"],
        ["secrets", "no-such-cluster"],
    ],
)
def test_bad_input_is_exit_2(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = _run(args, monkeypatch)
    assert code == 2 and "BEGIN OPENSSH" not in out
