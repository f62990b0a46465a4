"""Host safety of the kube tier's exec, with real mount namespaces.

kwok runs every exec as a process on this machine, as root. The tier starts kwok through
kwokns.sh (the whole host read-only in kwok's mount namespace, except the tier's folder)
with a PATH that holds only links to confine.sh, which runs the command chrooted into the
pod's overlay (upper layer: the pod's folder), mounted once by the pod's root holder
(podroot.sh, started here as the pod-root controller starts it). Here the same scripts run as kwok would
run them (``env -i PATH=<shims> … sh -c …`` inside kwokns.sh), so what is proven is the
confinement itself; tests/kube proves it again through the apiserver and kwok. Each pod
here has a network namespace of its own (a holder process, as the tier's pod-root
controller starts one: podnet.py), without a veth: which namespace a command runs in is
what is proven here; the pods' addresses are tests/integration/test_kube_podnet.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlenv.testing.kube import plane, podnet, podroots

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("unshare"),
        reason="needs root and unshare (mount namespaces, overlayfs)",
    )
]


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[plane.Tier]:
    t = plane.Tier(tmp_path / "tier")
    for sub in ("bin", "shims", "pods", "volumes"):
        (t.folder / sub).mkdir(parents=True)
    plane._make_shims(t)
    yield t
    podroots.release_all_roots(t.folder / "pods")
    podnet.release_all(t.folder / "pods")


def _holder(root: Path) -> podnet.PodNet:
    """A network namespace for the pod at ``root``, recorded as the controller records it."""
    pid, started, inode = podnet.start_holder()
    rec = podnet.PodNet(pid, started, inode, "none", "0.0.0.0", uuid.uuid4().hex)
    (root / podnet.RECORD).write_text(rec.line())
    return rec


def _as_kwok(tier: plane.Tier, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as kwok's exec would: in kwok's namespace, resolved with kwok's PATH,
    with the pod's Exec environment added to kwok's own."""
    kwok_env = {"PATH": str(tier.folder / "shims"), "MLENV_KUBE_TIER": str(tier.folder), **env}
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            str(tier.folder / "bin" / "kwokns.sh"),
            str(tier.folder),
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in kwok_env.items()),
            *argv,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _pod_env(tier: plane.Tier, ns: str, pod: str, volume: Path) -> dict[str, str]:
    root = tier.folder / "pods" / ns / pod
    root.mkdir(parents=True)
    _holder(root)
    volume.mkdir(parents=True, exist_ok=True)
    podroots.start_root(tier.folder, root, pod, [f"/workspace={volume}"], None)
    return {"MLENV_KUBE_POD_ROOT": str(root), "MLENV_KUBE_POD_NAME": pod, "HOME": "/root"}


