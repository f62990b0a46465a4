"""`mlenv render` through the Typer app, on a copy of the example clusters."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mlenv.cli.app import app
from mlenv.config import load_all

REPO = Path(__file__).resolve().parents[2]


def _root_with(path: Path, *names: str) -> Path:
    """A repo-like root at ``path`` holding copies of the example cluster files (only
    ``names``, when given: a test of --all's bookkeeping needs a few trees, not all;
    rendering every example costs about half a second of CPU each time)."""
    (path / "clusters").mkdir(parents=True)
    for f in sorted((REPO / "clusters").glob("*.yaml")):
        if not names or f.stem in names:
            shutil.copy(f, path / "clusters" / f.name)
    assert any((path / "clusters").iterdir()), "the repository ships example clusters/*.yaml"
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repo-like root holding copies of the example cluster files."""
    return _root_with(tmp_path)


@pytest.fixture(scope="module")
def rendered_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Every example rendered by ``render --all`` once for the module: (root, its stdout)."""
    root = _root_with(tmp_path_factory.mktemp("rendered"))
    res = _run(root, "--all")
    assert res.exit_code == 0, res.output
    return root, res.stdout


@pytest.fixture
def rendered(rendered_once: tuple[Path, str], tmp_path: Path) -> Path:
    """A copy of :func:`rendered_once`'s root that the test may change."""
    return Path(shutil.copytree(rendered_once[0], tmp_path / "rendered"))


def _run(root: Path, *args: str):
    return CliRunner().invoke(app, ["render", *args], env={"MLENV_ROOT": str(root)})


def _any_cluster(root: Path, rdma: bool | None = None) -> str:
    for c in load_all(root):
        if rdma is None or c.rdma.enabled == rdma:
            return c.name
    raise AssertionError(f"the examples include a cluster with rdma.enabled={rdma}")


def test_render_one_cluster_both_modes(root):
    name = _any_cluster(root)
    res = _run(root, name)
    assert res.exit_code == 0, res.output
    for mode in ("rdma", "tcp"):
        d = root / "k8s" / name / mode
        assert f"to k8s/{name}/{mode}/" in res.stdout
        kust = yaml.safe_load((d / "kustomization.yaml").read_text())
        assert kust["resources"] and all((d / f).is_file() for f in kust["resources"])


def test_render_one_mode_and_nodes(root):
    name = _any_cluster(root, rdma=False)
    res = _run(root, name, "--mode", "tcp", "--nodes", "1")
    assert res.exit_code == 0, res.output
    assert not (root / "k8s" / name / "rdma").exists()
    sts = yaml.safe_load((root / "k8s" / name / "tcp" / "statefulset.yaml").read_text())
    assert sts["spec"]["replicas"] == 1


def test_rdma_on_tcp_cluster_warns_and_renders_tcp(root):
    name = _any_cluster(root, rdma=False)
    res = _run(root, name, "--mode", "rdma")
    assert res.exit_code == 0, res.output
    assert "warning:" in res.stderr and "rdma" in res.stderr.lower()
    sts = yaml.safe_load((root / "k8s" / name / "rdma" / "statefulset.yaml").read_text())
    env = {
        e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["MLENV_NETWORK_MODE"] == "tcp"


def test_out_dir(root, tmp_path):
    name = _any_cluster(root)
    out = tmp_path / "elsewhere"
    res = _run(root, name, "--mode", "tcp", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert (out / name / "tcp" / "statefulset.yaml").is_file()
    assert not (root / "k8s").exists()


def test_all_writes_every_tree_and_check_finds_them_up_to_date(rendered_once, rendered):
    root, stdout = rendered_once
    names = [c.name for c in load_all(root)]
    assert stdout.count("wrote ") == 2 * len(names)
    for name in names:
        for mode in ("rdma", "tcp"):
            assert f"to k8s/{name}/{mode}/\n" in stdout
    res = _run(rendered, "--all", "--check")
    assert res.exit_code == 0, res.output
    assert "up to date" in res.stdout


def test_check_names_a_changed_and_an_extra_file_and_never_writes(rendered):
    names = [c.name for c in load_all(rendered)]
    target = rendered / "k8s" / names[0] / "tcp" / "statefulset.yaml"
    target.write_text(target.read_text().replace("replicas:", "replicas: 99 #"))
    extra = rendered / "k8s" / names[-1] / "rdma" / "configmap.yaml"
    extra.write_text("# stray\n")
    before = target.read_bytes()
    res = _run(rendered, "--all", "--check")
    assert res.exit_code == 1
    assert f"stale: {target} (differs)" in res.stderr
    assert f"stale: {extra} (extra)" in res.stderr
    assert "mlenv render --all" in res.stderr
    assert target.read_bytes() == before, "--check never writes"


def test_check_names_the_tree_of_a_deleted_config(rendered):
    names = [c.name for c in load_all(rendered)]
    (rendered / "clusters" / f"{names[0]}.yaml").rename(rendered / "clusters" / "gone.txt")
    res = _run(rendered, "--all", "--check")
    assert res.exit_code == 1
    assert f"stale: {rendered / 'k8s' / names[0]}/ (extra" in res.stderr


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--mode", "infiniband", "X"], "--mode must be one of rdma, tcp"),
        ([], "exactly one of CLUSTER or --all"),
        (["--all", "X"], "exactly one of CLUSTER or --all"),
        (["--all", "--nodes", "2"], "--nodes applies to one cluster"),
        (["no-such-cluster"], "no-such-cluster"),
        (["X", "--nodes", "0"], "--nodes must be at least 1"),
    ],
)
def test_bad_flags_exit_2_without_traceback(root, args, expect):
    args = [_any_cluster(root) if a == "X" else a for a in args]
    res = _run(root, *args)
    assert res.exit_code == 2, res.output
    assert expect in res.stderr
    assert "Traceback" not in res.output
    assert not (root / "k8s").exists(), "nothing is written on bad input"


