"""deploy applies the scheduled re-check's objects, teardown deletes them, preflight
asks what applying them needs (the fake, real renderer, the `local` example + a schedule)."""

from __future__ import annotations

import dataclasses

import pytest

from mlenv.cluster.deploy import DeployOptions, PreflightFailed, deploy
from mlenv.cluster.teardown import teardown
from mlenv.config.model import Recheck
from mlenv.render.recheck import RECHECK
from mlenv.testing.fakecluster import FakeCluster

KINDS = ("ServiceAccount", "Role", "RoleBinding", "CronJob")


def _setup(local_cfg, schedule: str = "0 3 * * 0"):
    cfg = dataclasses.replace(local_cfg, recheck=Recheck(schedule))
    return cfg, FakeCluster.typical(cfg.namespace, ["cpu-0", "cpu-1"], gpus=0)


def test_deploy_applies_and_teardown_deletes_the_recheck_objects(local_cfg) -> None:
    cfg, fake = _setup(local_cfg)
    said: list[str] = []
    deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake, say=said.append)
    ns = cfg.namespace
    for kind in KINDS:
        obj = fake.get(kind, RECHECK, ns)
        assert obj is not None, kind
        assert obj["metadata"]["annotations"]["ml-dev-env.io/created-by"] == "mlenv"
    assert f"cronjob/{RECHECK} created" in said
    # a re-deploy changes nothing
    again = deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert again.unchanged
    rep = teardown(cfg, fake)
    for kind in KINDS:
        assert fake.get(kind, RECHECK, ns) is None, kind
        assert f"{kind.lower()}/{RECHECK}" in rep.deleted
    assert rep.deleted[0] == f"cronjob/{RECHECK}"  # before the StatefulSet it execs into


def test_without_a_schedule_deploy_makes_none_of_them(local_cfg) -> None:
    fake = FakeCluster.typical(local_cfg.namespace, ["cpu-0", "cpu-1"], gpus=0)
    deploy(local_cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert all(fake.get(k, RECHECK, local_cfg.namespace) is None for k in KINDS)


@pytest.mark.parametrize("denied", ["create cronjobs", "create roles", "patch rolebindings"])
def test_preflight_asks_for_what_the_recheck_needs(local_cfg, denied: str) -> None:
    cfg, fake = _setup(local_cfg)
    fake.denied.append(denied)
    with pytest.raises(PreflightFailed) as e:
        deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake)
    verb, res = denied.split()
    assert f"may not {verb} {res}" in str(e.value)
    assert fake.get("StatefulSet", "ml-dev-env", cfg.namespace) is None  # nothing applied


def test_a_user_without_bind_deploys_when_holding_what_the_role_grants(local_cfg) -> None:
    """RBAC's escalation check: without `bind` on roles a user may bind only what they hold.
    The Role is created by this deploy, so the server-side dry run cannot check the
    binding (the real server refuses a binding to a Role that does not exist yet, "not
    found"); preflight asks instead. Fails before: the dry run refused the RoleBinding."""
    cfg, fake = _setup(local_cfg)
    fake.denied += ["bind roles", "escalate roles"]
    said: list[str] = []
    deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake, say=said.append)
    assert fake.get("RoleBinding", RECHECK, cfg.namespace) is not None
    assert any(f"rolebinding/{RECHECK}: not in the server-side dry run" in s for s in said)


def test_a_user_who_may_not_exec_is_told_before_anything_is_applied(local_cfg) -> None:
    cfg, fake = _setup(local_cfg)
    fake.denied += ["bind roles", "escalate roles", "create pods/exec"]
    with pytest.raises(PreflightFailed) as e:
        deploy(cfg, DeployOptions(mode="tcp", timeout=60), fake)
    assert f"may not bind role {RECHECK}" in str(
        e.value
    ) and "create pods/exec/ml-dev-env-0" in str(e.value)
    assert fake.get("Role", RECHECK, cfg.namespace) is None
