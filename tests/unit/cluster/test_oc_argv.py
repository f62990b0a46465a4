"""The exact command lines OcCluster builds, against fake ``oc``/``kubectl`` binaries on
PATH that record their argv (no cluster, no monkeypatching of mlenv code)."""

from __future__ import annotations

import json
import time

import pytest

from mlenv.cluster import treehash
from mlenv.cluster.api import ExecTimeout, Forbidden
from mlenv.cluster.oc import OcCluster
from mlenv.errors import InfraError

NS = "team-a"
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}


def live_cm(data: str, rv: str = "5", when: str = "2024-01-01T00:00:00Z") -> str:
    return json.dumps(
        {
            **CM,
            "data": {"a": data},
            "metadata": {
                "name": "c",
                "namespace": NS,
                "resourceVersion": rv,
                "uid": "u1",
                "generation": 1,
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "managedFields": [{"manager": "mlenv", "operation": "Apply", "time": when}],
            },
        }
    )


@pytest.fixture
def oc(fake_bin) -> OcCluster:
    fake_bin.install("oc")
    client = OcCluster()
    assert client.is_oc and client.notice == ""
    return client


def test_exec_puts_the_namespace_before_the_argv(oc, fake_bin) -> None:
    fake_bin.respond([{"match": ["exec"], "stdout": "hi\n"}])
    res = oc.exec("ml-dev-env-0", NS, ["python3", "-c", "print(1)", "-n", "x"])
    assert res.stdout == "hi\n"
    # before the fix the flag was appended after the argv: `exec POD -- ARGV -n NS`
    assert fake_bin.calls() == [
        ["exec", f"--namespace={NS}", "ml-dev-env-0", "--", "python3", "-c", "print(1)", "-n", "x"]
    ]


def test_exec_with_stdin_and_the_verbs_that_stream(oc, fake_bin) -> None:
    oc.exec("p", NS, ["sh", "-c", "cat"], stdin="data")
    lines: list[str] = []
    assert oc.exec_stream("p", NS, ["python", "-m", "mlenv.pod", "launch"], lines.append) == 0
    oc.logs("p", NS, follow=True, out=lines.append)
    rec = fake_bin.records()
    assert rec[0]["argv"] == ["exec", f"--namespace={NS}", "-i", "p", "--", "sh", "-c", "cat"]
    assert rec[0]["stdin"] == "data"
    assert rec[1]["argv"] == ["-n", NS, "exec", "p", "--", "python", "-m", "mlenv.pod", "launch"]
    assert rec[2]["argv"] == ["-n", NS, "logs", "-f", "--", "p"]


def test_apply_is_server_side_with_the_field_manager(oc, fake_bin) -> None:
    fake_bin.respond(
        [{"match": ["get"], "stdout": ""}, {"match": ["apply"], "stdout": live_cm("1", rv="1")}]
    )
    assert oc.apply(CM, NS).action == "created"
    get, apply = fake_bin.records()
    assert get["argv"] == [
        "get",
        f"--namespace={NS}",
        "--output=json",
        "--ignore-not-found",
        "--request-timeout=10000ms",
        "--",
        "ConfigMap",
        "c",
    ]
    assert apply["argv"] == [
        "apply",
        f"--namespace={NS}",
        "--server-side",
        "--field-manager=mlenv",
        "--output=json",
        "--filename=-",
        "--request-timeout=10000ms",
    ]
    assert json.loads(str(apply["stdin"])) == CM


def test_apply_cluster_scoped_has_no_namespace_and_flags_pass_through(oc, fake_bin) -> None:
    scc = {
        "apiVersion": "security.openshift.io/v1",
        "kind": "SecurityContextConstraints",
        "metadata": {"name": "s"},
    }
    oc.apply(scc, None, field_manager="other", force_conflicts=True, dry_run=True)
    assert fake_bin.calls()[-1] == [
        "apply",
        "--server-side",
        "--field-manager=other",
        "--output=json",
        "--filename=-",
        "--force-conflicts",
        "--dry-run=server",
        "--request-timeout=10000ms",
    ]


