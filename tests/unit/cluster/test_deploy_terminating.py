"""deploy after a teardown on a cluster where deletes take time (the fake with a grace
period): Terminating objects are waited for, never applied over or counted Ready."""

from __future__ import annotations

import pytest

from mlenv.cluster.api import PodView
from mlenv.cluster.deploy import DeployOptions, DeployTimeout, deploy
from mlenv.cluster.pods import worker_pods
from mlenv.cluster.teardown import teardown
from mlenv.render.names import DEV_POD


def _deploy(cfg, fake, said: list[str], timeout: float = 120):
    return deploy(cfg, DeployOptions(mode="tcp", timeout=timeout), fake, say=said.append)


@pytest.mark.parametrize("purge", [False, True])
def test_deploy_right_after_teardown_waits_for_terminating_objects(
    local_cfg, fake_for, purge: bool
) -> None:
    fake = fake_for(local_cfg)
    fake.grace_s = 10.0
    first = _deploy(local_cfg, fake, [])
    teardown(local_cfg, fake, purge=purge)
    sts = fake.get("StatefulSet", "ml-dev-env", local_cfg.namespace)
    assert sts is not None and "deletionTimestamp" in sts["metadata"]  # foreground: held
    said: list[str] = []
    rep = _deploy(local_cfg, fake, said)
    waits = [s for s in said if "Terminating" in s and "waiting for them to go" in s]
    assert len(waits) == 1 and "statefulset/ml-dev-env" in waits[0]
    assert not [a for a in rep.applied if a.kind == "StatefulSet" and a.action == "unchanged"]
    assert rep.ready == first.nodes
    fake.pause(60.0)  # well past every grace period: nothing deployed may vanish now
    live = fake.get("StatefulSet", "ml-dev-env", local_cfg.namespace)
    assert live is not None and "deletionTimestamp" not in live["metadata"]
    assert len(worker_pods(local_cfg, fake)) == first.nodes
    if any(m["kind"] == "Pod" for m in rep.manifests):
        assert fake.get("Pod", DEV_POD, local_cfg.namespace) is not None


def test_ten_deploy_teardown_deploy_rounds_converge(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    fake.grace_s = 5.0
    for _ in range(10):
        rep = _deploy(local_cfg, fake, [])
        assert rep.ready == rep.nodes
        teardown(local_cfg, fake)
    rep = _deploy(local_cfg, fake, [])
    fake.pause(30.0)
    assert sum(p.ready for p in worker_pods(local_cfg, fake)) == rep.nodes


def test_a_terminating_pod_is_never_ready() -> None:
    pod = {
        "metadata": {"name": "ml-dev-env-0", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    view = PodView.of(pod)
    assert view.terminating and not view.ready


def test_an_object_that_stays_terminating_ends_the_wait_at_the_timeout(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    fake.grace_s = 10_000.0  # a finalizer nobody removes
    _deploy(local_cfg, fake, [])
    teardown(local_cfg, fake)
    with pytest.raises(DeployTimeout, match="still Terminating after 30 s; nothing was applied"):
        _deploy(local_cfg, fake, [], timeout=30)


def test_teardown_dry_run_lists_what_the_teardown_deletes(local_cfg, fake_for) -> None:
    fake = fake_for(local_cfg)
    fake.grace_s = 10.0  # the StatefulSet's pods are still listed, Terminating, after it
    _deploy(local_cfg, fake, [])
    dry = teardown(local_cfg, fake, purge=True, dry_run=True)
    real = teardown(local_cfg, fake, purge=True)
    assert sorted(dry.deleted) == sorted(real.deleted)
    assert "statefulset/ml-dev-env" in real.deleted
