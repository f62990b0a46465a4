"""The platform interface: one class with every verb, every config platform has an
implementation of it carrying its platform's traits, a verb a platform lacks is one line
and exit 2, and the CLI reaches every platform through it."""

from __future__ import annotations

import inspect
import shutil
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.cli.app import app
from mlenv.config.model import PLATFORM_TRAITS
from mlenv.config.model import Platform as PlatformName
from mlenv.errors import EXIT_INPUT, InputError
from mlenv.platforms.base import VERBS, Platform, Session, Unsupported
from mlenv.platforms.dispatch import PLATFORMS, platform_named

DATA = Path(__file__).resolve().parents[2] / "data" / "platforms"


def _method(verb: str) -> str:
    return verb.replace("-", "_")


def test_every_config_platform_has_an_implementation() -> None:
    assert set(PLATFORMS) == set(typing.get_args(PlatformName))
    assert set(PLATFORM_TRAITS) == set(typing.get_args(PlatformName))
    assert all(platform_named(n).name == n for n in PLATFORMS)


def test_the_verb_list_is_the_interface() -> None:
    methods = {
        n for n, v in vars(Platform).items() if inspect.isfunction(v) and not n.startswith("_")
    }
    assert methods == {_method(v) for v in VERBS} | {"storage_label"}


@pytest.mark.parametrize("name", sorted(PLATFORM_TRAITS))
def test_each_implementation_is_the_interface_and_declares_its_traits(name: PlatformName) -> None:
    impl = PLATFORMS[name]
    assert isinstance(impl, Platform)
    # the same facts the layers below read from a config of this platform
    assert impl.traits is PLATFORM_TRAITS[name]


@pytest.mark.parametrize("verb", VERBS)
def test_the_interface_says_not_supported_in_one_line_exit_2(verb: str) -> None:
    class Nowhere(Platform):
        name = "nowhere"
        hints = {"build": "use the other thing"}

    sig = inspect.signature(getattr(Platform, _method(verb)))
    args = [
        object() for p in list(sig.parameters.values())[1:] if p.kind is p.POSITIONAL_OR_KEYWORD
    ]
    kwargs = {p.name: None for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}
    with pytest.raises(Unsupported) as e:
        getattr(Nowhere(), _method(verb))(*args, **kwargs)
    assert isinstance(e.value, InputError) and e.value.exit_code == EXIT_INPUT
    msg = str(e.value)
    assert "\n" not in msg and f"mlenv {verb}: not supported on platform nowhere" in msg
    assert ("(use the other thing)" in msg) == (verb == "build")


def test_session_defaults_refuse_a_client() -> None:
    s = Session(say=print, warn=print, root=Path("."))
    with pytest.raises(InputError):
        s.client()


@pytest.fixture
def slurm_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "clusters").mkdir()
    shutil.copy(DATA / "cpu-slurm.yaml", tmp_path / "clusters" / "cpu-slurm.yaml")
    monkeypatch.setenv("MLENV_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "cpu-slurm"],
        ["url", "cpu-slurm", "jupyter"],
        ["gpu-info", "cpu-slurm"],
        ["port-forward", "cpu-slurm"],
        ["launch", "cpu-slurm"],
        ["secrets", "cpu-slurm"],
    ],
)
def test_a_kubernetes_verb_on_slurm_is_refused_before_any_cluster_call(
    slurm_checkout: Path, argv: list[str]
) -> None:
    # Before the interface these went straight to oc/kubectl with a Slurm config.
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == EXIT_INPUT, r.output
    assert f"mlenv {argv[0]}: not supported on platform slurm" in r.output
    assert "Traceback" not in r.output