def test_dry_run_apply_compares_content_not_resource_version(oc, fake_bin) -> None:
    # a server-side dry run bumps no resourceVersion: equal versions do not mean unchanged
    fake_bin.respond(
        [{"match": ["get"], "stdout": live_cm("1")}, {"match": ["apply"], "stdout": live_cm("2")}]
    )
    assert oc.apply(CM, NS, dry_run=True).action == "configured"
    # fresh managedFields timestamps alone are not a change
    fake_bin.respond(
        [
            {"match": ["get"], "stdout": live_cm("1")},
            {"match": ["apply"], "stdout": live_cm("1", when="2025-06-01T00:00:00Z")},
        ]
    )
    assert oc.apply(CM, NS, dry_run=True).action == "unchanged"
    # a real apply still reads the resourceVersion
    fake_bin.respond(
        [
            {"match": ["get"], "stdout": live_cm("1")},
            {"match": ["apply"], "stdout": live_cm("1", rv="6")},
        ]
    )
    assert oc.apply(CM, NS).action == "configured"


def test_get_list_delete_logs_and_can_i(oc, fake_bin) -> None:
    fake_bin.respond(
        [
            {
                # a pod list is the server's own List (get --raw): no kind on its items
                "match": ["get", f"--raw=/api/v1/namespaces/{NS}/pods?labelSelector=a%3D1%2Cb%3D2"],
                "stdout": json.dumps({"kind": "PodList", "items": [{"metadata": {"name": "p"}}]}),
            },
            {"match": ["delete"], "stdout": "statefulset.apps/x\n"},
            {"match": ["logs"], "stdout": "l1\nl2\n"},
            {"match": ["can-i", "--as=system:serviceaccount:team-a:sa"], "rc": 1, "stdout": "no\n"},
            {"match": ["can-i"], "stdout": "yes\n"},
        ]
    )
    pods = oc.list("Pod", NS, {"b": "2", "a": "1"})
    assert pods == [{"metadata": {"name": "p"}, "apiVersion": "v1", "kind": "Pod"}]
    assert oc.delete("StatefulSet", "x", NS, cascade="foreground") is True
    assert oc.logs("p", NS) == "l1\nl2\n"
    assert oc.can_i("create", "routes.route.openshift.io", NS) is True
    assert (
        oc.can_i(
            "use", "securitycontextconstraints/s", NS, as_user="system:serviceaccount:team-a:sa"
        )
        is False
    )
    assert fake_bin.calls() == [
        [
            "get",
            f"--raw=/api/v1/namespaces/{NS}/pods?labelSelector=a%3D1%2Cb%3D2",
            "--request-timeout=10000ms",
        ],
        [
            "delete",
            f"--namespace={NS}",
            "--cascade=foreground",
            "--ignore-not-found",
            "--wait=false",
            "--output=name",
            "--request-timeout=10000ms",
            "--",
            "StatefulSet",
            "x",
        ],
        ["logs", f"--namespace={NS}", "--request-timeout=10000ms", "--", "p"],
        [
            "auth",
            f"--namespace={NS}",
            "can-i",
            "--request-timeout=10000ms",
            "--",
            "create",
            "routes.route.openshift.io",
        ],
        [
            "auth",
            f"--namespace={NS}",
            "can-i",
            "--as=system:serviceaccount:team-a:sa",
            "--request-timeout=10000ms",
            "--",
            "use",
            "securitycontextconstraints/s",
        ],
    ]


def test_can_i_as_a_service_account_says_when_impersonation_is_forbidden(oc, fake_bin) -> None:
    fake_bin.respond(
        [
            {
                "match": ["can-i"],
                "rc": 1,
                "stderr": 'Error from server (Forbidden): serviceaccounts "sa" is forbidden: User '
                '"dev" cannot impersonate resource "serviceaccounts"\n',
            }
        ]
    )
    with pytest.raises(Forbidden, match="impersonate"):
        oc.can_i(
            "use", "securitycontextconstraints/s", NS, as_user="system:serviceaccount:team-a:sa"
        )


def test_rsync_anchors_results_at_the_top_and_never_deletes(oc, fake_bin, tmp_path) -> None:
    oc.rsync(str(tmp_path), "p", NS, "/workspace", exclude=treehash.RSYNC_EXCLUDES)
    # no --delete, ever (sync deletes an explicit protected list, only when asked)
    assert fake_bin.calls() == [
        [
            "rsync",
            f"--namespace={NS}",
            "--no-perms",
            "--exclude=/results",
            "--exclude=__pycache__",
            "--exclude=.git",
            "--",
            f"{tmp_path}/",
            "p:/workspace",
        ]
    ]


