"""no name can become an option or code on the operator's machine.

Every value in ``tests/data/hostile/argv-names.txt`` is pushed into every name position
of every :class:`~mlenv.cluster.oc.OcCluster` method, with a fake ``oc`` (and ``kubectl``)
on PATH that records each argv: each must be refused with :class:`UnsafeArgument`
(exit 2) before any process starts. With valid names, every recorded argv has ``--``
before its positional names (``exec``: the validated pod name before the command's ``--``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from mlenv import argv
from mlenv.argv import UnsafeArgument
from mlenv.cluster.oc import OcCluster
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.testing.fakecluster import FakeCluster

CORPUS = Path(__file__).resolve().parents[2] / "data" / "hostile" / "argv-names.txt"


def hostile() -> list[str]:
    out = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line:
            continue
        out.append(ast.literal_eval('"' + line.replace('"', '\\"') + '"'))
    return out


HOSTILE = hostile()
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}

# Every method, with one hostile value placed in one name position at a time.
Call = Callable[[OcCluster, str], object]
CALLS: dict[str, Call] = {
    "get.name": lambda c, v: c.get("StorageClass", v, None),
    "get.kind": lambda c, v: c.get(v, "x", None),
    "get.namespace": lambda c, v: c.get("Pod", "x", v),
    "list.kind": lambda c, v: c.list(v, "ns"),
    "list.selector_value": lambda c, v: c.list("Pod", "ns", {"app": v}),
    "list.selector_key": lambda c, v: c.list("Pod", "ns", {v: "x"}),
    "delete.name": lambda c, v: c.delete("PersistentVolumeClaim", v, "ns"),
    "delete.namespace": lambda c, v: c.delete("Pod", "x", v),
    "apply.name": lambda c, v: c.apply({**CM, "metadata": {"name": v}}, "ns"),
    "apply.namespace": lambda c, v: c.apply(CM, v),
    "events.name": lambda c, v: c.events("ns", "Pod", v),
    "can_i.verb": lambda c, v: c.can_i(v, "pods", "ns"),
    "can_i.resource_name": lambda c, v: c.can_i("use", f"securitycontextconstraints/{v}", "ns"),
    "can_i.as": lambda c, v: c.can_i("use", "pods", "ns", as_user=v),
    "exec.pod": lambda c, v: c.exec(v, "ns", ["true"]),
    "exec.namespace": lambda c, v: c.exec("p", v, ["true"]),
    "exec_stream.pod": lambda c, v: c.exec_stream(v, "ns", ["true"], lambda _l: None),
    "logs.pod": lambda c, v: c.logs(v, "ns"),
    "logs_follow.pod": lambda c, v: c.logs(v, "ns", follow=True),
    "interactive.pod": lambda c, v: c.interactive(v, "ns", ["bash"]),
    "port_forward.pod": lambda c, v: c.port_forward(v, "ns", [(8080, 8080)]),
    "start_build.name": lambda c, v: c.start_build(v, "ns", lambda _l: None),
    "rsync.pod": lambda c, v: c.rsync("/nonexistent-dir", v, "ns", "/workspace"),
    "rsync.remote": lambda c, v: c.rsync("/nonexistent-dir", "p", "ns", v),
}


# Values from the corpus that are legitimate in one position (RBAC's "*" verb, a Kind or
# group/version resource word, label values with dots and capitals): they still reach the
# command line only after `--` or inside `--selector=`, never as an option of their own.
LEGIT = {
    "can_i.verb": {"*"},
    "get.kind": {"UPPER", "a/b"},
    "list.kind": {"UPPER", "a/b"},
    "list.selector_value": {"UPPER", "a_b", "a..b", ""},
    "list.selector_key": {"UPPER", "a_b", "a..b", "a/b"},
}


@pytest.mark.parametrize("tool", ["oc", "kubectl"])
@pytest.mark.parametrize("site", sorted(CALLS))
def test_every_call_site_refuses_every_hostile_name(
    site: str, tool: str, fake_bin, tmp_path
) -> None:
    fake_bin.install(tool)
    client = OcCluster()
    for value in HOSTILE:
        if site == "rsync.remote" and value.startswith("/"):
            continue  # an absolute path is a valid remote dir; '..'/control chars are not
        if value in LEGIT.get(site, ()):
            continue
        with pytest.raises(UnsafeArgument) as e:
            CALLS[site](client, value)
        assert e.value.exit_code == 2
    assert fake_bin.calls() == [], f"{site}: a process started for a hostile name"
    assert not Path("/tmp/mlenv-pwned").exists()


def test_storage_class_option_shaped_name_never_becomes_an_option(fake_bin) -> None:
    # the audit's case: `get StorageClass --kubeconfig=FILE` loaded FILE's exec plugin
    fake_bin.install("oc")
    client = OcCluster()
    with pytest.raises(UnsafeArgument, match="StorageClass name '--kubeconfig=/tmp/k'"):
        client.get("StorageClass", "--kubeconfig=/tmp/k", None)
    assert fake_bin.calls() == []
    client.get("StorageClass", "fast-rwx", None)
    assert fake_bin.calls() == [
        [
            "get",
            "--output=json",
            "--ignore-not-found",
            "--request-timeout=10000ms",
            "--",
            "StorageClass",
            "fast-rwx",
        ]
    ]


# cobra (the parser of kubectl and oc) finds subcommands only among the words before
# `--` (its stripFlags stops there) and pflag hands everything after `--` to the command
# as arguments. This models both, for the commands and flags mlenv uses.
SUBCOMMANDS = {"auth": {"can-i", "whoami"}, "config": {"view"}}
VALUE_FLAGS = {"-n"}  # short flags that take the next word; ours are otherwise --x=v or bool


def cobra(call: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(command path, positionals before ``--``, arguments after ``--``) for one argv."""
    head, after = (
        (call[: call.index("--")], call[call.index("--") + 1 :]) if "--" in call else (call, [])
    )
    words, i = [], 0
    while i < len(head):
        w = head[i]
        i += 2 if w in VALUE_FLAGS else 1
        if not w.startswith("-"):
            words.append(w)
    path = words[:1]
    if len(words) > 1 and words[1] in SUBCOMMANDS.get(words[0], ()):
        path.append(words[1])
    return path, words[len(path) :], after


