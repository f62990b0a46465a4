"""The kube tier's pod identity rules (mlenv/testing/kube/identity.py): which UID, groups and
capabilities a container runs as, and how a volume is handed to the pod's fsGroup. The
processes themselves are proven on the plane (tests/kube/test_identity.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mlenv.testing.kube.identity import (
    CONTAINERD_DEFAULT_CAPS,
    CRIO_DEFAULT_CAPS,
    IdentityError,
    pod_identity,
    range_start,
    set_volume_ownership,
)

RANGES = {
    "openshift.io/sa.scc.uid-range": "1000680000/10000",
    "openshift.io/sa.scc.supplemental-groups": "1000690000/10000",
}


def _pod(psc: dict | None = None, csc: dict | None = None) -> tuple[dict, dict]:
    container = {"name": "c", "securityContext": csc or {}}
    return {"spec": {"securityContext": psc or {}, "containers": [container]}}, container


def test_the_container_runs_as_user_over_the_pods_and_the_namespace_range() -> None:
    pod, c = _pod({"runAsUser": 2000, "runAsGroup": 3000}, {"runAsUser": 1234})
    ident = pod_identity(pod, c, RANGES, "openshift")
    assert (ident.uid, ident.gid) == (1234, 3000)
    pod, c = _pod({"runAsUser": 2000})
    assert pod_identity(pod, c, RANGES, "openshift").uid == 2000


def test_an_annotated_openshift_namespace_gives_its_first_uid_gid_0_and_an_fs_group() -> None:
    pod, c = _pod()
    ident = pod_identity(pod, c, RANGES, "openshift")
    # what restricted-v2 writes: runAsUser and fsGroup from the ranges; the GID stays 0
    assert (ident.uid, ident.gid, ident.fs_group) == (1000680000, 0, 1000690000)
    assert ident.groups == (1000690000,) and ident.home == "/"
    only_uids = {"openshift.io/sa.scc.uid-range": "1000680000/10000"}
    assert pod_identity(pod, c, only_uids, "openshift").fs_group == 1000680000
    # the plain flavour has no such admission; an unannotated namespace runs the image's root
    assert pod_identity(pod, c, RANGES, "plain").uid == 0
    assert pod_identity(pod, c, {}, "openshift").uid == 0
    with pytest.raises(IdentityError, match="uid-range"):
        pod_identity(pod, c, {"openshift.io/sa.scc.uid-range": "many"}, "openshift")


def test_a_pod_an_scc_admitted_runs_as_its_spec_says_not_the_range() -> None:
    """The tier's SCC admission writes what the chosen SCC assigns; a pod privileged
    (RunAsAny) admitted with no runAsUser runs as the image's root, in a namespace with
    ranges too (the range was given to such a pod's container before: UID 1000070000)."""
    pod, c = _pod()
    pod["metadata"] = {"annotations": {"openshift.io/scc": "privileged"}}
    ident = pod_identity(pod, c, RANGES, "openshift")
    assert (ident.uid, ident.fs_group, ident.groups) == (0, None, ())
    pod, c = _pod({"fsGroup": 1000690000}, {"runAsUser": 1000680000})
    pod["metadata"] = {"annotations": {"openshift.io/scc": "restricted-v2"}}
    ident = pod_identity(pod, c, RANGES, "openshift")
    assert (ident.uid, ident.fs_group) == (1000680000, 1000690000)


def test_groups_are_fs_group_then_supplemental_groups() -> None:
    pod, c = _pod({"runAsUser": 5, "fsGroup": 7, "supplementalGroups": [9, 7, 11]})
    assert pod_identity(pod, c, {}, "plain").groups == (7, 9, 11)
    pod, c = _pod({"runAsUser": 5})
    assert pod_identity(pod, c, {}, "plain").groups == ()


def test_capabilities_are_the_runtime_default_minus_drops_plus_adds() -> None:
    pod, c = _pod(csc={"capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}})
    assert pod_identity(pod, c, {}, "openshift").caps == ("ipc_lock",)
    pod, c = _pod(csc={"capabilities": {"drop": ["CAP_KILL"]}})
    assert set(pod_identity(pod, c, {}, "openshift").caps) == set(CRIO_DEFAULT_CAPS) - {"kill"}
    assert set(pod_identity(pod, c, {}, "plain").caps) == set(CONTAINERD_DEFAULT_CAPS) - {"kill"}
    pod, c = _pod(csc={"privileged": True, "allowPrivilegeEscalation": False})
    ident = pod_identity(pod, c, {}, "plain")
    assert "sys_admin" in ident.caps and not ident.no_new_privs
    pod, c = _pod(csc={"allowPrivilegeEscalation": False})
    assert pod_identity(pod, c, {}, "plain").no_new_privs
    pod, c = _pod(csc={"capabilities": {"add": ["NOT_A_CAP"]}})
    with pytest.raises(IdentityError, match="NOT_A_CAP|not_a_cap"):
        pod_identity(pod, c, {}, "plain")


def test_env_is_what_confine_sh_reads() -> None:
    pod, c = _pod(
        {"runAsUser": 1000680000, "fsGroup": 1000680000},
        {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    )
    env = pod_identity(pod, c, {}, "openshift").env()
    assert env["MLENV_KUBE_UID"] == "1000680000" and env["MLENV_KUBE_GID"] == "0"
    assert env["MLENV_KUBE_GROUPS"] == "1000680000" and env["MLENV_KUBE_CAPS"] == ""
    assert env["MLENV_KUBE_NNP"] == "1" and env["HOME"] == "/"


def test_range_start_reads_openshifts_forms() -> None:
    assert range_start("1000680000/10000") == 1000680000
    assert range_start("1000680000/10000,1000700000/10000") == 1000680000
    assert range_start("12") == 12
    assert range_start("a/b") is None and range_start("") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another group needs root")
def test_a_volume_goes_to_the_fs_group_as_a_kubelet_hands_it(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir(mode=0o755)
    (tmp_path / "sub" / "f").write_text("x")
    (tmp_path / "sub" / "f").chmod(0o644)
    (tmp_path / "link").symlink_to("/etc/passwd")
    etc = os.stat("/etc/passwd")
    assert set_volume_ownership(tmp_path, 4242, False, "Always") > 0
    for p, mode in ((tmp_path, None), (tmp_path / "sub", 0o2775), (tmp_path / "sub" / "f", 0o664)):
        st = p.stat()
        assert st.st_gid == 4242
        if mode is not None:
            assert stat.S_IMODE(st.st_mode) == mode, oct(st.st_mode)
    assert os.lstat(tmp_path / "link").st_gid == 4242
    after = os.stat("/etc/passwd")  # a link is never followed
    assert (after.st_gid, after.st_mode) == (etc.st_gid, etc.st_mode)
    # OnRootMismatch: a matching root is left as it is, even with a file that does not match
    (tmp_path / "new").write_text("y")
    assert set_volume_ownership(tmp_path, 4242, False, "OnRootMismatch") == 0
    assert set_volume_ownership(tmp_path, 4242, False, "Always") > 0
    # read-only volumes (Secrets) get group read, not write
    ro = tmp_path / "secret"
    ro.mkdir()
    (ro / "key").write_text("k")
    (ro / "key").chmod(0o400)
    set_volume_ownership(ro, 4242, True, "Always")
    assert stat.S_IMODE((ro / "key").stat().st_mode) == 0o440