def test_invalid_config_exit_2_with_location(root):
    bad = root / "clusters" / "broken.yaml"
    bad.write_text("cluster:\n  name: broken\n  namespace: ns\ngpus:\n  per_nodes: 4\n")
    res = _run(root, "broken")
    assert res.exit_code == 2
    assert "broken.yaml:5:" in res.stderr
    assert "Traceback" not in res.output
    res = _run(root, "--all")
    assert res.exit_code == 2
    assert not (root / "k8s").exists(), "one bad file stops --all before anything is written"


def _warns_of_each_tcp_fallback(root: Path, *args: str) -> None:
    tcp_only = [c.name for c in load_all(root) if not c.rdma.enabled]
    assert len(tcp_only) == 2, "the examples include TCP-only clusters"
    res = _run(root, *args)
    warnings = [line for line in res.stderr.splitlines() if "falls back to TCP" in line]
    assert [w.split("'")[1] for w in warnings] == tcp_only, res.stderr
    assert all(w.startswith("warning: ") for w in warnings)
    assert "falls back" not in res.stdout


def test_all_warns_about_every_tcp_fallback(tmp_path):
    _warns_of_each_tcp_fallback(_root_with(tmp_path, "barcelona", "local", "nerc-tcp"), "--all")


def test_all_check_warns_about_every_tcp_fallback(rendered):
    _warns_of_each_tcp_fallback(rendered, "--all", "--check")


def test_config_warnings_are_printed(tmp_path):
    root = _root_with(tmp_path, "barcelona")  # an RDMA example that warns of nothing
    (root / "clusters" / "bare.yaml").write_text(
        "cluster: {name: bare, namespace: ns}\nnetwork:\n  rdma:\n    enabled: true\n    devices: auto\n"
    )
    res = _run(root, "bare", "--mode", "rdma")
    assert res.exit_code == 0, res.output
    assert (
        "bare.yaml:4:14: warning: network.rdma.enabled: RDMA is enabled but neither" in res.stderr
    )
    res = _run(root, "--all")
    assert res.exit_code == 0, res.output
    assert res.stderr.count("RDMA is enabled but neither") == 1


@pytest.mark.parametrize("check", [False, True])
def test_out_is_a_file_exit_2(root, tmp_path, check):
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    name = _any_cluster(root)
    res = _run(root, name, "--mode", "tcp", "--out", str(afile), *(["--check"] if check else []))
    assert res.exit_code == 2, res.output
    errors = [line for line in res.stderr.splitlines() if not line.startswith("warning:")]
    assert errors == [
        f"error: --out {afile}: cannot write {afile}/{name}/tcp: {afile} exists and is not a directory"
    ]
    assert afile.read_text() == "not a folder\n"


def test_k8s_subfolder_is_a_file_exit_2(root):
    name = _any_cluster(root)
    (root / "k8s").mkdir()
    (root / "k8s" / name).write_text("")
    res = _run(root, name, "--mode", "tcp")
    assert res.exit_code == 2, res.output
    assert (
        f"error: output folder {root / 'k8s'}: cannot write {root / 'k8s' / name / 'tcp'}: "
        in res.stderr
    )
    assert "internal error" not in res.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")
