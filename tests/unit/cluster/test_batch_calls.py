"""fewer client processes per deploy. ``get_many`` reads several objects in one
``kubectl get`` per namespace; deploy reads the plan's objects that way, and its applies
are judged against reads it already holds.

Each test runs on the fake directly and on the real client (:class:`OcCluster`) whose
calls the fake kubectl answers in this process (:class:`kubectl_cli.InProcess`), so the
call shapes are the client's own and can be counted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from mlenv.cluster.api import Forbidden, NotFound, ObjectRef, Question, Unreachable
from mlenv.cluster.deploy import DeployOptions, ReadOnce, deploy
from mlenv.cluster.oc import review_attributes
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.render.names import IMAGE_STREAM
from mlenv.testing.fakecluster import FakeCluster
from mlenv.testing.kubectl_cli import InProcess

NS = "team-a"


def cm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"k": name},
    }


def base() -> FakeCluster:
    fake = FakeCluster.typical(NS, ["n1"], gpus=1)
    fake.add_namespace("other")
    fake.apply(cm("a"), NS)
    fake.apply(cm("b"), "other")
    return fake


def client_of(fake: FakeCluster, side: str) -> FakeCluster | InProcess:
    return fake if side == "fake" else InProcess(fake)


REFS: list[ObjectRef] = [
    ("ConfigMap", "a", NS),
    ("ConfigMap", "a", "other"),
    ("ConfigMap", "b", "other"),
    ("Node", "n1", None),
    ("Namespace", NS, None),
    ("ConfigMap", "nope", NS),
]


@pytest.mark.parametrize("side", ["fake", "client"])
def test_get_many_answers_each_ref_as_get_does(side: str) -> None:
    fake = base()
    c = client_of(fake, side)
    got = c.get_many(REFS)
    assert got == {r: fake.get(*r) for r in REFS}
    assert got[("ConfigMap", "nope", NS)] is None and got[("ConfigMap", "b", "other")] is not None
    if side == "client":  # one call per namespace; the cluster-scoped kinds in one of their own
        assert isinstance(c, InProcess)
        groups = {None if k in ("Node", "Namespace") else ns for k, _, ns in REFS}
        assert len(c.calls) == len(groups)
        assert all(call[0] == "get" and "--ignore-not-found" in call for call in c.calls)


@pytest.mark.parametrize("side", ["fake", "client"])
def test_a_refused_batch_falls_back_to_one_get_each_and_leaves_the_refused_out(side: str) -> None:
    fake = base()
    fake.openshift = False  # ImageStream: "the server doesn't have a resource type"
    fake.denied = ["get secrets"]
    c = client_of(fake, side)
    refs: list[ObjectRef] = [
        ("ConfigMap", "a", NS),
        ("Secret", "s", NS),
        ("ImageStream", "i", NS),
        ("ConfigMap", "nope", NS),
    ]
    got = c.get_many(refs)
    assert got == {
        ("ConfigMap", "a", NS): fake.get("ConfigMap", "a", NS),
        ("ConfigMap", "nope", NS): None,
    }
    if side == "client":  # the batch, then each ref alone: every answer is what get says
        assert isinstance(c, InProcess)
        assert len(c.calls) == 1 + len(refs)
    # a get of a left-out ref says why, as it always did
    with pytest.raises(Forbidden, match='secrets "s" is forbidden'):
        c.get("Secret", "s", NS)
    with pytest.raises(NotFound):
        c.get("ImageStream", "i", NS)


@pytest.mark.parametrize("side", ["fake", "client"])
@pytest.mark.parametrize("batch", ["objects", "questions"])
def test_an_unreachable_server_is_said_once_not_asked_per_object_or_question(
    side: str, batch: str
) -> None:
    fake = base()
    fake.reachable = False
    c = client_of(fake, side)
    with pytest.raises(Unreachable):
        if batch == "objects":
            c.get_many(REFS)
        else:
            c.can_i_many(QUESTIONS[:3])
    if side == "client":
        assert isinstance(c, InProcess)
        assert len(c.calls) == 1


def test_read_once_reads_the_primed_objects_no_more() -> None:
    inner = InProcess(base())
    reads = ReadOnce(inner)
    reads.get_many(REFS[:3])
    first = len(inner.calls)
    assert reads.get("ConfigMap", "a", NS) == inner.fake.get("ConfigMap", "a", NS)
    assert reads.get("ConfigMap", "a", "other") is None
    assert reads.get_many(REFS[:2]) == {r: inner.fake.get(*r) for r in REFS[:2]}
    assert len(inner.calls) == first


def _single_gets(calls: list[list[str]]) -> list[tuple[str, str]]:
    """(kind, name) of every ``get … -- KIND NAME`` (one object alone)."""
    out = []
    for call in calls:
        if call[0] == "get" and "--" in call:
            names = call[call.index("--") + 1 :]
            if len(names) == 2:
                out.append((names[0], names[1]))
    return out


def test_a_deploy_reads_no_object_of_its_plan_alone_before_its_apply(
    local_cfg: ClusterConfig, fake_for: Any
) -> None:
    """Before the batch: each planned object was read alone by the checks, again by its
    dry-run apply and again by its apply (the kube tier: 44 gets in a deploy and a no-op
    redeploy). Now the checks' reads are one get per namespace, the dry run uses them,
    and the applies one more read of all; wait_ready still reads the StatefulSet."""
    fake = fake_for(local_cfg)
    client = InProcess(fake)
    first = deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), client)
    split = len(client.calls)
    again = deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), client)
    assert again.unchanged and {a.action for a in first.applied} == {"created"}
    planned = {(str(m["kind"]), str(m["metadata"]["name"])) for m in again.manifests}
    # the ImageStream is read again once applied: has its build pushed the pods' image?
    planned.discard(("ImageStream", IMAGE_STREAM))
    for calls in (client.calls[:split], client.calls[split:]):
        last_apply = max(i for i, call in enumerate(calls) if call[0] == "apply")  # then wait_ready
        alone = [
            ref for ref in _single_gets(calls[:last_apply]) if ref in planned or ref[0] == "Secret"
        ]
        assert alone == []
        assert any(call[0] == "get" and any("/" in w for w in call) for call in calls), (
            "read in batches"
        )


# -- can_i_many -------------------------------------------------------------------------

QUESTIONS = [
    Question("create", "configmaps", NS),
    Question("patch", "statefulsets.apps", NS),
    Question("create", "pods", NS, "exec"),
    Question("create", "pods/exec", NS),
    Question("bind", "clusterroles/scc-use", NS),
    Question("use", "securitycontextconstraints/x", NS),
    Question("create", "widgets", NS),  # a word whose API group the client does not know
    Question("create", "clusterroles"),
]  # no namespace: kubectl asks in the kubeconfig's
DENIED = ["create configmaps", "create pods/exec", "bind clusterroles"]


def _can_i_calls(calls: list[list[str]]) -> int:
    return sum(1 for call in calls if call[:1] == ["auth"] and "can-i" in call)


@pytest.mark.parametrize("side", ["fake", "client"])
def test_can_i_many_answers_each_question_as_can_i_does(side: str) -> None:
    fake = base()
    fake.denied = list(DENIED)
    c = client_of(fake, side)
    alone = [
        fake.can_i(q.verb, q.resource, q.namespace, subresource=q.subresource) for q in QUESTIONS
    ]
    assert c.can_i_many(QUESTIONS) == alone and not all(alone) and any(alone)
    if side == "client":  # one create of the reviews; the two it cannot put there exactly, alone
        assert isinstance(c, InProcess)
        unsure = [q for q in QUESTIONS if review_attributes(q) is None]
        assert [q.resource for q in unsure] == ["widgets", "clusterroles"]
        assert [call[0] for call in c.calls].count("create") == 1
        assert _can_i_calls(c.calls) == len(unsure)


class FailingReviews(InProcess):
    """The reviews' create refused (an admission webhook, say): the rest answers as usual."""

    def _call(  # type: ignore[override]
        self,
        line: Sequence[str],
        stdin: str | None,
        timeout: float,
    ) -> tuple[int, str, str, bool]:
        if line[1] == "create":
            self.calls.append(list(line[1:]))
            return (
                1,
                "",
                "Error from server (InternalError): failed calling webhook: refused (test)\n",
                False,
            )
        return super()._call(line, stdin, timeout)


