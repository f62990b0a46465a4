"""the kubectl path's tar stream, against a faithful stand-in for the pod.

The fake ``kubectl`` on PATH runs what a pod would: ``exec … -- tar -x -f - -C /workspace``
is a real GNU tar extracting into a folder that plays the pod's /workspace, and
``exec … -- python3 -I -S -c SCRIPT /workspace`` runs the real script over that folder,
from it, as the image's WORKDIR. So the
file names travel exactly as they would: through our local tar, the stream, and tar in
the pod.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mlenv.cluster import fetch, treehash
from mlenv.cluster import sync as syncmod
from mlenv.cluster.api import PodView
from mlenv.cluster.deploy import DeployOptions, deploy
from mlenv.cluster.oc import OcCluster, tar_pack
from mlenv.config import load
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.testing.fakecluster import FakeCluster

POD_KUBECTL = r"""
import os, subprocess, sys
argv = sys.argv[1:]
root = os.environ["FAKE_POD_ROOT"]
cmd = argv[argv.index("--") + 1:]
cmd = [a.replace("/workspace", root + "/workspace") for a in cmd]
with open(os.environ["FAKE_POD_LOG"], "a") as fh:
    fh.write(repr(argv[:argv.index("--")]) + "\n")
if cmd and cmd[0] == "python3":
    cmd[0] = sys.executable
if cmd and cmd[0] == "tar":
    cmd[0] = "/bin/tar"  # the pod's tar: GNU, whatever the control host packs with