def test_a_pods_writes_land_in_its_own_root(tier: plane.Tier) -> None:
    token = uuid.uuid4().hex
    vol = tier.folder / "volumes" / "pvc-1"
    env = _pod_env(tier, "team-a", "worker-0", vol)
    res = _as_kwok(
        tier,
        env,
        "sh",
        "-c",
        f"echo ws > /workspace/{token} && echo home > /root/{token} && echo etc > /etc/{token}"
        " && hostname && ls /workspace",
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[0] == "worker-0"
    assert (vol / token).read_text() == "ws\n"
    upper = tier.folder / "pods" / "team-a" / "worker-0" / "upper"
    assert (upper / "root" / token).read_text() == "home\n"
    assert (upper / "etc" / token).read_text() == "etc\n"
    for host in (Path("/workspace") / token, Path("/root") / token, Path("/etc") / token):
        assert not host.exists(), f"{host} was written on the host"


def test_pods_do_not_see_each_other_or_the_tiers_keys(tier: plane.Tier) -> None:
    (tier.folder / "pki").mkdir()
    (tier.folder / "pki" / "admin.key").write_text("secret")
    a = _pod_env(tier, "ns", "a", tier.folder / "volumes" / "va")
    b = _pod_env(tier, "ns", "b", tier.folder / "volumes" / "vb")
    assert _as_kwok(tier, a, "sh", "-c", "echo mine > /root/note").returncode == 0
    res = _as_kwok(
        tier,
        b,
        "sh",
        "-c",
        f"cat /root/note; ls {tier.folder}/pki; cat {tier.folder}/pki/admin.key",
    )
    assert res.returncode != 0
    assert "mine" not in res.stdout and "secret" not in res.stdout


def test_no_pod_root_no_process(tier: plane.Tier) -> None:
    marker = tier.folder / "ran"
    res = _as_kwok(tier, {}, "sh", "-c", f"touch {marker}")
    assert res.returncode == 126 and "refusing" in res.stderr
    outside = {"MLENV_KUBE_POD_ROOT": "/root", "MLENV_KUBE_POD_NAME": "x"}
    res = _as_kwok(tier, outside, "sh", "-c", f"touch {marker}")
    assert res.returncode == 126 and "not under" in res.stderr
    assert not marker.exists()


def test_a_command_by_absolute_path_finds_the_host_read_only(tier: plane.Tier) -> None:
    """An absolute path bypasses the shims; kwok's namespace still keeps the host intact."""
    token = uuid.uuid4().hex
    env = _pod_env(tier, "ns", "p", tier.folder / "volumes" / "v")
    res = _as_kwok(tier, env, "/bin/sh", "-c", f"echo x > /root/{token}")
    assert res.returncode != 0 and "Read-only file system" in res.stderr
    assert not (Path("/root") / token).exists()
    # ... but the tier's folder stays writable there (kwok needs nothing else)
    res = _as_kwok(tier, env, "/bin/sh", "-c", f"echo x > {tier.folder}/{token}")
    assert res.returncode == 0 and (tier.folder / token).exists()


def _netns(pid: int | str) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def test_each_pods_commands_run_in_its_own_network_namespace(tier: plane.Tier) -> None:
    """As in a pod of a real node: its network namespace, not this machine's, and not its
    neighbour's (each pod's sshd on the same port)."""
    seen = {}
    for pod in ("a", "b"):
        env = _pod_env(tier, "ns", pod, tier.folder / "volumes" / pod)
        res = _as_kwok(tier, env, "sh", "-c", "stat -L -c %i /proc/self/ns/net")
        assert res.returncode == 0, res.stderr
        seen[pod] = int(res.stdout.strip())
        rec = podnet.read_record(tier.folder / "pods" / "ns" / pod)
        assert rec is not None and seen[pod] == rec.inode
    assert seen["a"] != seen["b"]
    assert _netns("self") not in seen.values()


def test_a_pod_without_its_network_runs_nothing(tier: plane.Tier) -> None:
    """No record, or a record whose holder is gone (its pid now another process's, with
    another namespace): refused, never run in kwok's (this machine's) network."""
    marker = tier.folder / "ran"
    env = _pod_env(tier, "ns", "p", tier.folder / "volumes" / "v")
    root = Path(env["MLENV_KUBE_POD_ROOT"])
    rec = podnet.release(root)
    assert rec is not None and not podnet.holder_alive(rec)
    res = _as_kwok(tier, env, "sh", "-c", f"touch {marker}")
    assert res.returncode == 126 and "has no network" in res.stderr, res.stderr
    # the record names a live pid whose namespace is not the recorded one: this process's
    (root / podnet.RECORD).write_text(
        podnet.PodNet(os.getpid(), rec.started, rec.inode, "none", "0.0.0.0", rec.uid).line()
    )
    res = _as_kwok(tier, env, "sh", "-c", f"touch {marker}")
    assert res.returncode == 126 and "is gone" in res.stderr, res.stderr
    assert not marker.exists()


def test_every_process_of_a_pod_sees_one_root_mounted_once(tier: plane.Tier) -> None:
    """What one exec writes or starts, the next one sees: one mount namespace (the root
    holder's), one overlay, whatever number of execs (each exec mounted an overlay of its
    own on the shared upper folder, and sshd's sessions saw other files than later execs)."""
    env = _pod_env(tier, "ns", "p", tier.folder / "volumes" / "v")
    root = Path(env["MLENV_KUBE_POD_ROOT"])
    rec = podroots.read_root(root)
    assert rec is not None and podroots.root_alive(rec)
    first = _as_kwok(
        tier, env, "sh", "-c", "echo one > /etc/first && stat -L -c %i /proc/self/ns/mnt"
    )
    assert first.returncode == 0, first.stderr
    second = _as_kwok(
        tier,
        env,
        "sh",
        "-c",
        "cat /etc/first; stat -L -c %i /proc/self/ns/mnt; grep -c ' overlay ' /proc/self/mounts",
    )
    assert second.returncode == 0, second.stderr
    seen, inode, overlays = second.stdout.split()
    assert seen == "one"
    assert int(inode) == int(first.stdout) == rec.inode
    assert overlays == "1"


def test_a_pod_sees_no_home_folder_tmp_or_tier_but_runs_the_image_python(
    tier: plane.Tier,
) -> None:
    """The host's /root, /home and /tmp are empty in a pod (an image's are), the tier's
    folder is hidden; the Python installation and checkout the pods run come back read-only."""
    import sys

    env = _pod_env(tier, "ns", "p", tier.folder / "volumes" / "v")
    for folder in ("/root", "/home", "/tmp"):
        # only the first folders of the image's paths below it (/root/.pyenv here)
        image = {
            Path(p).relative_to(folder).parts[0]
            for p in podroots.image_paths()
            if p.startswith(folder + "/")
        }
        res = _as_kwok(tier, env, "ls", "-A", folder)
        assert res.returncode == 0, res.stderr
        assert set(res.stdout.split()) == image, (folder, res.stdout)
    hidden = _as_kwok(tier, env, "sh", "-c", f"ls -A {tier.folder} 2>/dev/null | wc -l")
    assert hidden.stdout.strip() == "0", hidden.stdout
    # through sh (a shim): a command by absolute path would bypass the pod
    res = _as_kwok(
        tier,
        env,
        "sh",
        "-c",
        f"{sys.executable} -c 'import mlenv, sys; print(sys.version_info[0])'",
    )
    assert res.returncode == 0 and res.stdout == "3\n", res.stderr
    for path in podroots.image_paths():
        assert _as_kwok(tier, env, "sh", "-c", f"touch {path}/.x").returncode != 0
