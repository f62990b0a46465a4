"""kubectl/oc habits: global -n/--context/--kubeconfig/-q/-v before or after the
verb, -o json|yaml, -h, mlenv help, completion, teardown --dry-run, logs --tail. Bash
completion as the shell runs it and mlenv found from any folder of the checkout start
``mlenv`` processes: ``tests/integration/test_cli_processes.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import pytest
import typer
import yaml
from _fakeenv import ROOT, fake_state, run

from mlenv.cluster.oc import raw_list_path
from mlenv.contract import APP, LABEL_INSTANCE, LABEL_NAME
from mlenv.testing.fakecluster import FakeCluster
from mlenv.workload import workload_for

STATEFULSET = workload_for().name
pod_name = workload_for().pod_name

# -- a recording stand-in for the client binary (argv checks only; the real kubectl is
#    exercised by tests/integration/test_unreachable_client.py) -------------------------

_RECORDER = """#!{python}
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["REC_LOG"], "a") as fh:
    fh.write(json.dumps(argv) + "\\n")
if "view" in argv:
    print("https://api.example.test:6443", end="")
for answer in json.loads(os.environ.get("REC_ANSWERS") or "[]"):
    if all(tok in argv for tok in answer["match"]):
        print(answer["stdout"], end="")
        break
"""


@pytest.fixture
def recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``kubectl`` on PATH that records its argv and answers every call empty (exit 0)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "kubectl"
    exe.write_text(_RECORDER.format(python=sys.executable))
    exe.chmod(0o755)
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("REC_LOG", str(log))
    monkeypatch.delenv("MLENV_FAKE_CLUSTER", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return log


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_context_and_kubeconfig_reach_every_client_call(tmp_path, monkeypatch, recorder) -> None:
    kc = tmp_path / "my kubeconfig"  # a space: one argv word all the same
    kc.write_text("apiVersion: v1\nkind: Config\n")
    ctx = "team-a/api-x-example-com:6443/alice"  # the shape `oc login` writes
    r = run(["status", "barcelona", "--context", ctx, "--kubeconfig", str(kc)], None, monkeypatch)
    assert r.exit_code == 0, r.output
    calls = _calls(recorder)
    assert len(calls) >= 3  # config view, the probe, the status reads
    for argv in calls:
        assert f"--kubeconfig={kc}" in argv and f"--context={ctx}" in argv, argv
        head = argv[: argv.index("--")] if "--" in argv else argv
        assert f"--context={ctx}" in head  # flags before any '--'
    assert [
        "get",
        "--kubeconfig=" + str(kc),
        f"--context={ctx}",
        "--raw=/version",
        "--request-timeout=10000ms",
    ] in calls


def test_global_options_before_the_verb_too(tmp_path, monkeypatch, recorder) -> None:
    kc = tmp_path / "kc"
    kc.write_text("")
    r = run(
        [
            "--context",
            "ctx-a",
            "--kubeconfig",
            str(kc),
            "--request-timeout",
            "2.5",
            "status",
            "barcelona",
        ],
        None,
        monkeypatch,
    )
    assert r.exit_code == 0, r.output
    probe = [a for a in _calls(recorder) if "--raw=/version" in a]
    assert probe == [
        [
            "get",
            f"--kubeconfig={kc}",
            "--context=ctx-a",
            "--raw=/version",
            "--request-timeout=2500ms",
        ]
    ]
    # after the verb wins over before it
    recorder.unlink()
    r = run(["--context", "ctx-a", "status", "barcelona", "--context", "ctx-b"], None, monkeypatch)
    assert r.exit_code == 0, r.output
    assert all("--context=ctx-b" in a and "--context=ctx-a" not in a for a in _calls(recorder))


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--context", "--exec=/bin/sh"),
        ("--context", "a b"),
        ("--context", "x\ny"),
        ("--context", ""),
        ("--kubeconfig", "-rf"),
        ("--kubeconfig", "a\nb"),
    ],
)
def test_option_shaped_context_or_kubeconfig_is_refused(
    monkeypatch, recorder, flag: str, value: str
) -> None:
    r = run(["status", "barcelona", f"{flag}={value}"], None, monkeypatch)
    if value == "":  # empty means "not given": kubectl's own default
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 2, r.output
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("error: ")
    assert not recorder.exists() or not _calls(recorder)  # nothing ran


def test_namespace_override(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    fake = FakeCluster.load(str(state))
    fake.add_namespace("team-b")
    fake.save(str(state))
    r = run(["status", "barcelona", "-n", "team-b"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("barcelona in team-b:")
    r = run(["--namespace", "team-b", "status", "barcelona", "-o", "json"], state, monkeypatch)
    assert json.loads(r.stdout)["namespace"] == "team-b"


@pytest.mark.parametrize("ns", ["Team-B", "team_b", "-n", "a;rm -rf ~", "x" * 64, "a.b"])
def test_namespace_override_must_be_a_dns_label(tmp_path, monkeypatch, ns: str) -> None:
    state = fake_state(tmp_path)
    r = run(["status", "barcelona", f"--namespace={ns}"], state, monkeypatch)
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [r.stderr.strip()]
    assert "is not a namespace name (a DNS-1123 label" in r.stderr
    assert not [c for c in FakeCluster.load(str(state)).calls]


def test_status_output_json_and_yaml(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    r = run(["status", "barcelona", "-o", "json"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    table = run(["status", "barcelona"], state, monkeypatch).stdout
    sts = doc["statefulset"]
    assert doc["cluster"] == "barcelona" and sts["desired"] == 2
    assert f"statefulset ml-dev-env {sts['ready']}/{sts['desired']} Ready" in table
    assert {"ml-dev-env-0", "ml-dev-env-1"} <= {p["name"] for p in doc["pods"]}
    for p in doc["pods"]:  # the same facts as the table's rows
        assert (
            f"{p['name']:<24} {(p['waiting_reason'] or p['phase']):<10} "
            f"{'yes' if p['ready'] else 'no':<6} {p['restarts']:<9} {p['node'] or '-'}" in table
        )
    y = run(["status", "barcelona", "--output", "yaml"], state, monkeypatch)
    assert yaml.safe_load(y.stdout) == doc
    assert "&id" not in y.stdout and "*id" not in y.stdout
    bad = run(["status", "barcelona", "-o", "wide"], state, monkeypatch)
    assert bad.exit_code == 2 and "-o/--output must be one of table, json, yaml" in bad.stderr


def test_list_clusters_and_validate_output(monkeypatch) -> None:
    r = run(["list-clusters", "-o", "json"], None, monkeypatch)
    assert r.exit_code == 0, r.output
    names = [c["name"] for c in json.loads(r.stdout)]
    assert names == sorted(p.stem for p in (ROOT / "clusters").glob("*.yaml"))
    r = run(["validate", "-o", "yaml"], None, monkeypatch)
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(r.stdout)
    assert doc["valid"] is True and doc["errors"] == 0 and len(doc["files"]) == len(names)


def test_validate_output_carries_the_diagnostics(tmp_path, monkeypatch) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster:\n  name: Bad_Name\n  namespace: ns\n")
    r = run(["validate", str(bad), "-o", "json"], None, monkeypatch)
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["valid"] is False and doc["errors"] >= 1
    diags = doc["files"][0]["diagnostics"]
    assert diags and all({"file", "line", "col", "path", "message"} <= set(d) for d in diags)


def test_dash_h_and_help_verb(monkeypatch) -> None:
    top = run(["-h"], None, monkeypatch)
    assert top.exit_code == 0 and "Commands:" in top.stdout
    a = run(["status", "-h"], None, monkeypatch)
    b = run(["help", "status"], None, monkeypatch)
    c = run(["status", "--help"], None, monkeypatch)
    assert a.exit_code == b.exit_code == c.exit_code == 0
    assert a.stdout == b.stdout == c.stdout
    assert "--namespace" in a.stdout and "--output" in a.stdout
    assert run(["help"], None, monkeypatch).stdout == top.stdout
    r = run(["help", "stauts"], None, monkeypatch)
    assert r.exit_code == 2 and "no verb 'stauts' (did you mean 'status'?)" in r.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script(monkeypatch, shell: str) -> None:
    r = run(["completion", shell], None, monkeypatch)
    assert r.exit_code == 0 and "_MLENV_COMPLETE" in r.stdout and "mlenv" in r.stdout
    assert run(["completion", "tcsh"], None, monkeypatch).exit_code == 2


def test_teardown_dry_run_lists_and_deletes_nothing(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    before = FakeCluster.load(str(state)).objects
    r = run(["teardown", "barcelona", "--dry-run"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert FakeCluster.load(str(state)).objects == before  # nothing deleted, nothing changed
    would = sorted(
        line.removeprefix("would delete ")
        for line in r.stdout.splitlines()
        if line.startswith("would delete ")
    )
    assert "statefulset/ml-dev-env" in would and "secret/ml-dev-env-ssh" in would
    assert r.stdout.rstrip().endswith("nothing was changed")
    real = run(["teardown", "barcelona"], state, monkeypatch)
    assert real.exit_code == 0, real.output
    deleted = sorted(
        line.removeprefix("deleted ")
        for line in real.stdout.splitlines()
        if line.startswith("deleted ")
    )
    assert deleted == would  # the dry run named exactly what the real one removed
    assert (
        run(["teardown", "barcelona", "--dry-run", "--legacy"], state, monkeypatch).exit_code == 2
    )


def test_logs_tail(tmp_path, monkeypatch) -> None:
    state = fake_state(tmp_path)
    run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch)
    full = run(["logs", "barcelona"], state, monkeypatch).stdout.splitlines()
    assert len(full) >= 2
    r = run(["logs", "barcelona", "--tail", "1"], state, monkeypatch)
    assert r.exit_code == 0 and r.stdout.splitlines() == full[-1:]
    assert ["logs", "ml-dev-env-0", "--tail=1"] in FakeCluster.load(str(state)).calls
    assert run(["logs", "barcelona", "--tail", "-1"], state, monkeypatch).exit_code == 2


def _deployment_answers(cluster: str, pods: int) -> str:
    """REC_ANSWERS: the recorder answers with a StatefulSet of ``cluster`` and its pods
    (logs, shell, launch first check that the pod is one of the StatefulSet's own)."""
    owner = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": STATEFULSET,
            "uid": "sts-uid",
            "controller": True,
        }
    ]
    labels = {LABEL_NAME: APP, LABEL_INSTANCE: cluster}
    sts = {
        "kind": "StatefulSet",
        "metadata": {"name": STATEFULSET, "uid": "sts-uid", "labels": labels},
        "spec": {"replicas": pods},
    }
    items = [
        {
            "kind": "Pod",
            "metadata": {"name": pod_name(i), "labels": labels, "ownerReferences": owner},
            "status": {"phase": "Running"},
        }
        for i in range(pods)
    ]
    sel = {LABEL_NAME: APP, LABEL_INSTANCE: cluster}
    pods_raw = "--raw=" + raw_list_path("Pod", "ml-dev-env", sel)
    sts_raw = "--raw=" + raw_list_path("StatefulSet", "ml-dev-env", sel)
    return json.dumps(
        [
            # split_pods: the workload object and its pods, each by the server's List
            {"match": [pods_raw], "stdout": json.dumps({"kind": "PodList", "items": items})},
            {"match": [sts_raw], "stdout": json.dumps({"kind": "List", "items": [sts]})},
            {"match": ["StatefulSet", STATEFULSET], "stdout": json.dumps(sts)},
            {"match": ["Pod"], "stdout": json.dumps({"items": items})},
        ]
    )