# the image's WORKDIR, as a real exec runs in: /workspace, the synced tree
sys.exit(subprocess.call(cmd, cwd=root + "/workspace"))
"""


ROOT = Path(__file__).resolve().parents[2]
# The cluster tests' fixtures (the example configs, a fake that fits them), from their conftest.
_spec = importlib.util.spec_from_file_location(
    "cluster_conftest", ROOT / "tests" / "unit" / "cluster" / "conftest.py"
)
assert _spec and _spec.loader
_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cluster)


@pytest.fixture
def barcelona() -> ClusterConfig:
    """The RDMA example: 4 pinned nodes, RoCE networks, per-pod volumes."""
    return load("barcelona", ROOT)


@pytest.fixture(name="fake_for")
def fake_for_fixture() -> Callable[..., FakeCluster]:
    """A fake that satisfies every preflight check of a config."""
    fake_for: Callable[..., FakeCluster] = _cluster.fake_for
    return fake_for


@pytest.fixture
def pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "kubectl"
    exe.write_text(f"#!{sys.executable}\n{POD_KUBECTL}")
    exe.chmod(0o755)
    root = tmp_path / "pod"
    (root / "workspace").mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_POD_ROOT", str(root))
    monkeypatch.setenv("FAKE_POD_LOG", str(tmp_path / "log"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return root / "workspace"


@pytest.mark.parametrize("local_tar", ["gnu", "bsdtar"])
def test_option_shaped_file_names_are_files_not_tar_options(
    pod, tmp_path, monkeypatch, local_tar: str
) -> None:
    """The control host packs with its own tar: GNU on Linux, bsdtar on a Mac (the
    GNU-only --verbatim-files-from made bsdtar refuse every kubectl sync)."""
    if local_tar == "bsdtar":
        found = shutil.which("bsdtar")
        if found is None:
            pytest.skip("bsdtar is not installed (make system-deps installs libarchive-tools)")
        (tmp_path / "bin" / "tar").symlink_to(found)
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)  # where a hijacked local tar would run its --checkpoint-action
    evil = [
        "--checkpoint=1",
        "--checkpoint-action=exec=touch PWNED",
        "--to-command=touch PWNED2",
        "-T",
        "--use-compress-program=touch PWNED3",
    ]
    for name in evil:
        (ws / name).write_text(name)
    (ws / "sub").mkdir()
    (ws / "sub" / "--files-from=x").write_text("y")
    client = OcCluster()
    assert not client.is_oc
    client.rsync(str(ws), "ml-dev-env-0", "ns", "/workspace")
    for name in evil:
        assert (pod / name).read_text() == name
    assert (pod / "sub" / "--files-from=x").read_text() == "y"
    pwned = [p for p in tmp_path.rglob("PWNED*")]
    assert pwned == [], f"a file name ran a command: {pwned}"


def test_thirty_thousand_files_do_not_overflow_the_argument_list(pod, tmp_path) -> None:
    ws = tmp_path / "ws"
    n = 0
    for d in range(150):
        sub = ws / f"dir-{d:03d}-with-a-long-enough-name-to-fill-argv"
        sub.mkdir(parents=True)
        for f in range(200):
            (sub / f"file-{f:03d}-also-with-a-long-name.txt").write_bytes(b"x")
            n += 1
    assert n == 30_000
    OcCluster().rsync(str(ws), "ml-dev-env-0", "ns", "/workspace")
    got = sum(len(files) for _d, _s, files in os.walk(pod))
    assert got == n


def test_list_and_remove_scripts_agree_with_the_planner(tmp_path: Path) -> None:
    root = tmp_path / "w"
    for rel in ("a.py", "results/r.json", ".cache/x", "sub/b.txt", "__pycache__/c.pyc"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(rel.encode())
    out = subprocess.run(
        [sys.executable, "-c", treehash.LIST_SCRIPT, str(root)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listing = json.loads(out)
    assert "__pycache__/c.pyc" not in listing
    files = {rel: rel.encode() for rel in ("a.py", "results/r.json", ".cache/x", "sub/b.txt")}
    assert listing == treehash.sha256_files(files)
    # the remover takes exactly its list, and nothing that climbs out of the root
    (tmp_path / "outside").write_text("keep")
    rm = subprocess.run(
        [sys.executable, "-c", treehash.REMOVE_SCRIPT, str(root)],
        input=json.dumps(["sub/b.txt", "../outside", "/etc/passwd"]),
        capture_output=True,
        text=True,
        check=True,
    )
    assert rm.stdout.strip() == "1"
    assert not (root / "sub" / "b.txt").exists() and (tmp_path / "outside").exists()


def test_the_pod_listing_is_json_for_any_file_name(tmp_path: Path) -> None:
    """The pod's listing is written without the json module: quotes, backslashes, control
    characters, non-ASCII and characters beyond the BMP, a name's undecodable byte and a
    link's target all read back as the planner's own listing has them."""
    root = tmp_path / "w"
    root.mkdir()
    names = ['q"uote', "back\\slash", "new\nline\ttab\x7f", "é-ü", "\U0001f600.py", "ok.txt"]
    for i, name in enumerate(names):
        (root / name).write_text(str(i))
    (root / os.fsdecode(b"raw-\xff")).write_text("bytes")
    (root / "link").symlink_to('../"odd" target\n')
    want = treehash.local_listing(str(root))

    def run(script: str, *extra: str, stdin: bytes = b"") -> str:
        done = subprocess.run(
            [sys.executable, *treehash.POD_PYTHON[1:], script, str(root), *extra],
            input=stdin,
            capture_output=True,
            check=True,
        )
        return done.stdout.decode()

    assert json.loads(run(treehash.LIST_SCRIPT)) == want
    # the copy's listing, then every name sent back (the pod's own tree as the tar) and
    # listed again as it landed
    cmd, listed = tar_pack(str(root), want)
    archive = subprocess.run(cmd, input=listed, capture_output=True, check=True).stdout
    sent = treehash.names_header(list(want)) + archive
    before, _, after = run(treehash.COPY_SCRIPT, "MARK", stdin=sent).partition("\nMARK\n")
    assert json.loads(before) == json.loads(after) == want


def test_kubectl_path_keeps_pod_files_and_deletes_only_when_asked(
    pod: Path, tmp_path: Path, barcelona: ClusterConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole sync (plan listing, tar copy, verify, remove list) through kubectl."""
    # one pod, reached only through the fake kubectl (worker_pods' `get` is not under test)
    monkeypatch.setattr(
        syncmod,
        "worker_pods",
        lambda _cfg, _client: [PodView("ml-dev-env-0", "Running", True, 0, "gpu-0")],
    )
    client = OcCluster()
    assert not client.is_oc
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("a")
    (ws / "gone.py").write_text("g")
    (ws / "--checkpoint-action=exec=touch PWNED").write_text("x")
    syncmod.sync(barcelona, client, str(ws))
    assert (pod / "gone.py").read_text() == "g"
    assert (pod / "--checkpoint-action=exec=touch PWNED").read_text() == "x"
    # what the pod wrote itself
    for rel in ("results/r.json", "checkpoints/step1.pt", ".cache/z", "sub/.hostfile", "hostfile"):
        (pod / rel).parent.mkdir(parents=True, exist_ok=True)
        (pod / rel).write_text("pod")
    (ws / "a.py").write_text("a2")
    (ws / "gone.py").unlink()
    rep = syncmod.sync(barcelona, client, str(ws))  # default: adds and updates only
    assert (pod / "a.py").read_text() == "a2"
    for rel in (
        "gone.py",
        "results/r.json",
        "checkpoints/step1.pt",
        ".cache/z",
        "sub/.hostfile",
        "hostfile",
    ):
        assert (pod / rel).exists(), f"{rel} was deleted by a sync without --delete"
    assert rep.plans[0].delete == [] and "hostfile" in rep.plans[0].kept

    said: list[str] = []
    before = sorted(str(p.relative_to(pod)) for p in pod.rglob("*"))
    rep = syncmod.sync(barcelona, client, str(ws), delete=True, dry_run=True, say=said.append)
    assert sorted(str(p.relative_to(pod)) for p in pod.rglob("*")) == before
    assert "  - gone.py" in said and "  - hostfile" in said
    assert not any("results" in s or "checkpoints" in s or ".cache" in s for s in said)

    syncmod.sync(barcelona, client, str(ws), delete=True)
    assert not (pod / "gone.py").exists() and not (pod / "hostfile").exists()
    for rel in (
        "results/r.json",
        "checkpoints/step1.pt",
        ".cache/z",
        "sub/.hostfile",
        "a.py",
        "--checkpoint-action=exec=touch PWNED",
    ):
        assert (pod / rel).exists(), f"{rel} was deleted by --delete"
    assert list(tmp_path.rglob("PWNED")) == []