def test_a_refused_review_batch_asks_each_question_alone() -> None:
    fake = base()
    fake.denied = list(DENIED)
    c = FailingReviews(fake)
    assert c.can_i_many(QUESTIONS) == [
        fake.can_i(q.verb, q.resource, q.namespace, subresource=q.subresource) for q in QUESTIONS
    ]
    assert _can_i_calls(c.calls) == len(QUESTIONS)


def test_read_once_keeps_the_answers_preflight_primed() -> None:
    inner = InProcess(base())
    asks = ReadOnce(inner)
    answers = asks.can_i_many(QUESTIONS)
    before = len(inner.calls)
    assert [
        asks.can_i(q.verb, q.resource, q.namespace, subresource=q.subresource) for q in QUESTIONS
    ] == answers
    assert len(inner.calls) == before


def test_a_deploy_asks_its_permissions_in_one_call(local_cfg: ClusterConfig, fake_for: Any) -> None:
    """Before the batch: 14 `auth can-i` processes per deploy of the local example."""
    client = InProcess(fake_for(local_cfg))
    for _ in range(2):
        deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), client)
    assert _can_i_calls(client.calls) == 0
    assert [call[0] for call in client.calls].count("create") == 2


@pytest.mark.parametrize(
    "denied",
    [
        [],
        ["bind clusterroles", "use securitycontextconstraints"],
        ["create pods/exec", "patch statefulsets", "bind roles"],
    ],
)
def test_preflight_decides_as_it_did_with_one_question_at_a_time(
    barcelona: ClusterConfig, fake_for: Any, denied: list[str]
) -> None:
    """The same problems, notes and skips, word for word, whether preflight's questions
    reach the fake one by one or in one batch through the real client."""
    from mlenv.cluster.deploy import plan
    from mlenv.cluster.preflight import run_preflight

    reports = []
    for side in ("fake", "client"):
        fake = fake_for(barcelona)
        fake.denied = list(denied)
        manifests = plan(barcelona, "rdma", None)
        c = ReadOnce(client_of(fake, side))
        reports.append(run_preflight(barcelona, "rdma", barcelona.gpus.default_nodes, manifests, c))
    assert reports[0] == reports[1]


