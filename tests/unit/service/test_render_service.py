"""``mlenv render``'s service without the CLI: plan, check and write, their lines through a
recording Notifier, their errors typed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlenv.errors import InfraError, InputError
from mlenv.platforms.base import Session
from mlenv.service import Notifier
from mlenv.service import render as service

REPO = Path(__file__).resolve().parents[3]


class Said:
    """A Notifier that keeps each stream's lines."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.note: list[str] = []

    def notifier(self) -> Notifier:
        return Notifier(out=self.out.append, note=self.note.append, err=self.err.append)


@pytest.fixture(scope="module", autouse=True)
def _schemas_loaded(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The manifests' schemas load once per process (about 0.6 s): paid here, so each test
    times only its own work."""
    warm = tmp_path_factory.mktemp("warm")
    (warm / "clusters").mkdir()
    shutil.copy(REPO / "clusters" / "local.yaml", warm / "clusters" / "local.yaml")
    _plan(warm, Said(), writing=False)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "clusters").mkdir()
    shutil.copy(REPO / "clusters" / "local.yaml", tmp_path / "clusters" / "local.yaml")
    return tmp_path


def _session(root: Path) -> Session:
    return Session(say=lambda _: None, warn=lambda _: None, root=root)


def _plan(
    root: Path, said: Said, *, writing: bool, cluster: str | None = "local"
) -> service.RenderPlan:
    return service.plan(
        root,
        _session(root),
        cluster=cluster,
        modes=("tcp",),
        nodes=None,
        out=None,
        writing=writing,
        say=said.notifier(),
    )


def test_a_plan_writes_nothing_and_check_names_every_missing_file(root: Path) -> None:
    said = Said()
    plan = _plan(root, said, writing=False)
    tree = root / "k8s" / "local" / "tcp"
    assert [d for d, _ in plan.planned] == [tree]
    assert not tree.exists()
    stale = service.check(plan)
    assert sorted(stale.differences) == sorted(
        f"{tree / name} (missing)" for name in plan.planned[0][1]
    )
    assert not stale.extra and said.out == said.err == []


def test_write_says_each_tree_once_written_and_check_then_finds_it_current(root: Path) -> None:
    said = Said()
    plan = _plan(root, said, writing=True)
    service.write(plan, prune=False, say=said.notifier())
    files = plan.planned[0][1]
    assert said.out == [f"wrote {len(files)} files to k8s/local/tcp/"]
    assert service.check(plan).differences == []
    edited = root / "k8s" / "local" / "tcp" / sorted(files)[0]
    edited.write_text(edited.read_text() + "# edited\n")
    assert service.check(plan).differences == [f"{edited} (differs)"]


def test_every_config_of_a_checkout_and_the_tree_of_a_deleted_one_is_extra(root: Path) -> None:
    said = Said()
    service.write(_plan(root, said, writing=True), prune=False, say=said.notifier())
    (root / "k8s" / "gone" / "tcp").mkdir(parents=True)
    shutil.copytree(
        root / "k8s" / "local" / "tcp", root / "k8s" / "gone" / "tcp", dirs_exist_ok=True
    )
    every = _plan(root, Said(), writing=False, cluster=None)
    stale = service.check(every)
    assert (
        stale.extra
        and f"{root / 'k8s' / 'gone'}/ (extra: no clusters/*.yaml renders it)" in stale.differences
    )
    said = Said()
    service.write(_plan(root, Said(), writing=True, cluster=None), prune=True, say=said.notifier())
    assert "removed the generated files of k8s/gone/ (no clusters/*.yaml renders it)" in said.out
    assert not any((root / "k8s" / "gone").rglob("*.yaml"))


def test_all_outside_a_checkout_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no clusters/ folder"):
        _plan(tmp_path, Said(), writing=False, cluster=None)


def test_a_write_that_fails_midway_says_what_was_written_then_raises(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlenv.generated

    plan = _plan(root, Said(), writing=True)
    first = plan.planned[0]
    plan = service.RenderPlan(
        plan.root,
        plan.out_root,
        plan.out,
        plan.every,
        plan.clusters,
        [first, (root / "k8s" / "local" / "full", first[1])],
    )
    real = mlenv.generated.write_tree

    def full_disk(files: dict[str, str], out_dir: Path) -> list[Path]:
        if out_dir.name == "full":
            raise OSError(28, "No space left on device", str(out_dir / "x.yaml"))
        return real(files, out_dir)

    monkeypatch.setattr(mlenv.generated, "write_tree", full_disk)
    said = Said()
    with pytest.raises(InfraError, match="No space left on device"):
        service.write(plan, prune=False, say=said.notifier())
    assert said.out == [f"wrote {len(first[1])} files to k8s/local/tcp/"]