@pytest.mark.parametrize(
    "rel,keep",
    [
        ("results/run1/x.json", True),
        ("checkpoints/step1/m.bin", True),
        ("out/checkpoint-500/optimizer.bin", True),
        ("out/Checkpoint_best", True),
        ("save/global_step100/mp_rank_00_model_states.pt", True),
        ("model.ckpt", True),
        ("w/model.safetensors", True),
        ("w/final.pth", True),
        (".cache/z", True),
        ("sub/.hostfile", True),
        ("a/__pycache__/m.pyc", True),
        ("gone.py", False),
        ("hostfile", False),
        ("sub/results/r.json", False),
        ("data/train.jsonl", False),
        ("notes-on-checkpoints.md", False),
    ],
)
def test_delete_protects_results_checkpoints_and_dotfiles(rel: str, keep: bool) -> None:
    assert treehash.protected(rel) is keep
    plan = syncmod.plan_pod("p", {}, {rel: "h"}, delete=True)
    # results/ at the top is neither copied nor compared: never planned at all
    assert (rel in plan.delete) is (not keep)


def _tree_with_links(ws: Path) -> None:
    (ws / "d").mkdir(parents=True)
    (ws / "a.py").write_text("a")
    (ws / "d" / "x").write_text("x")
    (ws / "link.py").symlink_to("a.py")
    (ws / "dl").symlink_to("d")
    (ws / "dangling").symlink_to("no-such-file")


