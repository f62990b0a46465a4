"""mlenv/workload/: the Workload interface and the StatefulSet behind it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mlenv.cluster.api import PodView
from mlenv.workload import WORKER_KINDS, Workload, worker_of, workload_for
from mlenv.workload.statefulset import REVISION_LABEL, StatefulSet


@dataclasses.dataclass(frozen=True)
class Bare(Workload):
    """A kind that implements nothing: every question must say so."""

    key = "bare"
    kind = "Bare"


@pytest.mark.parametrize(
    "call",
    [
        lambda w: w.objects({}, nodes=1, metadata={}, selector={}, service="s", claims=[]),
        lambda w: w.pod_template({}),
        lambda w: w.rank_label,
        lambda w: w.pod_name(0),
        lambda w: w.rank_of("x-0"),
        lambda w: w.pod_dns(0, "svc", "ns"),
        lambda w: w.desired({}),
        lambda w: w.ready({}),
        lambda w: w.ranks({}),
        lambda w: w.not_rolled_out({}, []),
        lambda w: w.immutable_changes({}, {}),
    ],
)
def test_an_unimplemented_question_names_the_workload_and_what_it_lacks(call: Any) -> None:
    with pytest.raises(NotImplementedError, match=r"workload 'bare' does not implement \w+"):
        call(Bare("x"))


def test_the_default_workload_is_the_statefulset_named_like_the_app() -> None:
    wl = workload_for()
    assert isinstance(wl, StatefulSet) and wl.name == "ml-dev-env"
    assert wl.ref == "statefulset/ml-dev-env" and WORKER_KINDS == ("StatefulSet",)
    with pytest.raises(ValueError, match=r"unknown workload 'jobset': expected one of"):
        workload_for("jobset")


def test_pod_names_and_ranks_map_both_ways() -> None:
    wl = workload_for(name="team-a")
    assert [wl.pod_name(i) for i in range(3)] == ["team-a-0", "team-a-1", "team-a-2"]
    assert [wl.rank_of(wl.pod_name(i)) for i in range(12)] == list(range(12))
    assert wl.rank_of("workstation") is None
    assert wl.pod_dns(2, "team-a-headless", "ns1") == "team-a-2.team-a-headless.ns1.svc"


def _live(replicas: int, uid: str = "u1", **status: Any) -> dict[str, Any]:
    return {
        "kind": "StatefulSet",
        "metadata": {"name": "ml-dev-env", "uid": uid, "generation": 2},
        "spec": {"replicas": replicas},
        "status": status,
    }


def _pod(name: str, owner_uid: str, controller: bool = True) -> dict[str, Any]:
    refs = [
        {"kind": "StatefulSet", "name": "ml-dev-env", "uid": owner_uid, "controller": controller}
    ]
    return {"metadata": {"name": name, "ownerReferences": refs}}


def test_the_pods_it_runs_are_its_replicas_in_rank_order() -> None:
    wl = workload_for()
    assert wl.ranks(_live(3)) == {"ml-dev-env-0": 0, "ml-dev-env-1": 1, "ml-dev-env-2": 2}
    assert wl.desired(_live(3)) == 3 and wl.desired(None) == 0
    assert wl.ready(_live(3, readyReplicas=2)) == 2 and wl.ready(None) == 0


def test_ownership_is_the_controller_reference_by_uid_not_the_name() -> None:
    wl = workload_for()
    live = _live(2)
    assert wl.owns(live, _pod("ml-dev-env-0", "u1"))
    assert not wl.owns(live, _pod("ml-dev-env-0", "someone-else"))
    assert not wl.owns(live, _pod("ml-dev-env-0", "u1", controller=False))
    assert not wl.owns(_live(2, uid=""), _pod("ml-dev-env-0", ""))
    # by kind and name alone: for a pod whose workload is already gone
    assert wl.made(_pod("ml-dev-env-0", "gone")) and not wl.made({"metadata": {}})


def test_a_rollout_is_done_when_the_spec_is_seen_and_every_pod_runs_it() -> None:
    wl = workload_for()

    def pod(name: str, rev: str) -> PodView:
        return PodView(name, "Running", True, 0, "n0", labels={REVISION_LABEL: rev})

    pods = [pod("ml-dev-env-0", "r2"), pod("ml-dev-env-1", "r1")]
    unseen = _live(2, observedGeneration=1, updateRevision="r2")
    assert wl.not_rolled_out(unseen, pods) == [
        "statefulset/ml-dev-env (generation 2 not yet observed)"
    ]
    seen = _live(2, observedGeneration=2, updateRevision="r2")
    assert wl.not_rolled_out(seen, pods) == ["ml-dev-env-1"]
    assert wl.not_rolled_out(seen, [pod("ml-dev-env-1", "r2")]) == []
    assert wl.not_rolled_out(_live(2), pods) == []  # no revisions reported: Ready is all


def test_the_worker_object_wraps_the_pod_template() -> None:
    wl = workload_for()
    template = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}
    claim = {"metadata": {"name": "workspace"}, "spec": {}}
    [obj] = wl.objects(
        template,
        nodes=4,
        metadata={"namespace": "ns1", "labels": {"a": "b"}},
        selector={"a": "b"},
        service="ml-dev-env-headless",
        claims=[claim],
    )
    assert obj["kind"] == "StatefulSet" and obj["metadata"]["name"] == "ml-dev-env"
    assert obj["spec"]["replicas"] == 4 and obj["spec"]["volumeClaimTemplates"] == [claim]
    assert wl.pod_template(obj) == template and wl.desired(obj) == 4
    assert worker_of(obj) == wl and worker_of({"kind": "Pod"}) is None
    no_claims = wl.objects(template, nodes=1, metadata={}, selector={}, service="s", claims=[])
    assert "volumeClaimTemplates" not in no_claims[0]["spec"]


def test_immutable_changes_compare_what_the_server_fills_in_as_unchanged() -> None:
    wl = workload_for()

    def sts(cls: str | None, policy: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "serviceName": "s",
            "volumeClaimTemplates": [
                {"metadata": {"name": "w"}, "spec": {"storageClassName": cls}}
            ],
        }
        if policy:
            spec["podManagementPolicy"] = policy
        return {"spec": spec}

    # the server's default storage class on the live object is no change
    assert wl.immutable_changes(sts("gp3"), sts(None)) == []
    assert wl.immutable_changes(sts("gp3"), sts("fast")) == ["volumeClaimTemplates"]
    assert wl.immutable_changes(sts(None, "OrderedReady"), sts(None, "Parallel")) == [
        "podManagementPolicy"
    ]