def _walk_with_valid_names(c: OcCluster, ws: Path) -> list[list[str]]:
    """The command path each call must resolve to, calling every method once."""
    want: list[list[str]] = []
    c.server()
    c.whoami()
    want += [["whoami"], ["whoami"]] if c.is_oc else [["config", "view"], ["auth", "whoami"]]
    c.get("StorageClass", "fast", None)
    c.list("Pod", "ns", {"app.kubernetes.io/instance": "a"})
    c.delete("Pod", "p", "ns")
    c.apply(CM, "ns")
    c.events("ns", "Pod", "p")
    c.can_i("use", "securitycontextconstraints/s", "ns", as_user="system:serviceaccount:ns:sa")
    c.exec("p", "ns", ["--not-an-oc-flag"])
    c.exec_stream("p", "ns", ["true"], lambda _l: None)
    c.logs("p", "ns")
    c.logs("p", "ns", follow=True)
    c.port_forward("p", "ns", [(1, 2)])
    want += [
        ["get"],
        ["get"],
        ["delete"],
        ["get"],
        ["apply"],
        ["get"],
        ["auth", "can-i"],
        ["exec"],
        ["exec"],
        ["logs"],
        ["logs"],
        ["port-forward"],
    ]
    if c.is_oc:
        c.start_build("b", "ns", lambda _l: None)
        want.append(["start-build"])
    c.rsync(str(ws), "p", "ns", "/workspace")
    want.append(["rsync"] if c.is_oc else ["exec"])
    return want