def test_sync_copies_symlinks_as_links_and_verifies_them(
    pod: Path, tmp_path: Path, barcelona: ClusterConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # oc rsync -a and tar keep a link a link; the check once hashed the local target and
    # skipped links in the pod, so any symlink in workspace/ failed every sync (exit 3)
    monkeypatch.setattr(
        syncmod,
        "worker_pods",
        lambda _cfg, _client: [PodView("ml-dev-env-0", "Running", True, 0, "gpu-0")],
    )
    ws = tmp_path / "ws"
    _tree_with_links(ws)
    rep = syncmod.sync(barcelona, OcCluster(), str(ws))
    assert os.readlink(pod / "link.py") == "a.py" and os.readlink(pod / "dl") == "d"
    assert os.readlink(pod / "dangling") == "no-such-file"
    assert rep.verified == ["ml-dev-env-0"]
    listing = json.loads(
        subprocess.run(
            [sys.executable, "-c", treehash.LIST_SCRIPT, str(pod)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert listing == treehash.local_listing(str(ws))
    assert listing["dl"] == "symlink:d" and "dl/x" not in listing


def test_fake_cluster_models_symlinks_like_the_pod(
    barcelona: ClusterConfig, tmp_path: Path, fake_for: Callable[..., FakeCluster]
) -> None:
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ws = tmp_path / "ws"
    _tree_with_links(ws)
    rep = syncmod.sync(barcelona, fake, str(ws))
    assert rep.verified and all(
        not p.add for p in syncmod.sync(barcelona, fake, str(ws), dry_run=True).plans
    )


def test_sync_non_utf8_and_newline_file_names(
    pod: Path, tmp_path: Path, barcelona: ClusterConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # names are bytes on Linux: the NUL-separated list must carry any of them, unchanged
    monkeypatch.setattr(
        syncmod,
        "worker_pods",
        lambda _cfg, _client: [PodView("ml-dev-env-0", "Running", True, 0, "gpu-0")],
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    odd = [b"caf\xe9.txt", b"new\nline.py", b"tab\there", b" lead-space"]
    for raw in odd:
        with open(os.path.join(os.fsencode(ws), raw), "wb") as fh:
            fh.write(raw)
    said: list[str] = []
    syncmod.sync(barcelona, OcCluster(), str(ws), dry_run=True, say=said.append)
    assert "  + 'caf\\udce9.txt'" in said and "  + 'new\\nline.py'" in said
    assert all(line.isprintable() for line in said)
    rep = syncmod.sync(barcelona, OcCluster(), str(ws))
    assert rep.verified == ["ml-dev-env-0"]
    for raw in odd:
        with open(os.path.join(os.fsencode(pod), raw), "rb") as fh:
            assert fh.read() == raw


def test_delete_removes_a_link_never_its_target(
    pod: Path, tmp_path: Path, barcelona: ClusterConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the remover once resolved the whole path: deleting a link deleted what it pointed
    # to (a checkpoint, a file outside the tree); it must resolve the folder only
    monkeypatch.setattr(
        syncmod,
        "worker_pods",
        lambda _cfg, _client: [PodView("ml-dev-env-0", "Running", True, 0, "gpu-0")],
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("a")
    (ws / "latest.py").symlink_to("a.py")
    (ws / "best").symlink_to("checkpoints/best.pt")
    (ws / "dl").symlink_to("sub")
    (ws / "sub").mkdir()
    (ws / "sub" / "x").write_text("x")
    syncmod.sync(barcelona, OcCluster(), str(ws))
    (pod / "checkpoints").mkdir()
    (pod / "checkpoints" / "best.pt").write_text("weights")
    for rel in ("latest.py", "best", "dl"):
        (ws / rel).unlink()
    syncmod.sync(barcelona, OcCluster(), str(ws), delete=True)
    for rel in ("latest.py", "best", "dl"):
        assert not os.path.lexists(pod / rel), rel
    assert (pod / "a.py").read_text() == "a"
    assert (pod / "checkpoints" / "best.pt").read_text() == "weights"
    assert (pod / "sub" / "x").read_text() == "x"


def test_sync_excludes_what_rsync_excludes_files_too(
    barcelona: ClusterConfig, tmp_path: Path, fake_for: Callable[..., FakeCluster]
) -> None:
    # rsync's `.git` / `/results` patterns match files as well as folders: a submodule's
    # `.git` file was skipped by the copy but expected by the check (every sync exit 3)
    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="rdma", timeout=60), fake)
    ws = tmp_path / "ws"
    (ws / "repo").mkdir(parents=True)
    (ws / "repo" / ".git").write_text("gitdir: ../../.git/modules/repo\n")
    (ws / "repo" / "train.py").write_text("t")
    (ws / "results").write_text("a file, not the folder")
    rep = syncmod.sync(barcelona, fake, str(ws))
    assert rep.verified and rep.digest.startswith("1 ")
    for rel in ("repo/.git", "results", "x/__pycache__"):
        assert treehash.excluded(rel), rel
    assert not treehash.excluded("sub/results")


def test_the_copy_and_its_listing_are_one_exec(pod, tmp_path) -> None:
    """sync's check of a pod it copied to comes from the copy's own stream (one kubectl
    process, not a copy and then a listing); the folder and the command are arguments of
    ``sh -c``, never part of its script."""
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.py").write_text("print(1)\n")
    (ws / "sub" / "$(touch PWNED).txt").write_text("x")
    listed = OcCluster().rsync(
        str(ws),
        "ml-dev-env-0",
        "ns",
        "/workspace",
        then=(*treehash.POD_PYTHON, treehash.LIST_SCRIPT, "/workspace"),
    )
    assert json.loads(listed) == treehash.local_listing(str(ws))
    assert len((tmp_path / "log").read_text().splitlines()) == 1
    assert (pod / "sub" / "$(touch PWNED).txt").read_text() == "x"
    assert list(tmp_path.rglob("PWNED")) == []


def _copy(ws: Path, choose: Callable[[str], list[str]], client: OcCluster | None = None) -> str:
    """One planned copy of ``ws`` into the stand-in's pod, its packs removed after."""
    client = client or OcCluster()
    local = treehash.local_listing(str(ws))
    with client.packs(str(ws), list(local)) as packs:
        return client.copy_planned(packs, "ml-dev-env-0", "ns", "/workspace", choose)


def test_a_copy_is_planned_inside_its_one_exec(pod, tmp_path) -> None:
    """kubectl's sync is one stream per pod: the pod's tree (the plan's input, handed to
    the caller mid-exec), the tar of just the names the caller chose, those names listed
    as they landed, in one interpreter. The folder and the mark are arguments, never
    part of the script; a file the pod had is kept, and one not chosen is not touched."""
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.py").write_text("print(1)\n")
    (ws / "sub" / "$(touch PWNED).txt").write_text("x")
    (ws / "same.txt").write_text("same")
    (pod / "old.txt").write_text("kept")
    (pod / "same.txt").write_text("same")
    same = os.stat(pod / "same.txt")
    local = treehash.local_listing(str(ws))
    seen: list[dict[str, str]] = []

    def choose(listed: str) -> list[str]:
        seen.append(json.loads(listed))
        return [n for n in local if seen[0].get(n) != local[n]]

    landed = json.loads(_copy(ws, choose))
    assert seen == [{"old.txt": hashlib.sha256(b"kept").hexdigest(), "same.txt": local["same.txt"]}]
    assert landed == {n: h for n, h in local.items() if n != "same.txt"}
    assert os.stat(pod / "same.txt").st_ctime_ns == same.st_ctime_ns  # never rewritten
    assert (pod / "old.txt").read_text() == "kept"
    assert len((tmp_path / "log").read_text().splitlines()) == 1
    assert (pod / "sub" / "$(touch PWNED).txt").read_text() == "x"
    assert list(tmp_path.rglob("PWNED")) == []
    assert list(Path(os.environ.get("TMPDIR", "/tmp")).glob("mlenv-sync-*")) == []
    # oc rsync copies only what changed: it is planned by a listing of its own
    assert OcCluster(binary="oc").one_stream_copy is False


def test_names_of_any_bytes_cross_the_stream_and_nothing_chosen_writes_nothing(
    pod, tmp_path
) -> None:
    """The names go to the pod NUL-separated after their length: a newline, a NUL-free
    odd byte or a name like the mark are names. Choosing none unpacks nothing (no tar
    runs in the pod) and lists nothing more."""
    ws = tmp_path / "ws"
    ws.mkdir()
    odd = ["two\nlines.txt", os.fsdecode(b"latin-\xe9.txt"), "12\n", "mlenv-0.txt", " lead"]
    for name in odd:
        (ws / name).write_bytes(name.encode("utf-8", "surrogateescape"))
    local = treehash.local_listing(str(ws))
    landed = json.loads(_copy(ws, lambda _listed: list(local)))
    assert landed == local and sorted(landed) == sorted(odd)
    shim = tmp_path / "bin" / "tar"
    shim.write_text("#!/bin/sh\necho tar ran >&2\nexit 9\n")
    shim.chmod(0o755)
    got: list[dict[str, str]] = []

    def none(listed: str) -> list[str]:
        got.append(json.loads(listed))
        return []

    assert json.loads(_copy(ws, none)) == {}
    assert got == [local]


def test_a_users_module_named_like_the_stdlib_is_not_what_the_pod_scripts_import(
    pod, tmp_path
) -> None:
    """The pod's working directory is /workspace, the tree sync fills, and ``python3 -c``
    puts it first on sys.path: a user's own json.py was the listing's json (every later
    sync failed, after running the user's module)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for mod in ("json", "hashlib", "subprocess", "re", "base64"):
        (ws / f"{mod}.py").write_text("raise SystemExit('the user module ran')\n")
    local = treehash.local_listing(str(ws))
    seen: list[dict[str, str]] = []

    def every(listed: str) -> list[str]:
        seen.append(json.loads(listed))
        return list(local)

    client = OcCluster()
    _copy(ws, every, client)
    assert json.loads(_copy(ws, every, client)) == local
    assert seen == [{}, local]
    res = client.exec(
        "ml-dev-env-0", "ns", [*treehash.POD_PYTHON, fetch.RUNS_SCRIPT, "/workspace/results", "9"]
    )
    assert (res.returncode, json.loads(res.stdout)) == (0, {})


def test_the_tree_is_packed_once_for_every_pod(
    pod: Path, tmp_path: Path, barcelona: ClusterConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl's sync packs what pods lack once and streams it only into the pods that
    lack it: packing per pod ran the local tar (and hashed the tree first) once per pod,
    and a pod that held the tree had all of it unpacked again."""
    pods = [PodView(f"ml-dev-env-{i}", "Running", True, i, f"gpu-{i}") for i in range(4)]
    monkeypatch.setattr(syncmod, "worker_pods", lambda _cfg, _client: pods)
    log = tmp_path / "tar.log"
    shim = tmp_path / "bin" / "tar"
    shim.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec /bin/tar "$@"\n')
    shim.chmod(0o755)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("a")
    # one pod at a time: the stand-in's pods share one folder, so only the first lacks it
    rep = syncmod.sync(barcelona, OcCluster(), str(ws), workers=1)
    assert rep.verified == [p.name for p in pods]
    assert [(len(pl.add), len(pl.update)) for pl in rep.plans] == [(1, 0)] + [(0, 0)] * 3
    # the pods' tar -x goes through the same PATH here
    tars = log.read_text().splitlines()
    assert sum("--create" in ln for ln in tars) == 1
    assert sum(ln.startswith("-x") for ln in tars) == 1  # what the others hold is not sent
    assert len((tmp_path / "log").read_text().splitlines()) == len(pods)  # one exec each
    assert list(Path(os.environ.get("TMPDIR", "/tmp")).glob("mlenv-sync-*")) == []
    # again, with nothing changed: nothing packed, nothing unpacked, one exec each
    log.unlink()
    rep = syncmod.sync(barcelona, OcCluster(), str(ws))
    assert rep.verified == [p.name for p in pods] and not log.exists()
    assert len((tmp_path / "log").read_text().splitlines()) == 2 * len(pods)
