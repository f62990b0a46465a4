"""``mlenv deploy`` through CliRunner against the fake cluster."""

from __future__ import annotations

import yaml
from _fakeenv import ROOT, fake_state, run

from mlenv.testing.fakecluster import FakeCluster


def test_dry_run_client_prints_the_plan_without_a_cluster(monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")  # must not be read
    r = run(["deploy", "barcelona", "--mode", "rdma", "--dry-run", "client"], None, monkeypatch)
    assert r.exit_code == 0, r.output
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert [d["kind"] for d in docs].count("StatefulSet") == 1


def test_deploy_then_unchanged_then_status(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    r = run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "deployed barcelona: 2/2 pods Ready (rdma mode)" in r.output
    r = run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 0 and "unchanged: barcelona" in r.output
    r = run(["status", "barcelona"], state, monkeypatch)
    assert r.exit_code == 0
    assert "ml-dev-env-0" in r.output and "workspace-ml-dev-env-1" in r.output


def test_server_dry_run_changes_nothing(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    r = run(["deploy", "barcelona", "--dry-run", "server"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert FakeCluster.load(str(state)).list("StatefulSet", "ml-dev-env") == []


def test_faults_are_one_line_with_exit_codes(tmp_path, monkeypatch) -> None:
    r = run(["deploy", "no-such-cluster"], None, monkeypatch)
    assert r.exit_code == 2 and "Traceback" not in r.output
    r = run(["deploy", "barcelona", "--dry-run", "sideways"], None, monkeypatch)
    assert r.exit_code == 2 and "--dry-run must be client or server" in r.output
    state = fake_state(tmp_path)
    fake = FakeCluster.load(str(state))
    fake.reachable = False
    fake.save(str(state))
    r = run(["deploy", "barcelona"], state, monkeypatch)
    assert r.exit_code == 3 and "Unable to connect to the server" in r.output
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    r = run(["status", "barcelona"], None, monkeypatch)
    assert r.exit_code == 2 and "kubeconfig" in r.output and "Traceback" not in r.output


def test_no_fallback_exits_3_with_reasons_and_applies_nothing(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path, rdma=False)
    r = run(["deploy", "barcelona", "--no-fallback"], state, monkeypatch)
    assert r.exit_code == 3
    assert "rdma/rdma_shared_device_a" in r.output and "nothing was applied" in r.output
    assert FakeCluster.load(str(state)).list("ServiceAccount", "ml-dev-env") == []


def test_forbidden_is_reported(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    fake = FakeCluster.load(str(state))
    fake.denied = ["create statefulsets"]
    fake.save(str(state))
    r = run(["deploy", "barcelona"], state, monkeypatch)
    assert r.exit_code == 3 and "may not create statefulsets" in r.output


def test_deploy_records_the_current_cluster_for_the_makefile(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    current = tmp_path / ".mlenv" / "current-cluster"
    assert run(["deploy", "barcelona", "--dry-run", "server"], state, monkeypatch).exit_code == 0
    assert not current.exists()  # a dry run deploys nothing
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    assert current.read_text() == "barcelona\n"


def test_server_dry_run_reports_what_it_would_recreate(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    cfg = (ROOT / "clusters" / "barcelona.yaml").read_text()
    changed = tmp_path / "barcelona.yaml"
    changed.write_text(cfg.replace("  vscode: true", "  vscode: true\n  jupyter: true"))
    r = run(["deploy", str(changed), "--dry-run", "server"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert (
        "pod/ml-dev-env-dev: its spec changed in fields a Pod cannot update in place: "
        "would delete and recreate it" in r.stdout
    )
    assert r.stdout.rstrip().endswith("would recreate pod/ml-dev-env-dev; nothing changed")


def test_exec_timeout_setting_is_validated(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MLENV_EXEC_TIMEOUT", "soon")
    r = run(["status", "barcelona"], fake_state(tmp_path), monkeypatch)
    assert r.exit_code == 2
    assert (
        r.stderr.strip() == "error: MLENV_EXEC_TIMEOUT=soon: expected a positive number of seconds"
    )


def test_missing_oc_is_announced_once_on_stderr(tmp_path, monkeypatch) -> None:
    import sys

    bindir = tmp_path / "bin"
    bindir.mkdir()
    kubectl = bindir / "kubectl"  # answers every call with exit 0 and no output
    kubectl.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(0)\n")
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    r = run(["status", "barcelona"], None, monkeypatch)
    assert r.exit_code == 0, r.output
    notices = [line for line in r.stderr.splitlines() if "oc not found" in line]
    assert notices == [
        f"notice: oc not found on PATH: kubectl ({kubectl}) runs every verb but `build`"
    ]
    assert "oc not found" not in r.stdout


def test_the_client_notice_shows_once_per_terminal_session(tmp_path, monkeypatch) -> None:
    """On a terminal, "oc not found" (170 characters) came with every cluster verb; now
    once per terminal session, and again with -v. Scripts still get it every time."""
    import sys

    from mlenv.cli import _common

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("MLENV_NOTICE_DIR", str(tmp_path / "notices"))
    shown: list[str] = []
    monkeypatch.setattr(_common, "err", shown.append)
    monkeypatch.setattr(sys, "stderr", Tty())
    for _ in range(3):
        _common.note_once("client", "notice: oc not found on PATH")
    assert shown == ["notice: oc not found on PATH"]
    monkeypatch.setattr(_common.SETTINGS, "verbose", True)
    _common.note_once("client", "notice: oc not found on PATH")
    assert len(shown) == 2
    monkeypatch.setattr(_common.SETTINGS, "verbose", False)
    (tmp_path / "notices" / "client").write_text("another session")
    _common.note_once("client", "notice: oc not found on PATH")
    assert len(shown) == 3


def test_take_over_flag_through_the_cli(tmp_path, monkeypatch) -> None:
    from mlenv.testing.fakecluster import FakeCluster

    state = fake_state(tmp_path)
    fake = FakeCluster.load(str(state))
    fake.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "ml-dev-env", "labels": {"app": "ml-dev-env-multi"}},
            "spec": {
                "serviceName": "ml-dev-env",
                "selector": {"matchLabels": {"app": "x"}},
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]},
                },
            },
        },
        "ml-dev-env",
        field_manager="kubectl",
    )
    fake.save(str(state))
    r = run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 2, r.output
    assert "statefulset/ml-dev-env: was not created by mlenv" in r.output
    r = run(["deploy", "barcelona", "--timeout", "60", "--take-over"], state, monkeypatch)
    assert r.exit_code == 0, r.output


def test_current_cluster_stores_the_name_not_the_path(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    current = tmp_path / ".mlenv" / "current-cluster"
    # by path to clusters/barcelona.yaml: the name is stored, not the argument
    r = run(
        ["deploy", str(ROOT / "clusters" / "barcelona.yaml"), "--timeout", "60"], state, monkeypatch
    )
    assert r.exit_code == 0, r.output
    assert current.read_text() == "barcelona\n"
    # a copy elsewhere with shell characters in its path is not recorded at all
    odd = tmp_path / "my $(x) dir"
    odd.mkdir()
    (odd / "barcelona.yaml").write_text((ROOT / "clusters" / "barcelona.yaml").read_text())
    r = run(["deploy", str(odd / "barcelona.yaml"), "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "not recording" in r.stderr and current.read_text() == "barcelona\n"


def test_no_mode_is_the_configs_own_mode(tmp_path, monkeypatch) -> None:
    """`--mode` defaulted to rdma whatever the config said (upstream's MODE defaulted to
    tcp): a TCP config deployed in "rdma" mode with a fall-back warning. With no --mode the
    config's own mode is used; a --mode given is still honoured, warning and all."""
    state = fake_state(tmp_path, "nerc-tcp", rdma=False)
    r = run(["deploy", "nerc-tcp", "--dry-run", "client"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr and "(tcp, " in r.stderr, r.stderr
    r = run(["deploy", "nerc-tcp", "--mode", "rdma", "--dry-run", "client"], state, monkeypatch)
    assert r.exit_code == 0 and "falls back to TCP" in r.stderr, r.stderr
    r = run(["deploy", "barcelona", "--dry-run", "client"], None, monkeypatch)  # rdma.enabled: rdma
    assert r.exit_code == 0 and "(rdma, " in r.stderr, r.stderr


def test_a_live_multi_node_deployment_is_not_scaled_down_unless_asked(
    tmp_path, monkeypatch
) -> None:
    """Upstream's `make deploy` (one pod, `--nodes 1`) on a live 2-pod deployment silently
    scaled it to 1 and restarted pod-0; now it is refused, naming both ways on."""
    state = fake_state(tmp_path)
    r = run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    r = run(["deploy", "barcelona", "--nodes", "1", "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "error: barcelona runs 2 pods; --nodes 1 would stop pods 1..1 and restart the others: "
        "add --scale-down if that is meant (make deploy SCALE_DOWN=1), or keep 2 with "
        "`mlenv deploy barcelona` (make deploy-cluster)"
    )
    sts = FakeCluster.load(str(state)).get("StatefulSet", "ml-dev-env", "ml-dev-env")
    assert sts is not None and sts["spec"]["replicas"] == 2  # nothing applied
    # as many pods, or more, is no scale-down
    r = run(["deploy", "barcelona", "--nodes", "2", "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    r = run(
        ["deploy", "barcelona", "--nodes", "1", "--scale-down", "--timeout", "60"],
        state,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    sts = FakeCluster.load(str(state)).get("StatefulSet", "ml-dev-env", "ml-dev-env")
    assert sts is not None and sts["spec"]["replicas"] == 1


def test_rdma_on_an_rdma_less_config_is_said_once_in_lines_that_fit(tmp_path, monkeypatch) -> None:
    """`deploy --mode rdma` on a TCP-only config warned (one 300-character line) and then
    said the same again as a notice."""
    state = fake_state(tmp_path, "nerc-tcp", rdma=False)
    r = run(["deploy", "nerc-tcp", "--mode", "rdma", "--timeout", "60"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    said = [line for line in r.stderr.splitlines() if "TCP" in line and "rdma" in line.lower()]
    assert said == [
        "warning: cluster 'nerc-tcp': network.rdma.enabled: false, so rdma falls back to TCP"
    ], r.stderr
    lines = r.stderr.splitlines()
    start = lines.index(said[0])
    assert all(len(line) <= 100 for line in lines[start : start + 3]), lines[start : start + 3]


def test_dry_run_client_prints_the_plan_as_one_json_or_yaml_list(monkeypatch, tmp_path) -> None:
    """deploy --dry-run client printed data with no -o json|yaml."""
    import json

    r = run(["deploy", "barcelona", "--dry-run", "client", "-o", "json"], None, monkeypatch)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["kind"] == "List" and [i["kind"] for i in doc["items"]].count("StatefulSet") == 1
    r = run(["deploy", "barcelona", "--dry-run", "client", "-o", "yaml"], None, monkeypatch)
    assert yaml.safe_load(r.stdout)["kind"] == "List"
    r = run(["deploy", "barcelona", "-o", "json"], None, monkeypatch)
    assert r.exit_code == 2 and "goes with --dry-run client" in r.stderr
    # a plain Kubernetes config's note on the OpenShift features it leaves off goes to
    # stderr: stdout is the one document (it broke `kubectl apply -f -` of it)
    data = yaml.safe_load((ROOT / "clusters" / "local.yaml").read_text())
    data["platform"] = "kubernetes"
    data["image"] = {"ref": "registry.example.com/ml:1"}
    plain = tmp_path / "plain-local.yaml"
    plain.write_text(yaml.safe_dump(data))
    for fmt, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        r = run(["deploy", str(plain), "--dry-run", "client", "-o", fmt], None, monkeypatch)
        assert r.exit_code == 0, r.output
        assert load(r.stdout)["kind"] == "List", r.stdout[:200]
        assert "OpenShift-only features are off" in r.stderr