@pytest.mark.parametrize("tool", ["oc", "kubectl"])
def test_valid_names_put_double_dash_before_positionals(tool: str, fake_bin, tmp_path) -> None:
    fake_bin.install(tool)
    fake_bin.respond([{"match": ["view"], "stdout": "https://api.example:6443"}])
    c = OcCluster()
    (tmp_path / "ws").mkdir()
    want = _walk_with_valid_names(c, tmp_path / "ws")
    calls = fake_bin.calls()
    assert len(calls) == len(want)
    for call, path in zip(calls, want, strict=True):
        got, before, _after = cobra(call)
        # the whole command path resolves (a subcommand after `--` would not) ...
        assert got == path, call
        # ... and no positional stands before `--`, except exec's validated pod name
        assert before == (["p"] if path == ["exec"] else []), call
    execs = [c for c in calls if cobra(c)[0] == ["exec"]]
    # the container command keeps its own flags: they follow the pod name and `--`
    assert execs[0][-3:] == ["p", "--", "--not-an-oc-flag"]


def test_auth_subcommand_before_double_dash() -> None:
    # `auth -- can-i use pods` would run `auth` with arguments: "unknown command"
    line = argv.kube("auth can-i", ["--as=system:serviceaccount:a:b"], ["use", "pods"])
    assert line == ["auth", "can-i", "--as=system:serviceaccount:a:b", "--", "use", "pods"]
    assert cobra(line) == (["auth", "can-i"], [], ["use", "pods"])
    with pytest.raises(ValueError, match="command path"):
        argv.kube("auth --as=x", [], [])


@pytest.mark.parametrize(
    "kind,value,ok",
    [
        ("Namespace", "team-a", True),
        ("Namespace", "a.b", False),  # labels have no dots
        ("Service", "x" * 63, True),
        ("Service", "x" * 64, False),
        ("PersistentVolumeClaim", "a.b-c", True),
        ("Pod", "a" * 253, True),
        ("Pod", "a" * 254, False),
        ("StorageClass", "gp3-csi", True),
        ("StorageClass", "--dry-run=none", False),
    ],
)
def test_names_follow_the_rules_of_their_kind(kind: str, value: str, ok: bool) -> None:
    if ok:
        assert argv.name(kind, value) == value
    else:
        with pytest.raises(UnsafeArgument, match=kind):
            argv.name(kind, value)


def test_builders_reject_programming_mistakes() -> None:
    # options are the code's own constants: a bare word among them is a bug, caught loudly
    with pytest.raises(ValueError, match="positionals go after"):
        argv.kube("get", ["--output=json", "pods"], [])
    assert argv.kube("get", ["--output=json"], ["pods"]) == ["get", "--output=json", "--", "pods"]
    with pytest.raises(UnsafeArgument):
        argv.port_pair(0, 80)
    with pytest.raises(UnsafeArgument):
        argv.selector({"app": "a,b=c"})


@pytest.mark.parametrize("value", ["--kubeconfig=/tmp/k", "-n", "a;b", "$(id)"])
def test_preflight_refuses_a_hostile_storage_class_before_any_lookup(
    value: str,
    barcelona: ClusterConfig,
    fake_for: Callable[..., FakeCluster],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # defence in depth: the schema refuses these, but preflight must not pass one to a
    # client even when a config object was built without the loader
    from dataclasses import replace

    from mlenv.cluster.preflight import run_preflight

    cfg = replace(barcelona, storage=replace(barcelona.storage, class_rwo=value))
    fake = fake_for(barcelona)
    looked_up: list[tuple[str, str]] = []
    real_get = fake.get

    def get(kind: str, name: str, ns: str | None) -> object:
        looked_up.append((kind, name))
        return real_get(kind, name, ns)

    monkeypatch.setattr(fake, "get", get)
    rep = run_preflight(cfg, "rdma", 1, [], fake)
    bad = [p for p in rep.blocking if "storage.class_rwo" in p.message]
    assert len(bad) == 1 and bad[0].input and repr(value) in bad[0].message
    assert ("StorageClass", value) not in looked_up
    assert ("Namespace", cfg.namespace) in looked_up  # the rest of preflight still ran
