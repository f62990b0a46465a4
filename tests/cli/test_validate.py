"""`mlenv validate` through the Typer app: exit codes 0/2, every error, never a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from mlenv.cli.app import app

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "bad-configs"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repo-like root with copies of the example clusters."""
    shutil.copytree(REPO / "clusters", tmp_path / "clusters", symlinks=False)
    return tmp_path


def _run(root: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["validate", *args], env={"MLENV_ROOT": str(root)})


def test_all_examples_ok(root: Path) -> None:
    r = _run(root)
    n = len(list((root / "clusters").glob("*.yaml")))
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"ok: {n} file(s)"


def test_by_name_and_by_path(root: Path) -> None:
    r = _run(root, "local", str(root / "clusters" / "barcelona.yaml"))
    assert r.exit_code == 0 and r.stdout.strip() == "ok: 2 file(s)"


def test_every_error_of_every_file(root: Path) -> None:
    bad = [CORPUS / "many-errors.yaml", CORPUS / "unknown-nested-key.yaml"]
    r = _run(root, "local", *map(str, bad))
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    expected = []
    for b in bad:
        expected += [
            f"{CORPUS}/{line}" for line in b.with_suffix(".expected").read_text().splitlines()
        ]
    assert lines[:-1] == expected
    assert lines[-1] == f"{len(expected)} error(s) in 2 of 3 file(s)"
    assert "Traceback" not in r.output


def test_no_args_reports_bad_file_in_clusters(root: Path) -> None:
    shutil.copy(CORPUS / "storage-mode-enum.yaml", root / "clusters" / "zz-bad.yaml")
    r = _run(root)
    assert r.exit_code == 2
    assert f"{root}/clusters/zz-bad.yaml:5:9: storage.mode: expected one of rwx" in r.stderr
    assert r.stderr.strip().endswith("1 error(s) in 1 of 5 file(s)")


def test_duplicate_cluster_names(root: Path) -> None:
    shutil.copy(root / "clusters" / "local.yaml", root / "clusters" / "local.yml")
    r = _run(root)
    assert r.exit_code == 2
    # files are read in name order: local.yaml first, so local.yml is the duplicate
    later, first = root / "clusters" / "local.yml", root / "clusters" / "local.yaml"
    line = later.read_text().splitlines().index("  name: local") + 1
    assert (
        f"{later}:{line}:9: cluster.name: cluster name 'local' is also used by {first}" in r.stderr
    )