def test_out_not_writable_exit_2(root, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        res = _run(root, _any_cluster(root), "--out", str(ro))
    finally:
        ro.chmod(0o700)
    assert res.exit_code == 2, res.output
    assert f"{ro} is not writable" in res.stderr


def test_write_failing_midway_is_exit_3(root, tmp_path):
    # The folder passes the up-front check, but one file cannot be written.
    name = _any_cluster(root)
    blocked = tmp_path / "out" / name / "tcp" / "statefulset.yaml"
    blocked.mkdir(parents=True)
    res = _run(root, name, "--mode", "tcp", "--out", str(tmp_path / "out"))
    assert res.exit_code == 3, res.output
    assert f"error: cannot write {blocked}: Is a directory" in res.stderr
    assert "internal error" not in res.output and "Traceback" not in res.output


def test_make_demo_renders_and_uses_the_default_rank_count():
    """`make demo` writes every example's tree (printing where) and lets --nproc default."""
    lines = (REPO / "Makefile").read_text().splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("demo: venv"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    assert "$(MLENV) render --all" in recipe
    assert not any("--check" in r for r in recipe)
    assert not any("<cluster>" in r for r in recipe), (
        "no placeholder: render prints the real folders"
    )
    (acceptance,) = [r for r in recipe if " acceptance " in r]
    assert "--nproc" not in acceptance


def test_all_outside_a_checkout_is_exit_2(tmp_path):
    """`render --all --check` with no clusters/ checked 0 trees and exited 0."""
    bare = tmp_path / "not-a-checkout"
    bare.mkdir()
    for args in (["--all", "--check"], ["--all"]):
        res = _run(bare, *args)
        assert res.exit_code == 2, res.output
        assert f"--all: no clusters/ folder in {bare} or above" in res.stderr
    (bare / "clusters").mkdir()
    res = _run(bare, "--all", "--check")
    assert res.exit_code == 2 and "holds no cluster config" in res.stderr
    assert not (bare / "k8s").exists()


def test_stale_slurm_and_hosts_trees_of_deleted_configs_are_flagged(tmp_path):
    """A deleted slurm/hosts config left slurm/<name>/ (hosts/<name>/) behind unflagged."""
    root = _root_with(tmp_path, "local")  # one Kubernetes example beside the Slurm config
    slurm_cfg = REPO / "tests" / "data" / "platforms" / "cpu-slurm.yaml"
    shutil.copy(slurm_cfg, root / "clusters" / "cpu-slurm.yaml")
    name = yaml.safe_load(slurm_cfg.read_text())["cluster"]["name"]
    assert _run(root, "--all").exit_code == 0
    assert (root / "slurm" / name).is_dir()
    assert _run(root, "--all", "--check").exit_code == 0
    (root / "slurm" / "notes").mkdir()  # the user's own folder beside ours: never flagged
    (root / "slurm" / "notes" / "todo.txt").write_text("mine\n")
    shutil.copytree(
        root / "slurm" / name, root / "hosts" / "old-hosts"
    )  # a deleted hosts config's tree
    (root / "clusters" / "cpu-slurm.yaml").unlink()
    res = _run(root, "--all", "--check")
    assert res.exit_code == 1, res.output
    assert f"stale: {root / 'slurm' / name}/ (extra: no clusters/*.yaml renders it)" in res.stderr
    assert f"stale: {root / 'hosts' / 'old-hosts'}/ (extra" in res.stderr
    assert "notes" not in res.stderr


def test_check_names_prune_for_a_deleted_configs_tree_and_prune_removes_it(tmp_path):
    """`render --all --check` said to run `render --all` for a deleted config's k8s/ tree,
    which never removed it; now it names --prune, which removes only generated files."""
    root = _root_with(tmp_path, "local", "nerc-tcp")  # one deleted, one that stays
    assert _run(root, "--all").exit_code == 0
    (root / "clusters" / "nerc-tcp.yaml").unlink()
    mine = root / "k8s" / "nerc-tcp" / "NOTES.md"
    mine.write_text("my notes\n")
    r = _run(root, "--all", "--check")
    assert r.exit_code == 1
    assert r.stderr.splitlines()[-1] == (
        "the rendered manifests are out of date; regenerate with: mlenv render --all --prune "
        "(make render-all PRUNE=1) and commit them"
    )
    r = _run(root, "--all", "--prune")
    assert r.exit_code == 0, r.output
    assert (
        "removed the generated files of k8s/nerc-tcp/ (no clusters/*.yaml renders it)" in r.stdout
    )
    assert f"kept {mine}: not generated by mlenv render" in r.stderr
    assert [p.name for p in (root / "k8s" / "nerc-tcp").rglob("*")] == ["NOTES.md"]
    mine.unlink()
    assert _run(root, "--all", "--prune").exit_code == 0
    assert not (root / "k8s" / "nerc-tcp").exists()
    assert _run(root, "--all", "--check").exit_code == 0  # fresh again
    r = _run(root, "--all", "--check", "--prune")
    assert r.exit_code == 2 and "--prune goes with --all, without --check" in r.stderr