def test_exec_and_rsync_time_out_with_one_line(fake_bin, tmp_path) -> None:
    fake_bin.install("oc")
    oc = OcCluster(exec_timeout=0.3)
    fake_bin.respond([{"match": ["exec"], "sleep": 30}, {"match": ["rsync"], "sleep": 30}])
    t = time.monotonic()
    with pytest.raises(ExecTimeout, match=r"did not finish within 0\.3 s") as e:
        oc.exec("p", NS, ["sleep", "1000"])
    assert "\n" not in str(e.value) and e.value.exit_code == 3
    with pytest.raises(ExecTimeout, match="rsync"):
        oc.rsync(str(tmp_path), "p", NS, "/workspace", timeout=0.3)
    assert time.monotonic() - t < 10  # killed, not waited for


def test_a_planned_copy_ends_at_its_deadline_and_says_why_a_pod_refused(fake_bin, tmp_path) -> None:
    """kubectl's sync talks to its exec while it runs: a pod that never lists is killed
    at the deadline (one line, exit 3), one that ends before its listing says why, and
    neither asks the caller to plan."""
    from mlenv.cluster.api import NotFound

    fake_bin.install("kubectl")
    client = OcCluster(exec_timeout=0.3)
    asked: list[str] = []

    def plan(listed: str) -> list[str]:
        asked.append(listed)
        return []

    (tmp_path / "a.py").write_text("x")
    fake_bin.respond([{"match": ["exec"], "sleep": 30, "early": True}])
    t = time.monotonic()
    with client.packs(str(tmp_path), ["a.py"]) as packs:
        with pytest.raises(ExecTimeout, match=r"copy .*within 0\.3 s") as e:
            client.copy_planned(packs, "p", NS, "/workspace", plan)
        assert "\n" not in str(e.value) and e.value.exit_code == 3
        assert time.monotonic() - t < 10  # killed, not waited for
        fake_bin.respond(
            [
                {
                    "match": ["exec"],
                    "rc": 1,
                    "stderr": 'Error from server (NotFound): pods "p" not found\n',
                    "early": True,
                }
            ]
        )
        with pytest.raises(NotFound):
            client.copy_planned(packs, "p", NS, "/workspace", plan, timeout=30)
        fake_bin.respond([{"match": ["exec"], "stdout": "{}", "early": True}])
        with pytest.raises(InfraError, match="ended before its listing"):
            client.copy_planned(packs, "p", NS, "/workspace", plan, timeout=30)
    assert asked == []


def test_kubectl_fallback_uses_the_same_namespace_order(fake_bin, tmp_path) -> None:
    path = fake_bin.install("kubectl")
    client = OcCluster()
    assert not client.is_oc and "oc not found" in client.notice and path in client.notice
    (tmp_path / "ws" / "results").mkdir(parents=True)
    (tmp_path / "ws" / "a.py").write_text("x")
    (tmp_path / "ws" / "results" / "r.json").write_text("{}")
    client.exec("p", NS, ["true"])
    client.rsync(str(tmp_path / "ws"), "p", NS, "/workspace")
    rec = fake_bin.records()
    assert [r["tool"] for r in rec] == ["kubectl"] * 2
    assert rec[0]["argv"] == ["exec", f"--namespace={NS}", "p", "--", "true"]
    # no prune step before (or after) the copy: the kubectl path only adds and updates
    assert rec[1]["argv"] == [
        "-n",
        NS,
        "exec",
        "-i",
        "p",
        "--",
        "tar",
        "-x",
        "-f",
        "-",
        "-C",
        "/workspace",
    ]
    assert "a.py" in str(rec[1]["stdin"]) and "r.json" not in str(rec[1]["stdin"])