def test_a_copy_under_another_file_name_is_refused_not_rendered_over_the_original(
    tmp_path: Path,
) -> None:
    """A config copied to clusters/mine.yaml still saying `name: local` rendered into
    k8s/local/, over the committed tree of clusters/local.yaml. (Only local.yaml beside
    it: validating and rendering the other examples each time proved nothing more.)"""
    root = tmp_path
    (root / "clusters").mkdir()
    shutil.copy(REPO / "clusters" / "local.yaml", root / "clusters" / "local.yaml")
    shutil.copy(root / "clusters" / "local.yaml", root / "clusters" / "mine.yaml")
    copy = root / "clusters" / "mine.yaml"
    line = copy.read_text().splitlines().index("  name: local") + 1
    r = _run(root)
    assert r.exit_code == 2
    assert (
        f"{copy}:{line}:9: cluster.name: cluster name 'local' differs from the file name "
        "'mine.yaml'"
    ) in r.stderr
    r = CliRunner().invoke(app, ["render", "local"], env={"MLENV_ROOT": str(root)})
    assert r.exit_code == 0, r.output
    before = {p: p.read_bytes() for p in (root / "k8s").rglob("*") if p.is_file()}
    assert before
    r = CliRunner().invoke(app, ["render", "mine"], env={"MLENV_ROOT": str(root)})
    assert r.exit_code == 2 and "rename the file to local.yaml" in r.stderr
    assert {p: p.read_bytes() for p in (root / "k8s").rglob("*") if p.is_file()} == before
    # a file outside clusters/ with the name of one in it: validates, but renders only elsewhere
    outside = root / "saved.yaml"
    shutil.copy(root / "clusters" / "local.yaml", outside)
    assert _run(root, str(outside)).exit_code == 0
    r = CliRunner().invoke(app, ["render", str(outside)], env={"MLENV_ROOT": str(root)})
    assert r.exit_code == 2 and "would write over that config's k8s/local/ tree" in r.stderr
    assert {p: p.read_bytes() for p in (root / "k8s").rglob("*") if p.is_file()} == before
    r = CliRunner().invoke(
        app,
        ["render", str(outside), "--out", str(root / "elsewhere")],
        env={"MLENV_ROOT": str(root)},
    )
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    "case",
    [
        "binary",
        "empty",
        "not-yaml",
        "top-level-list",
        "python-tag",
        "tag-int-invalid",
        "tag-timestamp-invalid",
        "key-tag-invalid",
        "rdma-gid-superscript",
        "rdma-gid-5000-digits",
        "int-5000-digits",
        "shm-size-overflow",
    ],
)
def test_hostile_input_no_traceback(root: Path, case: str) -> None:
    r = _run(root, str(CORPUS / f"{case}.yaml"))
    assert r.exit_code == 2
    assert "Traceback" not in r.output and "internal error" not in r.output
    assert r.stderr.startswith(f"{CORPUS}/{case}.yaml:")


def test_huge_file(root: Path, tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"notes: " + b"x" * (2 << 20) + b"\n")
    r = _run(root, str(big))
    assert r.exit_code == 2
    assert r.stderr.startswith(f"{big}:1:1: file is too large")


def test_unknown_name(root: Path) -> None:
    r = _run(root, "barcelna")
    assert r.exit_code == 2
    assert "unknown cluster 'barcelna' (did you mean 'barcelona'?)" in r.stderr


def test_no_configs(tmp_path: Path) -> None:
    r = _run(tmp_path)
    assert r.exit_code == 2
    assert "no cluster configs found" in r.stderr


def test_warnings_are_printed_but_do_not_fail(root: Path) -> None:
    f = root / "clusters" / "bare.yaml"
    f.write_text(
        "cluster: {name: bare, namespace: ns}\nnetwork:\n  rdma:\n    enabled: true\n    devices: auto\n"
    )
    r = _run(root, "bare")
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith(
        f"{f}:4:14: warning: network.rdma.enabled: RDMA is enabled but neither"
    )
    assert r.stdout.strip() == "ok: 1 file(s)"


UPSTREAM = REPO / "tests" / "data" / "upstream"
UPSTREAM_CASES = sorted(UPSTREAM.glob("*.yaml"))


@pytest.mark.parametrize("mode", ["rdma", "tcp"])
@pytest.mark.parametrize("case", UPSTREAM_CASES, ids=[c.stem for c in UPSTREAM_CASES])
def test_upstream_config_validates_and_renders_through_the_cli(
    root: Path, tmp_path: Path, case: Path, mode: str
) -> None:
    """The four upstream ml-dev-env configs, verbatim, through `mlenv validate` and
    `mlenv render` (before the fix: exit 2 on the quoted NCCL knobs and empty gpu_nodes)."""
    r = _run(root, str(case))
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "ok: 1 file(s)" and "error" not in r.stderr
    out = tmp_path / "k8s"
    r = CliRunner().invoke(
        app, ["render", str(case), "--mode", mode, "--out", str(out)], env={"MLENV_ROOT": str(root)}
    )
    assert r.exit_code == 0, r.output
    name = {"template": "my-cluster"}.get(case.stem, case.stem)
    written = sorted(p.name for p in (out / name / mode).iterdir())
    assert {"statefulset.yaml", "service.yaml", "networkpolicy.yaml"} <= set(written), written