@pytest.mark.parametrize("side", ["fake", "client"])
def test_list_many_answers_each_kind_as_list_does_in_one_call(side: str) -> None:
    fake = base()
    labels = {"app": "x"}
    for name in ("c1", "c2"):
        obj = cm(name)
        obj["metadata"]["labels"] = labels
        fake.apply(obj, NS)
    fake.apply({**cm("c3"), "metadata": {"name": "c3", "labels": {"app": "y"}}}, NS)
    c = client_of(fake, side)
    kinds = ["ConfigMap", "Secret", "Pod"]
    got = c.list_many(kinds, NS, labels)
    assert got == {k: fake.list(k, NS, labels) for k in kinds}
    assert [o["metadata"]["name"] for o in got["ConfigMap"]] == ["c1", "c2"]
    if side == "client":
        assert isinstance(c, InProcess)
        # the pods by the server's own List (get --raw), every other kind in one get
        raw = [call for call in c.calls if any(w.startswith("--raw=") for w in call)]
        rest = [call for call in c.calls if call not in raw]
        assert len(raw) == 1 and len(rest) == 1 and "ConfigMap,Secret" in rest[0], c.calls


@pytest.mark.parametrize("side", ["fake", "client"])
def test_a_refused_list_many_falls_back_to_each_kind_and_its_own_refusal(side: str) -> None:
    fake = base()
    fake.denied = ["list secrets"]
    c = client_of(fake, side)
    with pytest.raises(Forbidden, match="secrets"):
        c.list_many(["ConfigMap", "Secret"], NS)
    if side == "client":  # the batch, then each kind alone until the refused one
        assert isinstance(c, InProcess)
        assert len(c.calls) == 3


def test_teardown_reads_every_kind_in_one_call(local_cfg: ClusterConfig, fake_for) -> None:
    """teardown listed each kind it can have made with a process of its own, and the
    workload object and its pods again to split them (17 kubectl processes at any pod
    count on the kube tier; kubectl's floor is one delete). Now one get of every kind
    but the workload and its pods, and those two by the server's own List, all at once;
    the deletes are as before."""
    from mlenv.cluster.teardown import teardown

    fake = fake_for(local_cfg)
    deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    c = InProcess(fake)
    rep = teardown(local_cfg, c)
    gets = [call for call in c.calls if call[0] == "get"]
    raw = [g for g in gets if any(w.startswith("--raw=") for w in g)]
    assert len(raw) == 2 and len(gets) == 3, gets  # the workload and its pods by --raw
    assert {"statefulset/ml-dev-env", "service/ml-dev-env-headless"} <= set(rep.deleted)
    assert fake.list("StatefulSet", local_cfg.namespace) == []


@pytest.mark.parametrize("side", ["fake", "client"])
def test_many_nodes_are_read_by_one_list_not_one_get_each(side: str) -> None:
    """``get Node/a Node/b …`` reads each node in turn: 512 pinned nodes outlasted deploy's
    60 s deadline on the kube tier. Past a handful, one list of every Node answers them,
    each as get would (None: no such node)."""
    names = [f"gpu-{i:03d}" for i in range(40)]
    fake = FakeCluster.typical(NS, names, gpus=1)
    c = client_of(fake, side)
    refs: list[ObjectRef] = [("Node", n, None) for n in [*names, "gone"]]
    got = c.get_many([*refs, ("ConfigMap", "nope", NS)])
    assert got == {**{r: fake.get(*r) for r in refs}, ("ConfigMap", "nope", NS): None}
    if side == "client":
        assert isinstance(c, InProcess)
        assert c.calls[0] == ["get", "--raw=/api/v1/nodes", "--request-timeout=10000ms"]
        assert len(c.calls) == 2, c.calls  # the node list, the ConfigMap by name


def test_nodes_read_by_name_go_a_few_dozen_to_a_call() -> None:
    """A user who may get Nodes but not list them: the names go 50 to a ``get`` (kubectl
    reads each in turn, and one call has one call's deadline), every node answered."""
    from mlenv.cluster.oc import GET_NAMES

    names = [f"gpu-{i:03d}" for i in range(120)]
    fake = FakeCluster.typical(NS, names, gpus=1)
    fake.denied = ["list nodes"]
    c = InProcess(fake)
    refs: list[ObjectRef] = [("Node", n, None) for n in names]
    got = c.get_many(refs)
    assert got == {r: fake.get(*r) for r in refs}
    named = [k for k in c.calls if k[0] == "get" and not any(w.startswith("--raw") for w in k)]
    sizes = [sum(w.startswith("Node/") for w in k) for k in named]
    assert sizes == [GET_NAMES, GET_NAMES, 20], c.calls