def test_a_dry_run_of_many_objects_is_one_apply_per_namespace(oc, fake_bin) -> None:
    """deploy's server dry run ran one kubectl process per object (12 for the `local`
    example); now one `apply --dry-run=server` of a List per namespace, each action judged
    against the caller's read (fails on the code before: no dry_run_many)."""
    from mlenv.cluster.api import DryRunItem

    other = {**CM, "metadata": {"name": "d"}}
    scc = {
        "apiVersion": "security.openshift.io/v1",
        "kind": "SecurityContextConstraints",
        "metadata": {"name": "s"},
    }
    answer = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [json.loads(live_cm("1")), {**other, "data": {"a": "1"}}],
    }
    fake_bin.respond(
        [
            {"match": ["apply", f"--namespace={NS}"], "stdout": json.dumps(answer)},
            {"match": ["apply"], "stdout": json.dumps(scc)},
        ]
    )
    got = oc.dry_run_many(
        [
            DryRunItem(CM, NS, live=json.loads(live_cm("1"))),
            DryRunItem(other, NS, live=None),
            DryRunItem(scc, None, live=None),
        ]
    )
    assert [(r.name, r.action) for r in got] == [
        ("c", "unchanged"),
        ("d", "created"),
        ("s", "created"),
    ]
    batch, alone = fake_bin.records()
    assert batch["argv"] == [
        "apply",
        f"--namespace={NS}",
        "--server-side",
        "--field-manager=mlenv",
        "--dry-run=server",
        "--output=json",
        "--filename=-",
        "--request-timeout=10000ms",
    ]
    assert [i["metadata"]["name"] for i in json.loads(str(batch["stdin"]))["items"]] == ["c", "d"]
    assert alone["argv"][:2] == ["apply", "--server-side"] and "--namespace" not in " ".join(
        alone["argv"]
    )


def test_a_refused_dry_run_batch_asks_each_object_alone(oc, fake_bin) -> None:
    """A refusal fails the whole kubectl call; each object is then asked alone, so the
    refusal lands on the object that meets it and the others keep their answers."""
    from mlenv.cluster.api import DryRunItem

    other = {**CM, "metadata": {"name": "d"}}
    fake_bin.respond(
        [
            {
                "match": ["apply"],
                "stdin_has": '"kind": "List"',
                "rc": 1,
                "stderr": 'Error from server (Forbidden): configmaps "d" is forbidden\n',
            },
            {
                "match": ["apply"],
                "stdin_has": '"name": "d"',
                "rc": 1,
                "stderr": 'Error from server (Forbidden): configmaps "d" is forbidden\n',
            },
            {"match": ["apply"], "stdout": live_cm("1")},
        ]
    )
    got = oc.dry_run_many(
        [DryRunItem(CM, NS, live=json.loads(live_cm("1"))), DryRunItem(other, NS, live=None)]
    )
    assert got[0].action == "unchanged" and isinstance(got[1], Forbidden), got
    assert len(fake_bin.calls()) == 3


def test_a_scripted_shell_asks_kubectl_for_no_terminal(fake_bin) -> None:
    fake_bin.install("kubectl")
    client = OcCluster()
    # under pytest stdin is no terminal, as in `mlenv shell NAME -- CMD | tee` or CI:
    # `-t` there makes kubectl print "Unable to use a TTY" before the command's output
    assert client.interactive("p", NS, ["cat", "/etc/hostname"]) == 0
    assert fake_bin.calls() == [["-n", NS, "exec", "-i", "p", "--", "cat", "/etc/hostname"]]


def test_a_raw_list_path_holds_only_validated_names_percent_encoded() -> None:
    """``get --raw`` takes one path: the namespace is a name, the selector's keys and
    values are validated, then every reserved character is encoded, so no value can add
    a path segment or a query parameter."""
    from mlenv.argv import UnsafeArgument
    from mlenv.cluster.oc import raw_list_path

    assert (
        raw_list_path("Pod", "team-a", {"app.kubernetes.io/name": "ml-dev-env"})
        == "/api/v1/namespaces/team-a/pods?labelSelector=app.kubernetes.io%2Fname%3Dml-dev-env"
    )
    assert raw_list_path("PersistentVolumeClaim", None, None) == "/api/v1/persistentvolumeclaims"
    for ns, sel in (("../x", None), ("a/b", None), ("ok", {"k": "v&limit=1"})):
        with pytest.raises(UnsafeArgument):
            raw_list_path("Pod", ns, sel)


def test_warnings_are_picked_by_the_server(fake_bin) -> None:
    """deploy's wait reads only Warning events: the field selector asks the server for
    them, so the Normal ones (thousands at 512 pods) never cross the wire."""
    fake_bin.install("kubectl")
    OcCluster().events(NS, "Pod", warnings=True)
    OcCluster().events(NS, "StatefulSet", "ml-dev-env", warnings=True)
    OcCluster().events(NS, "Pod")
    assert [a for c in fake_bin.calls() for a in c if a.startswith("--field-selector")] == [
        "--field-selector=involvedObject.kind=Pod,type=Warning",
        "--field-selector=involvedObject.kind=StatefulSet,involvedObject.name=ml-dev-env,type=Warning",
        "--field-selector=involvedObject.kind=Pod",
    ]