def test_logs_tail_and_follow_reach_kubectl(monkeypatch, recorder) -> None:
    monkeypatch.setenv("REC_ANSWERS", _deployment_answers("barcelona", 2))
    r = run(["logs", "barcelona", "--tail", "20", "-f"], None, monkeypatch)
    assert r.exit_code == 0, r.output
    assert _calls(recorder)[-1] == [
        "-n",
        "ml-dev-env",
        "logs",
        "-f",
        "--tail=20",
        "--",
        "ml-dev-env-0",
    ]


def test_quiet_drops_notices_verbose_shows_commands(monkeypatch, recorder) -> None:
    loud = run(["status", "barcelona"], None, monkeypatch)
    assert "notice: oc not found" in loud.stderr
    quiet = run(["-q", "status", "barcelona"], None, monkeypatch)
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == loud.stdout
    verbose = run(["status", "barcelona", "-v"], None, monkeypatch)
    ran = [ln for ln in verbose.stderr.splitlines() if "kubectl" in ln and "--raw=/version" in ln]
    assert ran and ran[0].endswith("kubectl get --raw=/version --request-timeout=10000ms")


def test_a_verbs_own_option_keeps_its_spelling() -> None:
    """A verb added later with its own -v (or -n, -o…) keeps it: the global of the same
    spelling is not added to that verb."""
    import inspect

    from mlenv.cli._globals import with_globals

    params = inspect.signature(with_globals("status", verb)).parameters
    assert "g_verbose" not in params and {"g_quiet", "g_namespace", "g_context"} <= set(params)
    assert "g_namespace" not in inspect.signature(with_globals("validate", verb)).parameters


