"""the shared scenario set (mlenv/testing/scenarios.py) on the real plane,
through OcCluster and the tier's kubectl: what the fake must match
(tests/unit/cluster/test_scenarios_fake.py runs the same scenarios on it)."""

from __future__ import annotations

import pytest
from _kubeenv import MISSING_IMAGE, Plane

from mlenv.cluster.api import ApplyResult, DryRunItem, ObjectRef, Question
from mlenv.cluster.oc import OcCluster
from mlenv.testing.scenarios import SCENARIOS, Stage

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py


def plane_stage(p: Plane, openshift: bool) -> Stage:
    ns = p.namespace("scn")  # the non-admin user is the project admin there
    return Stage(
        "plane",
        OcCluster(p.kubectl, kubeconfig=str(p.kubeconfig())),
        OcCluster(p.kubectl, kubeconfig=str(p.kubeconfig(user=True))),
        ns,
        MISSING_IMAGE,
        openshift=openshift,
    )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_real_server_does_what_the_scenario_says(scenario: str, openshift: Plane) -> None:
    SCENARIOS[scenario](plane_stage(openshift, True))


# the batched calls meet a plain API too (ImageStream unserved: the batch falls back)
@pytest.mark.parametrize(
    "scenario",
    [
        "openshift_kinds_exist_only_on_openshift",
        "many_objects_read_at_once_answer_as_each_alone",
        "many_questions_asked_at_once_answer_as_each_alone",
        # and no SCC admission: the IPC_LOCK pod is created
        "a_pod_is_admitted_only_through_an_scc_its_service_account_may_use",
    ],
)
def test_the_plain_flavour_serves_no_openshift_kind(scenario: str, plain: Plane) -> None:
    SCENARIOS[scenario](plane_stage(plain, False))


def _config_map(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"batch-{name}"},
        "data": {"k": "v"},
    }


def test_each_batch_is_one_kubectl_call_on_the_real_server(openshift: Plane) -> None:
    """the scenarios above hold even where a batch falls back to one call per object
    or question; here the real kubectl and server take each batch as it is sent: `get
    KIND/NAME …` answers a List, `create -f -` of a List of SelfSubjectAccessReviews
    answers each review, and `apply --dry-run=server -f -` of a List (deploy's dry run)
    answers each object, for the admin and for the project admin."""
    st = plane_stage(openshift, True)
    ns = st.namespace
    refs: list[ObjectRef] = [
        ("ServiceAccount", "default", ns),
        ("ConfigMap", "kube-root-ca.crt", ns),
        ("ConfigMap", "absent", ns),
    ]
    questions = [
        Question("create", "pods", ns, "exec"),
        Question("bind", "clusterroles/absent", ns),
        Question("patch", "statefulsets.apps", ns),
        Question("create", "secrets", ns),
    ]
    for client in (st.admin, st.user):
        assert isinstance(client, OcCluster)
        lines: list[str] = []
        client.trace = lines.append
        got = client.get_many(refs)
        answers = client.can_i_many(questions)
        dry = client.dry_run_many(
            [DryRunItem(_config_map(n), ns, live=None) for n in ("a", "b", "c")]
        )
        assert len(lines) == 3, lines  # no fallback
        assert [(r.kind, r.name, r.action) for r in dry if isinstance(r, ApplyResult)] == [
            ("ConfigMap", f"batch-{n}", "created") for n in ("a", "b", "c")
        ]
        assert got[refs[0]] is not None and got[refs[1]] is not None and got[refs[2]] is None
        client.trace = None
        assert answers == [
            client.can_i(q.verb, q.resource, q.namespace, subresource=q.subresource)
            for q in questions
        ]
    assert st.admin.can_i_many(questions[1:2]) == [True] and st.user.can_i_many(questions[1:2]) == [
        False
    ]
