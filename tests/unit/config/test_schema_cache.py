"""A config that passed the schema once is not validated again: its digest is remembered
in mlenv's cache, named by the document, the schema and the validator's source."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlenv.config import load, schema
from mlenv.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(schema.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / "valid-configs"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / "co" / "clusters").mkdir(parents=True)
    shutil.copy(ROOT / "clusters" / "local.yaml", tmp_path / "co" / "clusters" / "local.yaml")
    return tmp_path / "co"


def _no_validator(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("the validator ran for a document remembered as valid")

    monkeypatch.setattr(schema, "_validator", refuse)


def test_a_valid_config_is_validated_once(
    cache: Path, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load("local", checkout)
    assert len(list(cache.iterdir())) == 1
    _no_validator(monkeypatch)
    assert load("local", checkout) == first


def test_a_changed_document_is_validated_again(
    cache: Path, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load("local", checkout)
    path = checkout / "clusters" / "local.yaml"
    path.write_text(path.read_text().replace("namespace: ", "namespace: x", 1))
    _no_validator(monkeypatch)
    with pytest.raises(AssertionError, match="the validator ran"):
        load("local", checkout)


def test_an_invalid_config_is_never_remembered(cache: Path, checkout: Path) -> None:
    path = checkout / "clusters" / "local.yaml"
    path.write_text(path.read_text() + "\nnot_a_key: 1\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="not_a_key"):
            load("local", checkout)
    assert not cache.exists() or list(cache.iterdir()) == []


def test_the_mark_names_the_schema_and_the_document() -> None:
    a = schema.valid_mark({"cluster": {"name": "a"}})
    b = schema.valid_mark({"cluster": {"name": "b"}})
    assert a is not None and b is not None and a != b
    assert a == schema.valid_mark({"cluster": {"name": "a"}})
    # a date YAML made is not the string that reads like it
    import datetime

    assert schema.valid_mark({"d": datetime.date(2026, 1, 1)}) != schema.valid_mark(
        {"d": "2026-01-01"}
    )


def test_an_unwritable_cache_only_means_validating_each_time(
    tmp_path: Path, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(schema.CACHE_ENV, str(blocker))
    assert load("local", checkout).name == "local"
    assert load("local", checkout).name == "local"


def test_no_home_means_no_cache_and_still_a_load(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's arbitrary UID may have no passwd entry and no HOME: Path.home() raises."""

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    for var in (schema.CACHE_ENV, "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert schema.cache_dir() is None and schema.valid_mark({"a": 1}) is None
    assert load("local", checkout).name == "local"