def verb(
    cluster: str, version: Annotated[bool, typer.Option("--version-info", "-v")] = False
) -> None:
    """A verb with its own -v (for test_a_verbs_own_option_keeps_its_spelling)."""


@pytest.mark.parametrize(
    "args,allowed",
    [
        (["list-clusters"], "table, json, yaml"),
        (["validate"], "table, json, yaml"),
        (["history", "local"], "table, json"),
        (["compare", "a", "b"], "table, json"),
        (["secrets", "local"], "yaml, json"),
    ],
)
def test_output_is_the_format_everywhere_and_refused_with_the_allowed_values(
    monkeypatch, args, allowed
) -> None:
    """`-o` meant a format on some verbs and a path on others (`bundle -o json` wrote a
    file named `json`); every verb now refuses a format it lacks, naming the allowed ones."""
    r = run([*args, "-o", "wide"], None, monkeypatch)
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == f"error: -o/--output must be one of {allowed}, got 'wide'"


def test_table_is_a_format_and_bundle_has_no_o(tmp_path, monkeypatch) -> None:
    plain = run(["list-clusters"], None, monkeypatch)
    table = run(["list-clusters", "-o", "table"], None, monkeypatch)
    assert table.exit_code == 0 and table.stdout == plain.stdout
    assert run(["validate", "--output", "table"], None, monkeypatch).exit_code == 0
    r = run(["bundle", str(tmp_path), "-o", "json"], None, monkeypatch)
    assert r.exit_code == 2 and "No such option: -o" in r.output
    assert not (tmp_path / "json").exists() and not (ROOT / "json").exists()
